// Package sqlite is tetra's embedded store: one SQLite file holding chats,
// members, message history, read receipts and the outbox, through the
// pure-Go driver modernc.org/sqlite, so the binary builds with
// CGO_ENABLED=0 and a laptop needs no database server. One *DB is both the
// history.Store and the outbox.Log of the embedded mode; with Config.Outbox
// off it stores history only, for a deployment whose log is Kafka.
//
// The file runs in WAL mode with synchronous=FULL (G1: an accepted message
// survives power loss). All writes go through a single
// dedicated connection, so write transactions never interleave: Commit's
// history row comes first and its outbox rows follow in the same
// transaction (invariant I1; the schema's foreign keys are checked by a
// test, not on every insert: see writerDSN in config.go), and outbox
// positions, AUTOINCREMENT ids that are never reused, are assigned in commit
// order, which is what lets a follower scan forward from its last position
// without skipping a row. Reads go to a separate pool of query-only
// connections that read WAL snapshots and never wait for the writer. Several
// processes may open the same file; BEGIN IMMEDIATE and busy_timeout queue
// their writers.
//
// The schema is the numbered goose migrations of package
// ../migrations (folder sqlite/), applied by Open. History is ordered by
// history.id, the durable Seq; Page resolves a client's messageId cursor to
// it within the chat and starts over when it cannot (PROTOCOL.md §4).
// Commit keeps an in-process cache of member lists, validated in every write
// transaction against a membership epoch that AddMember bumps, so it is
// never stale even across processes. Times are stored as Unix nanoseconds
// and come back in UTC.
//
// AddMember, RemoveMember, the admin changes, CreateGroupWith and the reads
// of history.ChatAPI are the algorithms of ../storecore (DB embeds
// storecore.Methods); this package gives them its statements (chatapi.go:
// core, changeTx, readTx).
package sqlite
