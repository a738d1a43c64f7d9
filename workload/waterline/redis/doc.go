// Package redis is the waterline index kept in Redis: the paper's Tetris
// structures (a pending sorted set per client, a global sorted set of pins,
// abandon as DEL/HDEL/ZREM), for deployments where the index outlives one
// process or is shared by several. It runs the conformance suite in
// ../waterlinetest unchanged.
//
// Keys, all under Config.Prefix (default "tetra:"); <owner> is
// Config.Owner, one per process; <cid> a connection id; <p> a partition:
//
//	key                    type  contents
//	clients:<owner>        hash  cid -> JSON registration (id, user, device, start), then,
//	                             once a send listed a partition in parts:<cid>, NUL and
//	                             ";part;" items saying so
//	lease:<owner>          zset  one member per pending entry of the owner's clients:
//	                             posKey(16 hex) partKey(8) attempts(8) cid NUL messageId,
//	                             score = lease deadline, Unix ms
//	primed:<owner>         str   the identity recorded by MarkPrimed (absent = unprimed)
//	st:<cid>               hash  messageId -> "part:" then the lease member's first 32
//	                             bytes (posKey partKey attempts); HLEN is the client's
//	                             pending count (the paper's cnt)
//	pend:<cid>:<p>         zset  messageId, score = pos: the client's pending set of p
//	parts:<cid>            set   partitions where the client had a pending entry since
//	                             it registered (a superset of its pending sets' partitions:
//	                             it does not shrink, so steady sends and acks never write it)
//	pins:<p>               zset  cid, score = the client's lowest pending pos of p
//	                             (the paper's minids); absent when its set is empty
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
// The pending set is split per partition so that each pin is one ZRANGE 0 0;
// an SQL outbox has only partition 0, so it is the paper's single set.
//
// Atomicity. Connect and MarkPrimed are single commands; every other write
// is one Lua script (EVALSHA, falling back to EVAL when the server lost its
// script cache) that changes a client's entries, its count, its lease
// entries and its pins together, so SafeLine never sees a pin that
// disagrees with its set. Ack recomputes a pin from the set's minimum
// after removing entries, never from an acknowledged id: an out-of-order
// ack cannot lift a pin past a gap; Sent and Restore only add entries, so
// they lower the pin to the lowest one added (ZADD ... LT, which is why
// New refuses a Redis older than 6.2). Withdraw deletes the client's
// sets, state, lease entries, pins and registration in one script (never a
// forged pin advance). Sent, Ack, Restore (per 5,000 entries) and Withdraw
// are one round trip each (plus one, once per script and server, to load
// the script after NOSCRIPT), and so are SentMany and AckMany, whatever
// the number of clients: one script records them all, reading their
// registrations with one HMGET and writing the owner's lease set and each
// partition's pins once (scripts.go). Expired is a plain ZRANGEBYSCORE ...
// LIMIT on the owner's lease set, since its members carry every field it
// reports; SafeLine is one script over one partition's pins and holds, and
// hold expiry is judged by the server's TIME, not by any process's clock.
// Registrations, leases, holds and the primed flag are per owner, so in a
// multi-process deployment each process expires, resets and rebuilds only
// its own connections, while SafeLine takes every owner's pins and holds.
// The scripts build keys from the prefix, so the index needs one Redis
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
// primed. Identity is therefore "run_id/master_replid" from INFO: a restart
// changes run_id, a promotion changes master_replid (and the promoted
// server's run_id), while the address may stay the same behind a Service or
// a Sentinel. package delivery compares it with the identity recorded at
// MarkPrimed before every GC pass and, when it changed, rebuilds from its
// connections' windows (delivery.Engine.Rebuild) before deleting anything; an empty server (flush, restart without
// persistence) has no primed flag and is rebuilt too. failover_test.go plays
// both against real redis-server processes, with and without the check.
package redis
