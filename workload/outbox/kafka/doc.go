// Package kafka is the outbox in a Kafka topic (the paper's "rehearsal for
// the log" made real): Log implements outbox.Log over a topic partitioned by
// recipient, and Relay feeds it from history, which stays in the relational
// store and stays the truth. franz-go (kgo, kadm) never leaks out of this
// package; the server only passes a kafka:// URL (ParseURL).
//
// Partitioning. A recipient's records all go to PartitionOf(recipient),
// FNV-1a of the user id modulo the partition count, so each recipient's
// records are in Seq order in one partition and positions are that
// partition's offsets. The delivery engine keeps its waterline per partition
// and GC deletes per partition (DeleteRecords below the line), so a client
// that never acknowledges holds back its own partition only.
//
// Reads. Head is the last stable offset minus one (ListOffsets under
// read_committed); Scan is a read_committed fetch from the partition's
// leader, decoded with kgo.ProcessFetchPartition, which drops aborted
// records and transaction markers, so positions have gaps. Nothing below the
// last stable offset can change, and everything committed later lies above
// it: scanning forward from the last position skips nothing. Stats counts
// rows exactly within a few fetches (beyond, by offset span); DeleteBelow
// counts what it deletes the same way, then issues DeleteRecords.
//
// Exactly once. The relay reads history forward from its cursor (the last
// Seq relayed, history.Feed.HistoryAfter) and, in ONE Kafka transaction,
// writes one record per chat member of each message (the sender included,
// for the sender's other devices) and the advanced cursor as a record in a
// compacted cursor topic, keyed by the transactional id; then commits. On
// start, and after any failure, a relay session builds a new transactional
// producer: initializing its producer id fences every earlier holder of the
// transactional id and aborts whatever transaction it left open; only then
// does it read the last committed cursor with read_committed and resume
// from it. Records and cursor are committed together or not at all, so a
// crash before the commit leaves aborted records that no read_committed
// reader sees and a cursor that makes the next session relay them again, and
// a crash after it leaves a cursor past them: no duplicate, no gap. A zombie
// (a fenced relay that still runs) cannot commit. No record exists without
// its history row: the relay only writes what it read from history.
//
// Faults. Commits do not depend on Kafka: the accept pipeline writes
// history only, and wakes the relay. When the brokers are unreachable the
// relay's transaction times out, the session ends, and it retries with
// backoff from the committed cursor; once the brokers answer it catches up
// in batches. After each commit the relay hands the records (partition,
// offset) to the delivery engine's fast path, so live latency does not wait
// for a poll.
//
// Several processes. Every tetra process on a topic runs a relay with the
// same transactional id; they fence each other, so one relays at a time. A
// fenced relay stands by and takes over only when the oldest unrelayed
// message stays unrelayed for a whole StandbyInterval.
package kafka
