// Package outbox defines the delivery buffer: a log of (recipient, message)
// rows that live delivery works through, reached only through linear
// operations (see docs/design.md, "Two stores with two jobs").
//
// A Log is split into partitions. Each partition is an append-only sequence
// of rows addressed by a position that only grows: the BIGSERIAL id of the
// single partition of the SQL outbox, or the offset of a Kafka partition.
// The only operations are append (done inside the history transaction by
// history.Store.Commit for SQL logs, or by the relay for Kafka), Scan forward
// from a position, and DeleteBelow a position. There are no random reads and
// no per-row updates: per-row delivery state (sent, lease, attempts, acked)
// lives in the waterline index (package waterline), a rebuildable cache over
// the log.
//
// Rows are reclaimed by the Tetris waterline: the delivery package computes
// the safe-delete line as the minimum pin over connected clients and deletes
// the prefix below it. The conformance suite every Log runs is in
// ./outboxtest; it includes transactions that commit out of order, which a
// scan must never skip.
package outbox
