// Package delivery is live delivery: it pushes committed messages to the
// sockets of connected recipients until they acknowledge (G2), withdraws the
// clients that stop acknowledging, and reclaims the outbox below the Tetris
// waterline. docs/design.md explains every mechanism and default.
//
// Where things live. The Engine keeps the registry, the index and the lock
// that a rebuild takes exclusively, the partitions and the counters; each
// loop is a type of its own that owns its state and reaches the rest
// through its engine:
//
//	engine.go    Engine: configuration, New, Start/Stop, Register, Ack, Withdraw, Broadcast, Stats
//	registry.go  the registered connections, by id and by (user, device)
//	member.go    one connection: its push window, horizon and backlog marks
//	fastpath.go  the hand-off after commit (Committed, Handoff) and fastPath: its workers and queues
//	cover.go     the commits the fast path delivered whole, which the poller's scan passes unread
//	send.go      recording sends in the index and queueing their frames (both paths)
//	poller.go    poller: re-delivery, the catch-up behind full windows, the forward scan, the hold
//	ackbatch.go  ackBatcher: acknowledgements recorded together (Config.AckWait)
//	reapers.go   the three reapers' policies and passes
//	gc.go        collector: the waterline GC and the priming check
//	rebuild.go   rebuilding the index from the connections' windows
//	fleet.go     fleetLink: several processes sharing one index
//	exclude.go   a member's removal stops its live delivery (Exclude), BroadcastNow/From
//	nudge.go     the offline and withdrawn nudges (Config.Nudges)
//
// Two paths reach a socket. The fast path takes the accept pipeline's
// hand-off right after commit and writes to the recipients' connections
// through a bounded queue (default 8000) and a pool of workers (default 32
// with a remote index, GOMAXPROCS with the in-process one);
// when the queue is full it sheds, and the poller picks the row up. The
// poller reads the outbox oldest-first from its scan position, delivers what
// the fast path missed, and re-delivers what is unacknowledged past its lease
// (default 10 s). The fast path and the poller never both deliver a row to the
// same connection: each connection keeps the position up to which the poller
// examined its rows (its horizon) and the positions above it that the fast
// path already sent. A pass raises every connection that follows the scan
// at once, through the poller's floor (one number per partition), so its
// cost does not grow with the connections; a connection that falls behind
// makes the floor its own horizon.
//
// The push window: a connection never has more than maxPending message
// frames unacknowledged. A row that does not fit waits in the outbox (the
// connection is behind from there); acknowledgements wake the poller, which
// catches the connection up in commit order. The poller's hold stays at or
// below the first row a connection behind has not been sent, so GC keeps it.
//
// Every send is recorded in the waterline index (package waterline): the
// connection's pending set, with attempts and lease, mirroring its window.
// Three reapers, each a separate policy (reapers.go), withdraw a connection
// from live delivery: idle (no pong or frame for pingInterval+pingTimeout,
// close 4004), overload (judged by the time its window was full with
// messages waiting behind it, never by the backlog's age: a full window
// that made no progress for pendingTimeout, or, since the connection fell
// behind, a window full for longer than lease x maxDeliveryAttempts in all
// and for at least three quarters of that time, keepUpShare; close 4003)
// and attempts (a message due again after maxDeliveryAttempts sends, close
// 4002). Withdrawal removes the whole pending set and closes that exact
// connection; a verdict about a connection that has already been
// superseded or closed is a no-op, because the connection object is the
// epoch.
//
// GC computes the safe-delete line as the minimum over the index's pins and
// the poller's hold (rows live delivery has not examined, or still owes a
// connection behind its window, are never deleted: this closes the paper's
// in-flight window for connected clients), caps it by the grace (a row
// younger than gcGrace is never deleted), lifts it by the age backstop (rows
// older than outboxRetention go regardless), and deletes the prefix below
// it. The index computes the line only while it is primed with the identity
// GC saw (waterline.ErrNotPrimed otherwise). Before any delete after a
// start, a reset or a change of the index server's identity, GC rebuilds
// the index from the connections' windows; an index error deletes nothing.
//
// Several processes (fleet.go): when the index is shared (it implements
// waterline.Fleet, as the Redis index does), each process delivers only to
// its own connections while the safe line is global; the key prefix is
// bound to one outbox (Fleet.BindOutbox); devices are claimed in the index
// so a newer connection on any process supersedes the older one (4001);
// every hand-off publishes a wake-up that runs the other processes' pollers
// at once; processes heartbeat (Config.OwnerTTL) and GC reaps the index
// state of processes whose heartbeat lapsed; GC deletes nothing while any
// live process has not rebuilt since the index's identity changed.
package delivery
