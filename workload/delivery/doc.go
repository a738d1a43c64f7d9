// Package delivery is live delivery: it pushes committed messages to the
// sockets of connected recipients until they acknowledge (G2), withdraws the
// clients that stop acknowledging, and reclaims the outbox below the Tetris
// waterline.
//
// Two paths reach a socket. The fast path takes the accept pipeline's
// hand-off right after commit and writes to the recipients' connections
// through a bounded queue (default 8000) and a pool of workers (default 32);
// when the queue is full it sheds, and the poller picks the row up. The
// poller reads the outbox oldest-first from its scan position, delivers what
// the fast path missed, and re-delivers what is unacknowledged past its lease
// (default 10 s). The fast path and the poller never both deliver a row to the
// same connection: each connection keeps the position up to which the poller
// examined its rows (its horizon) and the positions above it that the fast
// path already sent.
//
// Every send is recorded in the waterline index (package waterline): the
// connection's pending set, with attempts and lease. Three reapers, each a
// separate policy (policy.go), withdraw a connection from live delivery: idle
// (no pong or frame for pingInterval+pingTimeout, close 4004), overload
// (pending > maxPending at a poller tick, close 4003) and attempts (a message due again after
// maxDeliveryAttempts sends, close 4002). Withdrawal removes the whole
// pending set and closes that exact connection; a verdict about a connection
// that has already been superseded or closed is a no-op, because the
// connection object is the epoch.
//
// GC computes the safe-delete line as the minimum over the index's pins and
// the poller's hold (its scan position: rows it has not examined yet are
// never deleted, which closes the paper's in-flight window for connected
// clients), caps it by the grace (a row younger than gcGrace is never
// deleted), lifts it by the age backstop (rows older than outboxRetention go
// regardless), and deletes the prefix below it. Before any delete after a
// start, a reset or a change of the index server's identity, GC rebuilds the
// index from a full scan of the outbox; an index error deletes nothing.
//
// Several processes (fleet.go): when the index is shared (it implements
// waterline.Fleet, as the Redis index does), each process delivers only to
// its own connections while the safe line is global; devices are claimed
// in the index so a newer connection on any process supersedes the older
// one (4001); every hand-off publishes a wake-up that runs the other
// processes' pollers at once; processes heartbeat (Config.OwnerTTL) and GC
// reaps the index state of processes whose heartbeat lapsed; GC deletes
// nothing while any live process has not rebuilt since the index's
// identity changed.
package delivery
