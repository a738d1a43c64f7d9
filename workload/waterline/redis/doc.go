// Package redis is the waterline index shared through Redis, for
// deployments where several processes share one outbox: the paper's
// global sorted set of pins per partition, the holds and the priming
// record live in Redis, where every process's GC reads them; each
// client's pending entries (the paper's pending set, with attempts and
// leases) live in the process that holds its connection (pending.go), and
// only their pins, when they move, are written to Redis. It runs the
// conformance suite in ../waterlinetest unchanged.
//
// Where the state lives. A client's pending entries are only ever read by
// the process that holds its connection: Expired lists the leases of this
// owner's clients, Withdraw and Reset drop them, and a rebuild restores
// them from the process's connections' windows (package delivery), which
// hold them anyway. So they are kept in process, in a memory.Index of this
// Index value's clients, and Redis holds what other processes read: the
// registrations, each client's pin per partition, the holds, the primed
// flags and the fleet's records. Until 2026-12-06 the pending sets, state
// and leases were Redis keys too, written by a script per send and per
// ack: at 4,000 msg/s in pairs that was 7.3 commands and 26-34 µs of
// Redis CPU per message, most of it the scripts' own work
// (docs/benchmarks.md, seventh pass).
//
// Keys, all under Config.Prefix (default "tetra:"); <owner> is
// Config.Owner, one per process; <cid> a connection id; <p> a partition:
//
//	key                    type  contents
//	clients:<owner>        hash  cid -> JSON registration (id, user, device, start), then,
//	                             once a pin listed a partition in parts:<cid>, NUL and
//	                             ";part;" items saying so
//	primed:<owner>         str   the identity recorded by MarkPrimed (absent = unprimed)
//	parts:<cid>            set   partitions where the client had a pin since it registered
//	                             (it does not shrink, so steady pins never write it)
//	pins:<p>               zset  cid, score = the client's lowest pending pos of p
//	                             (the paper's minids), as its process computed it;
//	                             absent when it has nothing pending there
//	pinseq:<owner>         str   the number of the last pins script run for the owner
//	holds:<p>              zset  owner NUL holder, score = pos
//	holdexp:<p>            zset  owner NUL holder, score = expiry, Unix ms by Redis TIME
//	holdparts              set   partitions that ever had a hold
//	owners                 set   owners that heartbeat (the fleet, see below)
//	alive:<owner>          str   the live process's token, while its heartbeat is fresh (PX = owner TTL)
//	reaped:<owner>         str   tombstone: another process reaped this owner (PX 1 h)
//	dev:<user>:<dev>       str   the device's newest claim epoch, Redis TIME in µs (PX 24 h);
//	                             user and device query-escaped (":" too)
//	outbox                 str   the outbox this prefix indexes (outbox.Log.ID), see BindOutbox
//	typing:<chat>:<user>   str   "1" while a typing frame of (user, chat) was forwarded within
//	                             the last 2 s on any process (PX 2 s; TypingGate); escaped as dev:
//	fleet                  chan  pub/sub: "c"+JSON claim, "w"+owner wake-up, "b"+JSON broadcast
//
// and one key outside the prefix, since it describes the server itself:
//
//	tetra-identity-seen:<identity>  str  Redis TIME (ms) when a process first saw
//	                                     this server identity (PX 7 d)
//
// Key names hold no NUL byte or other control character (ids are
// refused with one), so `redis-cli --scan --pattern 'prefix*' | xargs
// redis-cli del` cleans a prefix up. Members of the lease and hold sets do
// use NUL as a separator; they are values, not names.
//
// Keys of the version before (lease:<owner>, st:<cid>, pend:<cid>:<p>)
// are deleted by Reset and by the reaping of an owner (resetOwner), so a
// process of this version starting on an older deployment's Redis clears
// its own owner's at its first rebuild.
//
// Atomicity and order. Connect and MarkPrimed are single commands;
// Withdraw, Reset, SafeLine, Hold and the pins are Lua scripts (EVALSHA,
// falling back to EVAL when the server lost its script cache). Sent,
// SentMany, Ack, AckMany and Restore change the process's pending sets and
// then wait for a flight (pending.go): one pins script that checks the
// registrations of its clients with one HMGET and writes, for each
// registered one, the pins that moved since the last flight wrote them
// (ZADD of the new lowest position, ZREM when nothing is pending). One
// flight is in the air at a time and each reads the pins when it starts,
// so Redis ends up with every client's pins of a moment after its last
// change, however its calls interleave; calls that arrive meanwhile go
// together in the next flight. A call returns once a flight that started
// after its change landed: the pin of an entry Sent records is in Redis
// before its frame is queued, as before. A pin that moved but was not
// written (the flight failed) is written by the next flight, and SafeLine
// writes such pins before it reads any line, or fails: a GC pass of this
// process never reads a line that misses a pin this process moved (a GC
// pass of another process may, until the next flight writes it; before
// this design a send whose script failed was never written at all). A flight that failed may still reach
// the server later: every pins script carries a number that only grows
// (pinseq:<owner>), and Redis refuses one older than the last it ran; the
// clients of a failed flight are written in full by the next one. A client whose
// registration Redis no longer holds (a flush, a reap) gets
// ErrUnknownClient from the next call that moves its pins, and nothing is
// written for it. Expired reads the process's leases. SafeLine is one
// script over one partition's pins and holds, and hold expiry is judged
// by the server's TIME, not by any process's clock.
//
// Registrations, holds and the primed flag are per owner (and leases per
// process), so in a multi-process deployment each process expires, resets
// and rebuilds only its own connections, while SafeLine takes every
// owner's pins and holds. The scripts build keys from the prefix, so the index needs one Redis
// (replicated or behind Sentinel), not Redis Cluster. New refuses a server
// whose maxmemory-policy may evict keys without a TTL: an evicted pin would
// be a silent over-delete.
//
// The fleet (waterline.Fleet; fleet.go). Processes sharing a prefix tell
// each other three things through the same Redis. A new connection claims
// its (user, device): one script raises the device's epoch (from the
// server's TIME, never backwards) and PUBLISHes the claim, so the process
// holding the older connection closes it (4001). A commit PUBLISHes a
// wake-up, so every other process's poller scans at once. And every process
// heartbeats alive:<owner>; a GC pass of any process reaps (resetOwner, as
// Reset does) every listed owner whose alive key expired, so a crashed
// process's pins stop holding the outbox after the owner TTL instead of the
// 26 h backstop, and leaves a tombstone that tells the reaped process, if it
// was only stalled, to drop its connections. Laggards lists live owners not
// primed with the current identity, so that after a failover no process
// deletes before every process rebuilt, and IdentityAge dates the first
// sighting of an identity, so that no process deletes until every live one
// had a heartbeat to list itself again. The TTL'd keys (alive, reaped,
// dev, identity-seen) are the only keys with an expiry: under a volatile-* eviction policy
// Redis may evict them early, which makes a live owner look dead (it is
// reaped, drops its connections and rebuilds: safe, but disruptive) —
// prefer noeviction.
//
// Failover. Redis is a cache over the outbox, and a failover can lose
// writes without losing the primed flag: a replica promoted before it
// received the last writes keeps an old copy of the pins and says it is
// primed; a pin it lacks, or holds higher than the process last wrote it,
// lets GC delete rows a client has not acknowledged (the pins moving
// lower or going are written again at the next move; those that did not
// move are not). Identity is therefore "run_id/master_replid" from INFO: a restart
// changes run_id, a promotion changes master_replid (and the promoted
// server's run_id), while the address may stay the same behind a Service or
// a Sentinel. package delivery compares it with the identity recorded at
// MarkPrimed before every GC pass and, when it changed, rebuilds from its
// connections' windows (delivery.Engine.Rebuild) before deleting anything; an empty server (flush, restart without
// persistence) has no primed flag and is rebuilt too. failover_test.go plays
// both against real redis-server processes, with and without the check.
package redis
