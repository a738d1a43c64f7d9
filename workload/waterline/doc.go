// Package waterline defines the Tetris index: the rebuildable cache of
// per-connection delivery state from which the outbox's safe-delete line is
// computed.
//
// For every connected client (one connection, identified by its connection
// id, which is the connection's epoch) the index keeps the set of outbox
// entries sent and not yet acknowledged, each with its position, attempt
// count and lease. The client's pin is the lowest position in that set;
// acknowledging removes exactly one entry, so an out-of-order
// acknowledgement never lifts a pin past a gap (paper: "the pin is
// contiguous, by construction"). Withdrawing a client deletes its whole
// pending set, count and pin at once: it is never a forged acknowledgement
// (invariant I2). Holds are pins owned by something other than a client, such
// as a poller's position below which it has examined every row.
//
// The safe-delete line of a partition is the minimum over pins and holds;
// rows strictly below it may be deleted. The index is a cache over the
// durable outbox, never the truth: an unprimed index, or one whose backing
// server changed identity (a Redis failover), must be rebuilt before any
// delete (package delivery does that, from its connections' push windows:
// Engine.Rebuild; the rows not sent yet stay pinned by the poller's hold),
// and an index error deletes nothing.
//
// Implementations: ./memory (in process) and ../waterline/redis; both run the
// conformance suite in ./waterlinetest.
package waterline
