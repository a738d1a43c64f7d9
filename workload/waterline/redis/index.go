package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tetra-messenger/tetra/internal/redisinfo"
	"github.com/tetra-messenger/tetra/workload/waterline"
)

// MaxPos bounds the positions (and hold positions) the index accepts:
// sorted-set scores are doubles, exact for integers up to 2^53. SQL ids and
// Kafka offsets stay far below it.
const MaxPos = 1 << 53

// restoreChunk is the most entries one Restore script call carries, so that
// a rebuild of many large windows never blocks Redis for long.
const restoreChunk = 5000

// clientJSON is a registration as stored in the owner's clients hash.
type clientJSON struct {
	ID     string          `json:"id"`
	User   string          `json:"user"`
	Device string          `json:"device"`
	Start  map[int32]int64 `json:"start,omitempty"`
}

// Connect registers c under this index's owner with an empty pending set,
// or, if c.ID is registered, replaces its User, Device and Start and keeps
// its pending set. One HSET. The id must be non-empty and free of NUL bytes
// (the lease set separates ids with NUL).
func (x *Index) Connect(ctx context.Context, c waterline.Client) error {
	if c.ID == "" {
		return errors.New("redis: connect: empty client id")
	}
	if strings.IndexByte(c.ID, 0) >= 0 {
		return fmt.Errorf("redis: connect: client id %q contains a NUL byte", c.ID)
	}
	b, err := json.Marshal(clientJSON{ID: c.ID, User: c.User, Device: c.Device, Start: c.Start})
	if err != nil {
		return fmt.Errorf("redis: connect %q: %w", c.ID, err)
	}
	cctx, cancel := x.call(ctx)
	defer cancel()
	if err := x.rdb.HSet(cctx, x.kClients, c.ID, b).Err(); err != nil {
		return unavailable("connect", err)
	}
	return nil
}

// Withdraw removes the client, if this owner registered it, with its whole
// pending set, state, lease entries and pins in one script; it reports
// whether the client was registered. An id this owner did not register is a
// no-op returning false, even if keys of that id exist (they can only be
// another owner's, or a lost registration's, and leaving them keeps rows,
// never loses them).
func (x *Index) Withdraw(ctx context.Context, clientID string) (bool, error) {
	cctx, cancel := x.call(ctx)
	defer cancel()
	n, err := withdrawScript.Run(cctx, x.rdb,
		[]string{x.kClients, x.kState(clientID), x.kLease, x.kParts(clientID)},
		x.cfg.Prefix, clientID).Int64()
	if err != nil {
		return false, unavailable("withdraw", err)
	}
	return n == 1, nil
}

// Sent records entries as sent to the client with a lease until leaseUntil,
// in one script: a MessageID not pending is added with Attempts 1; a pending
// one gets Attempts+1 and the new lease and keeps its Partition and Pos.
// Entries are applied in order, so a MessageID repeated within entries
// counts twice. The pins of the partitions that gained an entry are
// lowered to it. It returns the client's pending count, or
// waterline.ErrUnknownClient with nothing written.
//
// Leases are stored in whole milliseconds, rounded up: an entry never
// becomes due before leaseUntil. Positions must lie within ±MaxPos.
//
// go-redis retries a call whose connection broke; if the first attempt had
// run, a resent entry counts one attempt too many, which can only make the
// attempts reaper withdraw its client one delivery early.
func (x *Index) Sent(ctx context.Context, clientID string, entries []waterline.Entry, leaseUntil time.Time) (int, error) {
	if err := checkEntries("sent", clientID, entries); err != nil {
		return 0, err
	}
	args := make([]any, 0, 5+4*len(entries))
	args = appendSent(append(args, x.cfg.Prefix, countFlag(true)), clientID, entries, ceilMillis(leaseUntil))
	n, err := x.runOne(ctx, "sent", sentScript, args)
	if err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, unknown("sent", clientID)
	}
	return int(n), nil
}

