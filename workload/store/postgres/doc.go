// Package postgres is tetra's PostgreSQL store, the paper's deployment: chats,
// members, message history, read receipts and the outbox in one database,
// through pgx/v5 and a pgxpool connection pool. One *DB is both the
// history.Store and the outbox.Log of the postgres mode; with Config.Outbox
// off it stores history only, for a deployment whose log is Kafka. The schema
// is the numbered goose migrations of package ../migrations (folder
// postgres/), applied by Open, one process at a time; it has the shape of the
// SQLite schema: history.id is a BIGSERIAL (the Seq), the outbox keeps one
// record per message (outbox_messages, schema 8) whose n rows take the log
// positions id-n+1 .. id drawn from the sequence outbox_id_seq, times are bigint Unix nanoseconds (timestamptz would drop
// the nanoseconds of SentAt), and Page resolves a client's messageId cursor
// to its Seq within the chat, starting over when it cannot (PROTOCOL.md §4).
//
// A BIGSERIAL id is drawn when a row is inserted, not when its transaction
// commits, so concurrent transactions can commit out of id order, and a
// follower scanning forward (id > last) would skip for ever a row that
// commits after a higher one it has already seen. The store closes this with
// one transaction-level advisory lock, AppendLockKey: every Commit takes
// pg_advisory_xact_lock(AppendLockKey) before it draws any history id or
// outbox position and holds it until its commit, which PostgreSQL makes visible before it
// releases the lock. Ids are therefore drawn in commit order across every
// process sharing the database, and both the outbox scan and the history
// Seq (which Page cursors and a Kafka relay follow) skip nothing. Head and
// Stats take the same lock in shared mode before reading the outbox
// sequence, so the head never names a row whose commit is still in flight.
// The sequences must keep CACHE 1.
//
// The lock serializes appends, which group commit makes cheap: a Commit
// carries a whole batch (36 messages by default) in one round trip when
// every member list it needs is cached and no draft is a resend (it reads
// nothing and lets history's unique keys refuse a taken key or id, then
// starts over with the reads), otherwise in two, and the lock is held for
// the last only. The first of two opens the transaction and
// reads, in one pipelined batch, the membership epoch, the idempotency keys
// and message ids already used, and the member lists not in the in-process
// cache; the second takes the lock, inserts every history row and every
// outbox record with one statement over unnest arrays (drawing the
// records' positions with one setval, and counting their rows in
// outbox_appended for Stats), and commits. That
// statement inserts nothing if the membership epoch (bumped by AddMember)
// moved since the lists were read, and Commit then starts over, so the
// member cache is never stale, even across processes. Every failure to
// reach or use the database wraps history.ErrUnavailable (outbox.ErrUnavailable
// for the log methods); errors name the database as user@host:port/name,
// never with its password.
//
// The message path declares no foreign key (migration 7): PostgreSQL
// checks each referencing row with a query of its own, and the two keys
// were a quarter of the database's CPU at 4,000 msg/s. What they guarded
// holds by construction, as in the SQLite store and the Kafka log: a
// history row only for a chat whose members were read, by its transaction
// or (cached) at the membership epoch its insert checks (chats are never
// deleted, unknown chats never cached), a message's outbox record in the
// statement that inserts its history row, and PurgeHistory deleting both in
// one statement (invariant I1); TestReferencesHoldWithoutForeignKeys
// checks it.
//
// DeleteBelow deletes the records wholly below its position, in
// transactions of at most 2,000 positions, and moves outbox_line.below
// into the record the position falls in (its rows under the line are gone
// for every reader). It and PurgeHistory take the line's row lock first
// and count the rows they remove there; Commit never takes it, so a
// commit never waits for GC.
//
// Sessions the database ends under the pool (a restart, a failover,
// pg_terminate_backend): before the pool hands an idle connection out,
// DB.shouldPing peeks at its socket (peek_unix.go) and has a connection
// whose session ended pinged and replaced. A statement whose session
// ended while it ran fails; a Commit is then tried once more
// (DB.noteLost), and so is a read, a read-only transaction whole, or the
// BEGIN of a write's transaction (again).
// DB.SessionStats counts all three.
//
// AddMember, RemoveMember, the admin changes, CreateGroupWith and the reads
// of history.ChatAPI are the algorithms of ../storecore (DB embeds
// storecore.Methods); this package gives them its statements (chatapi.go:
// core, changeTx, readTx; a change's writes go in one pipelined batch).
package postgres