// SentMany is Sent for each batch, in one script call (so in one round
// trip, and atomic as a whole, which is more than waterline.ManySender
// asks): the registrations of all the batches' clients are read with one
// command, and the lease set and each partition's pins are written once
// for all of them. It does not count pending entries (nobody asks).
//
// Concurrent SentMany calls share script calls, as a group commit does:
// while one script is in flight, the calls that arrive wait and then go
// together in the next (each batch with its own lease), so the fast
// path's workers, which each record a small batch, cost Redis one script
// call per round trip instead of one each. An idle index runs a call at
// once; a waiting call waits for at most the script in flight. The group
// runs under the context of the call that runs it.
//
// Errors are per batch, as waterline.ManySender says; a batch with a
// position beyond ±MaxPos fails alone, before the call.
func (x *Index) SentMany(ctx context.Context, batches []waterline.SentBatch, leaseUntil time.Time) []error {
	c := &sentCall{batches: batches, lease: ceilMillis(leaseUntil), errs: make([]error, len(batches))}
	for i, b := range batches {
		if c.errs[i] = checkEntries("sent", b.ClientID, b.Entries); c.errs[i] == nil {
			c.todo = append(c.todo, i)
		}
	}
	if len(c.todo) > 0 {
		x.sends.do(ctx, c, x.sentGroup)
	}
	return c.errs
}

// sentCall is one SentMany call: its batches (those in todo go to Redis),
// their lease in Unix ms and their errors.
type sentCall struct {
	batches []waterline.SentBatch
	todo    []int
	lease   int64
	errs    []error

	done chan struct{} // closed when recorded, or when handed the lead
	lead []*sentCall   // the group this call runs, when it runs one
}

// sentGroup records the batches of every call of group with one
// sentScript call.
func (x *Index) sentGroup(ctx context.Context, group []*sentCall) {
	n := 2
	for _, c := range group {
		for _, i := range c.todo {
			n += 3 + 4*len(c.batches[i].Entries)
		}
	}
	args := append(make([]any, 0, n), x.cfg.Prefix, countFlag(false))
	clients := 0
	for _, c := range group {
		for _, i := range c.todo {
			args = appendSent(args, c.batches[i].ClientID, c.batches[i].Entries, c.lease)
			clients++
		}
	}
	res, err := x.runScript(ctx, "sent", sentScript, args, clients)
	k := 0
	for _, c := range group {
		for _, i := range c.todo {
			switch {
			case err != nil:
				c.errs[i] = err
			case res[k] < 0:
				c.errs[i] = unknown("sent", c.batches[i].ClientID)
			}
			k++
		}
	}
}

// coalescer runs concurrent calls in groups (see SentMany): while a
// group's script is in flight, the calls that arrive wait; when it lands,
// the first of them runs all of them as the next group.
type coalescer struct {
	mu      sync.Mutex
	busy    bool // a group is in flight
	waiting []*sentCall

	groups atomic.Int64  // groups run (script calls), for tests
	queued chan struct{} // tests: told of every call that waits
}

// do runs c, in a group of its own when nothing is in flight, else in the
// next group.
func (q *coalescer) do(ctx context.Context, c *sentCall, run func(context.Context, []*sentCall)) {
	q.mu.Lock()
	if q.busy {
		c.done = make(chan struct{})
		q.waiting = append(q.waiting, c)
		q.mu.Unlock()
		if q.queued != nil {
			q.queued <- struct{}{}
		}
		<-c.done
		if c.lead == nil {
			return // recorded in another call's group
		}
	} else {
		q.busy = true
		q.mu.Unlock()
		c.lead = []*sentCall{c}
	}
	q.groups.Add(1)
	run(ctx, c.lead)
	for _, o := range c.lead {
		if o != c {
			close(o.done)
		}
	}
	q.land()
}

// land ends a flight: the calls that waited for it are the next group,
// which the first of them runs.
func (q *coalescer) land() {
	q.mu.Lock()
	next := q.waiting
	q.waiting = nil
	q.busy = len(next) > 0
	q.mu.Unlock()
	if len(next) > 0 {
		next[0].lead = next
		close(next[0].done)
	}
}

// appendSent appends one client's part of sentScript's arguments.
func appendSent(args []any, clientID string, entries []waterline.Entry, lease int64) []any {
	args = append(args, clientID, len(entries), lease)
	for _, e := range entries {
		args = append(args, e.MessageID, e.Partition, e.Pos, leaseKey(e.Pos, e.Partition, 1))
	}
	return args
}

// AckMany is Ack for each batch, in one script call (one round trip,
// atomic as a whole), reading the registrations with one command and
// writing the lease set and each partition's pins once for all the
// batches, as SentMany. Errors are per batch, as waterline.ManyAcker says.
func (x *Index) AckMany(ctx context.Context, batches []waterline.AckBatch) []error {
	errs := make([]error, len(batches))
	if len(batches) == 0 {
		return errs
	}
	ids := 0
	for _, b := range batches {
		ids += len(b.MessageIDs)
	}
	args := x.ackArgs(len(batches), ids, false)
	for _, b := range batches {
		args = appendAck(args, b.ClientID, b.MessageIDs)
	}
	res, err := x.runScript(ctx, "ack", ackScript, args, len(batches))
	for i, b := range batches {
		switch {
		case err != nil:
			errs[i] = err
		case res[i] < 0:
			errs[i] = unknown("ack", b.ClientID)
		}
	}
	return errs
}

// ackArgs starts ackScript's arguments for clients clients with ids ids in
// all.
func (x *Index) ackArgs(clients, ids int, count bool) []any {
	args := make([]any, 0, 2+2*clients+ids)
	return append(args, x.cfg.Prefix, countFlag(count))
}

// appendAck appends one client's part of ackScript's arguments.
func appendAck(args []any, clientID string, messageIDs []string) []any {
	args = append(args, clientID, len(messageIDs))
	for _, id := range messageIDs {
		args = append(args, id)
	}
	return args
}

func countFlag(count bool) string {
	if count {
		return "1"
	}
	return "0"
}

// runOne runs a many-client script for one client and returns its result.
func (x *Index) runOne(ctx context.Context, op string, script *goredis.Script, args []any) (int64, error) {
	res, err := x.runScript(ctx, op, script, args, 1)
	if err != nil {
		return 0, err
	}
	return res[0], nil
}

// runScript runs a many-client script (sentScript, ackScript) for clients
// clients and returns its result for each. The script goes by SHA and is
// loaded once more when Redis lost it (a restart, a failover: NOSCRIPT,
// nothing written). An error wraps waterline.ErrUnavailable.
func (x *Index) runScript(ctx context.Context, op string, script *goredis.Script, args []any, clients int) ([]int64, error) {
	cctx, cancel := x.call(ctx)
	defer cancel()
	res, err := script.Run(cctx, x.rdb, []string{x.kClients, x.kLease}, args...).Int64Slice()
	if err == nil && len(res) != clients {
		err = fmt.Errorf("the script returned %d results for %d clients", len(res), clients)
	}
	if err != nil {
		return nil, unavailable(op, err)
	}
	return res, nil
}

// Restore adds entries to the client's pending set, each with its Attempts
// and LeaseUntil (zero: due at once; stored in whole milliseconds, rounded
// up), skipping MessageIDs already pending. Entries go in scripts of up to
// 5,000; each partition's lowest entry goes in the first, so the client's
// pins are at their final value from the first call on. It returns
// waterline.ErrUnknownClient for a client this owner did not register.
func (x *Index) Restore(ctx context.Context, clientID string, entries []waterline.Pending) error {
	for _, e := range entries { // all or nothing: check before the first chunk
		if err := checkPos("restore", clientID, e.Entry); err != nil {
			return err
		}
	}
	ordered := lowestFirst(entries)
	for len(ordered) > 0 {
		n := min(restoreChunk, len(ordered))
		args := make([]any, 0, 2+5*n)
		args = append(args, x.cfg.Prefix, clientID)
		for _, e := range ordered[:n] {
			var lease int64
			if !e.LeaseUntil.IsZero() {
				lease = ceilMillis(e.LeaseUntil)
			}
			args = append(args, e.MessageID, e.Partition, e.Pos, leaseKey(e.Pos, e.Partition, e.Attempts), lease)
		}
		cctx, cancel := x.call(ctx)
		res, err := restoreScript.Run(cctx, x.rdb, []string{x.kClients, x.kState(clientID), x.kLease}, args...).Int64()
		cancel()
		if err != nil {
			return unavailable("restore", err)
		}
		if res < 0 {
			return unknown("restore", clientID)
		}
		ordered = ordered[n:]
	}
	return nil
}

// lowestFirst returns a copy of entries with each partition's lowest
// position moved to the front.
func lowestFirst(entries []waterline.Pending) []waterline.Pending {
	low := map[int32]int{}
	for i, e := range entries {
		if j, ok := low[e.Partition]; !ok || e.Pos < entries[j].Pos {
			low[e.Partition] = i
		}
	}
	out := make([]waterline.Pending, 0, len(entries))
	idx := slices.Sorted(maps.Values(low))
	for _, i := range idx {
		out = append(out, entries[i])
	}
	for i, e := range entries {
		if _, found := slices.BinarySearch(idx, i); !found {
			out = append(out, e)
		}
	}
	return out
}

func checkPos(op, clientID string, e waterline.Entry) error {
	if e.Pos > MaxPos || e.Pos < -MaxPos {
		return fmt.Errorf("redis: %s %q: position %d of %q is beyond ±2^53", op, clientID, e.Pos, e.MessageID)
	}
	return nil
}

func checkEntries(op, clientID string, entries []waterline.Entry) error {
	for _, e := range entries {
		if err := checkPos(op, clientID, e); err != nil {
			return err
		}
	}
	return nil
}

// Ack removes the given message ids from the client's pending set in one
// script, ignoring ids that are not pending, and recomputes the pins of the
// partitions it touched from what remains (removed from the partition's
// pins when nothing remains). It returns the pending count after, or
// waterline.ErrUnknownClient with nothing written.
func (x *Index) Ack(ctx context.Context, clientID string, messageIDs []string) (int, error) {
	args := appendAck(x.ackArgs(1, len(messageIDs), true), clientID, messageIDs)
	n, err := x.runOne(ctx, "ack", ackScript, args)
	if err != nil {
		return 0, err
	}
	if n < 0 {
		return 0, unknown("ack", clientID)
	}
	return int(n), nil
}

// Expired returns up to limit pending entries of this owner's clients whose
// lease ended at or before now, earliest lease first, equal leases lowest
// Pos first. It is one plain ZRANGEBYSCORE ... WITHSCORES LIMIT over the
// owner's lease set, whose members carry every field reported (see
// scripts.go). limit <= 0 returns nothing without a call. It changes
// nothing.
func (x *Index) Expired(ctx context.Context, now time.Time, limit int) ([]waterline.Pending, error) {
	if limit <= 0 {
		return nil, nil
	}
	cctx, cancel := x.call(ctx)
	defer cancel()
	zs, err := x.rdb.ZRangeByScoreWithScores(cctx, x.kLease, &goredis.ZRangeBy{
		Min: "-inf", Max: strconv.FormatInt(floorMillis(now), 10), Count: int64(limit),
	}).Result()
	if err != nil {
		return nil, unavailable("expired", err)
	}
	out := make([]waterline.Pending, 0, len(zs))
	for _, z := range zs {
		p, err := parseLease(z)
		if err != nil {
			return nil, fmt.Errorf("redis: expired: %w", err)
		}
		out = append(out, p)
	}
	return out, nil
}

// parseLease decodes a lease member: posKey(16) partKey(8) attempts(8 hex)
// clientID NUL messageID, scored by the lease in Unix ms.
func parseLease(z goredis.Z) (waterline.Pending, error) {
	m, _ := z.Member.(string)
	bad := func() (waterline.Pending, error) {
		return waterline.Pending{}, fmt.Errorf("malformed lease member %q", m)
	}
	if len(m) < 33 {
		return bad()
	}
	pos, err1 := parsePosKey(m[:16])
	part, err2 := strconv.ParseUint(m[16:24], 16, 32)
	att, err3 := strconv.ParseUint(m[24:32], 16, 31)
	cid, id, ok := strings.Cut(m[32:], "\x00")
	if err1 != nil || err2 != nil || err3 != nil || !ok {
		return bad()
	}
	return waterline.Pending{
		ClientID:   cid,
		Entry:      waterline.Entry{MessageID: id, Partition: int32(uint32(part) ^ (1 << 31)), Pos: pos},
		Attempts:   int(att),
		LeaseUntil: time.UnixMilli(int64(z.Score)),
	}, nil
}

// Hold pins partition at pos for holder until ttl passes on the Redis
// server's clock (TIME) without another Hold by the same holder for the same
// partition; pos < 0 releases the hold. Holders are kept per owner, so two
// processes using the same holder name do not replace each other's holds.
func (x *Index) Hold(ctx context.Context, holder string, partition int32, pos int64, ttl time.Duration) error {
	var ttlMS int64
	if pos >= 0 {
		if ttl <= 0 {
			return fmt.Errorf("redis: hold %q: ttl %v must be positive", holder, ttl)
		}
		if pos > MaxPos {
			return fmt.Errorf("redis: hold %q: position %d is beyond 2^53", holder, pos)
		}
		ttlMS = int64((ttl + time.Millisecond - 1) / time.Millisecond)
	}
	if pos < 0 {
		pos = -1
	}
	cctx, cancel := x.call(ctx)
	defer cancel()
	err := holdScript.Run(cctx, x.rdb,
		[]string{x.kHolds(partition), x.kHoldExp(partition), x.kHoldParts},
		x.cfg.Owner+"\x00"+holder, pos, ttlMS, itoa32(partition)).Err()
	if err != nil {
		return unavailable("hold", err)
	}
	return nil
}

// SafeLine returns the minimum, for partition, over the pins of every
// registered client (of every owner sharing the prefix: one process's GC
// must respect another's connections) and the live holds, in one script
// that also drops the holds that expired by the server's clock. The same
// script first checks that the server's identity (INFO run_id and
// master_replid, as Identity) is identity, that this owner's primed flag
// records identity and that every live owner's does; otherwise it reads no
// pin and SafeLine returns waterline.ErrNotPrimed.
func (x *Index) SafeLine(ctx context.Context, partition int32, identity string) (int64, bool, error) {
	cctx, cancel := x.call(ctx)
	defer cancel()
	line, err := safeLineScript.Run(cctx, x.rdb,
		[]string{x.kPins(partition), x.kHolds(partition), x.kHoldExp(partition), x.kPrimed, x.kOwners()},
		identity, x.cfg.Prefix).Int64()
	switch {
	case errors.Is(err, goredis.Nil):
		return 0, false, nil
	case err != nil && strings.HasPrefix(err.Error(), "NOTPRIMED"):
		return 0, false, fmt.Errorf("redis: safe line: %s: %w", strings.TrimPrefix(err.Error(), "NOTPRIMED "), waterline.ErrNotPrimed)
	case err != nil:
		return 0, false, unavailable("safe line", err)
	}
	return line, true, nil
}

// Clients lists the clients this owner registered, sorted by ID.
func (x *Index) Clients(ctx context.Context) ([]waterline.Client, error) {
	cctx, cancel := x.call(ctx)
	defer cancel()
	all, err := x.rdb.HGetAll(cctx, x.kClients).Result()
	if err != nil {
		return nil, unavailable("clients", err)
	}
	out := make([]waterline.Client, 0, len(all))
	for id, v := range all {
		if i := strings.IndexByte(v, 0); i >= 0 {
			v = v[:i] // the partitions listed in parts (scripts.go)
		}
		var c clientJSON
		if err := json.Unmarshal([]byte(v), &c); err != nil {
			return nil, fmt.Errorf("redis: clients: registration of %q: %w", id, err)
		}
		out = append(out, waterline.Client{ID: id, User: c.User, Device: c.Device, Start: c.Start})
	}
	slices.SortFunc(out, func(a, b waterline.Client) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// Reset forgets, in one script, this owner's clients with their pending
// sets, state, lease entries and pins, this owner's holds and its primed
// flag. Other owners sharing the prefix are untouched. Identity is
// unchanged.
//
// Reset finds a client's keys through this owner's registrations. Keys of a
// client whose registration was lost (an owner that went away for good, a
// registration deleted by hand) are not found, and their pins survive. That
// can only keep MORE outbox rows, never fewer: a pin only ever protects
// rows. The outbox age backstop (26 h by default) bounds what they keep.
func (x *Index) Reset(ctx context.Context) error {
	cctx, cancel := x.call(ctx)
	defer cancel()
	err := resetScript.Run(cctx, x.rdb,
		[]string{x.kClients, x.kLease, x.kPrimed, x.kHoldParts},
		x.cfg.Prefix, x.cfg.Owner).Err()
	if err != nil {
		return unavailable("reset", err)
	}
	return nil
}

// State returns this owner's priming record: Primed is false until
// MarkPrimed, again after Reset, and whenever the server lost the key (a
// flush, a restart without persistence, a fresh instance).
func (x *Index) State(ctx context.Context) (waterline.State, error) {
	cctx, cancel := x.call(ctx)
	defer cancel()
	id, err := x.rdb.Get(cctx, x.kPrimed).Result()
	switch {
	case errors.Is(err, goredis.Nil):
		return waterline.State{}, nil
	case err != nil:
		return waterline.State{}, unavailable("state", err)
	}
	return waterline.State{Primed: true, Identity: id}, nil
}

// MarkPrimed sets this owner's primed flag, recording identity.
func (x *Index) MarkPrimed(ctx context.Context, identity string) error {
	cctx, cancel := x.call(ctx)
	defer cancel()
	if err := x.rdb.Set(cctx, x.kPrimed, identity, 0).Err(); err != nil {
		return unavailable("mark primed", err)
	}
	return nil
}

// Identity returns the key of the server the index talks to,
// redisinfo.Identity.Key ("run_id/master_replid" from INFO server and INFO
// replication, pipelined, read by the parser the operator uses too). A
// restart changes run_id; a promotion of a replica changes master_replid
// (and the promoted server's run_id differs from the old master's anyway).
// The address is deliberately not part of it: behind a stable Service or a
// Sentinel it may not change.
func (x *Index) Identity(ctx context.Context) (string, error) {
	cctx, cancel := x.call(ctx)
	defer cancel()
	var server, repl *goredis.StringCmd
	_, err := x.rdb.Pipelined(cctx, func(p goredis.Pipeliner) error {
		server = p.Info(cctx, "server")
		repl = p.Info(cctx, "replication")
		return nil
	})
	if err != nil {
		return "", unavailable("identity", err)
	}
	id := redisinfo.Parse(server.Val() + "\n" + repl.Val()).Identity()
	if id.RunID == "" {
		return "", errors.New("redis: identity: INFO server reports no run_id")
	}
	return id.Key(), nil
}

// Stats counts this owner's clients (HLEN of its clients hash) and their
// pending entries (ZCARD of its lease set: every pending entry has exactly
// one lease), read in one MULTI.
func (x *Index) Stats(ctx context.Context) (waterline.Stats, error) {
	cctx, cancel := x.call(ctx)
	defer cancel()
	var clients, pending *goredis.IntCmd
	_, err := x.rdb.TxPipelined(cctx, func(p goredis.Pipeliner) error {
		clients = p.HLen(cctx, x.kClients)
		pending = p.ZCard(cctx, x.kLease)
		return nil
	})
	if err != nil {
		return waterline.Stats{}, unavailable("stats", err)
	}
	return waterline.Stats{Clients: int(clients.Val()), Pending: int(pending.Val())}, nil
}

// leaseKey is an entry's lm (scripts.go), the fixed-width head of its
// lease member: pos in 16 lowercase hex digits and the partition in 8,
// each with its sign bit flipped so that byte order is numeric order
// (posKey, partKey), then attempts in 8 (clamped to 0..2^31-1, what
// parseLease reads).
func leaseKey(pos int64, part int32, attempts int) string {
	var b [32]byte
	putHex(b[:16], uint64(pos)^(1<<63))
	putHex(b[16:24], uint64(uint32(part)^(1<<31)))
	putHex(b[24:], uint64(min(max(attempts, 0), math.MaxInt32)))
	return string(b[:])
}

// putHex writes u into b as len(b) lowercase hex digits, the low ones last.
func putHex(b []byte, u uint64) {
	const digits = "0123456789abcdef"
	for i := len(b) - 1; i >= 0; i-- {
		b[i] = digits[u&0xf]
		u >>= 4
	}
}

func parsePosKey(s string) (int64, error) {
	u, err := strconv.ParseUint(s, 16, 64)
	if err != nil || len(s) != 16 {
		return 0, fmt.Errorf("bad position key %q", s)
	}
	return int64(u ^ (1 << 63)), nil
}

// maxMillis keeps millisecond scores exact as doubles (about ±285,000
// years around 1970).
const maxMillis = MaxPos - 1

// floorMillis is t in Unix milliseconds rounded down, clamped.
func floorMillis(t time.Time) int64 {
	if s := t.Unix(); s > maxMillis/1000 {
		return maxMillis
	} else if s < -maxMillis/1000 {
		return -maxMillis
	}
	return t.UnixMilli()
}

// ceilMillis is t in Unix milliseconds rounded up, clamped.
func ceilMillis(t time.Time) int64 {
	ms := floorMillis(t)
	if t.Nanosecond()%int(time.Millisecond) != 0 && ms < maxMillis && ms > -maxMillis {
		ms++
	}
	return ms
}
