package memory

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"hash/maphash"
	"maps"
	"math"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tetra-messenger/tetra/workload/waterline"
)

var _ waterline.Index = (*Index)(nil)

// numShards is the number of client shards; a power of two. Sends and
// acknowledgements of clients in different shards never contend.
const numShards = 64

// Index is an in-process waterline.Index. The zero value is not usable; call
// New or NewWithClock. Every method is safe for concurrent use. The ctx
// arguments are ignored: no method waits on I/O, and none fails except on a
// bad argument or an unknown client.
var _ waterline.InProcess = (*Index)(nil)

type Index struct {
	now      func() time.Time
	identity string
	seed     maphash.Seed

	// meta guards holds and the priming record. Lock order: meta before
	// any shard; Expired and Reset take the shards in ascending order.
	meta           sync.Mutex
	holds          map[holdKey]hold
	primed         bool
	primedIdentity string

	shards [numShards]shard
}

// shard holds the clients whose id hashes to it and a lease heap over all of
// their pending entries.
type shard struct {
	mu      sync.RWMutex
	clients map[string]*client
	list    []*client // the same clients, for fast iteration; client.listIdx
	leases  leaseHeap
	pending int    // entries in leases
	seq     uint64 // last entry.seq assigned

	_ [64]byte // keep neighbouring shards' locks off one cache line
}

// client is one registered connection.
type client struct {
	info    waterline.Client
	listIdx int
	pending map[string]*entry // by MessageID
	parts   []partPins        // one per partition ever sent to; usually one
}

// partPins is a client's pending entries of one partition.
type partPins struct {
	part int32
	pins pinHeap
}

type holdKey struct {
	holder string
	part   int32
}

type hold struct {
	pos   int64
	until int64 // Unix nanoseconds; live while now < until
}

// New returns an empty, unprimed index whose holds expire by the wall clock.
func New() *Index { return NewWithClock(time.Now) }

// NewWithClock returns an empty, unprimed index that reads the time from now
// to expire holds (nil means time.Now). Leases are not read from the clock:
// Sent and Expired take their times as arguments.
//
// Its Identity is a random string drawn here: a process-local index keeps
// its identity for its whole life and is lost only with the process.
func NewWithClock(now func() time.Time) *Index {
	if now == nil {
		now = time.Now
	}
	x := &Index{
		now:      now,
		identity: "memory:" + rand.Text(),
		seed:     maphash.MakeSeed(),
		holds:    make(map[holdKey]hold),
	}
	for i := range x.shards {
		x.shards[i].clients = make(map[string]*client)
	}
	return x
}

func (x *Index) shard(clientID string) *shard {
	return &x.shards[maphash.String(x.seed, clientID)&(numShards-1)]
}

func unknown(op, clientID string) error {
	return fmt.Errorf("memory: %s %q: %w", op, clientID, waterline.ErrUnknownClient)
}

// Connect registers c with an empty pending set, or, if c.ID is registered,
// replaces its User, Device and Start and keeps its pending set. Start is
// copied. An empty ID is an error. O(1).
func (x *Index) Connect(_ context.Context, c waterline.Client) error {
	if c.ID == "" {
		return errors.New("memory: connect: empty client id")
	}
	c.Start = maps.Clone(c.Start)
	s := x.shard(c.ID)
	s.mu.Lock()
	defer s.mu.Unlock()
	if cl := s.clients[c.ID]; cl != nil {
		cl.info = c
		return nil
	}
	cl := &client{info: c, listIdx: len(s.list), pending: make(map[string]*entry)}
	s.clients[c.ID] = cl
	s.list = append(s.list, cl)
	return nil
}

// Withdraw removes the client and every pending entry of it in one step
// under its shard's lock, so no concurrent SafeLine or Expired sees part of
// it; it reports whether the client was registered. Withdrawing an
// unregistered id is a no-op returning false. O(k log n) for k pending
// entries in a shard holding n, or O(n) when k is a large share of n.
func (x *Index) Withdraw(_ context.Context, clientID string) (bool, error) {
	s := x.shard(clientID)
	s.mu.Lock()
	defer s.mu.Unlock()
	cl := s.clients[clientID]
	if cl == nil {
		return false, nil
	}
	delete(s.clients, clientID)
	last := len(s.list) - 1
	s.list[cl.listIdx] = s.list[last]
	s.list[cl.listIdx].listIdx = cl.listIdx
	s.list[last] = nil
	s.list = s.list[:last]

	k := len(cl.pending)
	if k > len(s.leases)/4 {
		// Rebuilding is cheaper than k removals.
		kept := s.leases[:0]
		for _, e := range s.leases {
			if e.c != cl {
				kept = append(kept, e)
			}
		}
		clear(s.leases[len(kept):])
		s.leases = kept
		s.leases.init()
	} else {
		for _, e := range cl.pending {
			s.leases.remove(e.leaseIdx)
		}
	}
	s.pending -= k
	cl.pending, cl.parts = nil, nil
	return true, nil
}

// pins returns the client's pin heap for part, creating it if create is set.
func (cl *client) pins(part int32, create bool) *pinHeap {
	for i := range cl.parts {
		if cl.parts[i].part == part {
			return &cl.parts[i].pins
		}
	}
	if !create {
		return nil
	}
	cl.parts = append(cl.parts, partPins{part: part})
	return &cl.parts[len(cl.parts)-1].pins
}

// add makes a new pending entry; the caller holds s.mu.
func (s *shard) add(cl *client, en waterline.Entry, attempts int, lease int64) {
	s.seq++
	e := &entry{
		id:       en.MessageID,
		part:     en.Partition,
		pos:      en.Pos,
		attempts: attempts,
		lease:    lease,
		seq:      s.seq,
		c:        cl,
	}
	cl.pending[en.MessageID] = e
	cl.pins(en.Partition, true).push(e)
	s.leases.push(e)
	s.pending++
}

// Sent records entries as sent to the client with a lease until leaseUntil.
// A MessageID not pending is added with Attempts 1; a pending one gets
// Attempts+1 and the new lease, and keeps its Partition and Pos. Entries are
// applied in order, so a MessageID repeated within entries counts twice. It
// returns the client's pending count over all partitions, or
// waterline.ErrUnknownClient. O(len(entries) · log n).
func (x *Index) Sent(_ context.Context, clientID string, entries []waterline.Entry, leaseUntil time.Time) (int, error) {
	lease := unixNanos(leaseUntil)
	s := x.shard(clientID)
	s.mu.Lock()
	defer s.mu.Unlock()
	cl := s.clients[clientID]
	if cl == nil {
		return 0, unknown("sent", clientID)
	}
	for _, en := range entries {
		if e := cl.pending[en.MessageID]; e != nil {
			e.attempts++
			e.lease = lease
			s.seq++
			e.seq = s.seq
			s.leases.fix(e.leaseIdx)
			continue
		}
		s.add(cl, en, 1, lease)
	}
	return len(cl.pending), nil
}

// Ack removes the given message ids from the client's pending set, ignoring
// ids that are not pending; each removal takes exactly that entry out of the
// client's pin heap, so the pin rises only to the next pending position.
// It returns the pending count after, or waterline.ErrUnknownClient.
// O(len(messageIDs) · log n).
func (x *Index) Ack(_ context.Context, clientID string, messageIDs []string) (int, error) {
	s := x.shard(clientID)
	s.mu.Lock()
	defer s.mu.Unlock()
	cl := s.clients[clientID]
	if cl == nil {
		return 0, unknown("ack", clientID)
	}
	for _, id := range messageIDs {
		e := cl.pending[id]
		if e == nil {
			continue
		}
		delete(cl.pending, id)
		cl.pins(e.part, false).remove(e.pinIdx)
		s.leases.remove(e.leaseIdx)
		s.pending--
	}
	return len(cl.pending), nil
}

// Pin is a client's pin of one partition: Pos is its lowest pending
// position there when Set; Set is false when it has nothing pending
// there (it had, since it registered).
type Pin struct {
	Partition int32
	Pos       int64
	Set       bool
}

// PinsOf appends to dst the client's pin of every partition it was sent
// entries of since it registered, in the order it first was, and reports
// whether the client is registered. It reads under the client's shard
// lock, so the pins are those of one moment. A shared index mirrors them
// (package waterline/redis keeps per-message state here and writes only
// the pins to Redis). O(partitions).
func (x *Index) PinsOf(dst []Pin, clientID string) ([]Pin, bool) {
	s := x.shard(clientID)
	s.mu.RLock()
	defer s.mu.RUnlock()
	cl := s.clients[clientID]
	if cl == nil {
		return dst, false
	}
	for i := range cl.parts {
		p := Pin{Partition: cl.parts[i].part}
		if h := cl.parts[i].pins; len(h) > 0 {
			p.Pos, p.Set = h[0].pos, true
		}
		dst = append(dst, p)
	}
	return dst, true
}

// Restore adds entries to the client's pending set, each with its
// Attempts and LeaseUntil (a zero LeaseUntil is due at once), skipping
// MessageIDs already pending, which keep their attempts, lease and
// position. It returns waterline.ErrUnknownClient for an unregistered
// client.
func (x *Index) Restore(_ context.Context, clientID string, entries []waterline.Pending) error {
	s := x.shard(clientID)
	s.mu.Lock()
	defer s.mu.Unlock()
	cl := s.clients[clientID]
	if cl == nil {
		return unknown("restore", clientID)
	}
	for _, p := range entries {
		if cl.pending[p.MessageID] != nil {
			continue
		}
		var lease int64
		if !p.LeaseUntil.IsZero() {
			lease = unixNanos(p.LeaseUntil)
		}
		s.add(cl, p.Entry, max(p.Attempts, 0), lease)
	}
	return nil
}

// Expired returns up to limit pending entries whose lease ended at or before
// now, earliest lease first (ties: lowest Pos first). limit <= 0 returns
// none. It changes nothing.
//
// Cost: O(shards + k log k) for k returned entries, whatever the number of
// entries pending: it walks the shards' lease heaps best-first without
// touching entries that are not due: about 1 µs when nothing is due, a few
// milliseconds for a batch of 6,000. It holds every shard's read lock for
// that walk, so the result is one consistent snapshot and sends and acks
// wait for it.
func (x *Index) Expired(_ context.Context, now time.Time, limit int) ([]waterline.Pending, error) {
	if limit <= 0 {
		return nil, nil
	}
	due := unixNanos(now)
	for i := range x.shards {
		x.shards[i].mu.RLock()
	}
	defer func() {
		for i := range x.shards {
			x.shards[i].mu.RUnlock()
		}
	}()
	var cand cursorHeap
	for i := range x.shards {
		if h := x.shards[i].leases; len(h) > 0 && h[0].lease <= due {
			cand.push(newCursor(h[0], i, 0))
		}
	}
	if len(cand) == 0 {
		return nil, nil
	}
	out := make([]waterline.Pending, 0, min(limit, 256))
	for len(out) < limit && len(cand) > 0 {
		c := cand.pop()
		e := c.e
		out = append(out, waterline.Pending{
			ClientID:   e.c.info.ID,
			Entry:      waterline.Entry{MessageID: e.id, Partition: e.part, Pos: e.pos},
			Attempts:   e.attempts,
			LeaseUntil: time.Unix(0, e.lease),
		})
		h := x.shards[c.sh].leases
		for j := 2*int(c.i) + 1; j <= 2*int(c.i)+2 && j < len(h); j++ {
			if h[j].lease <= due {
				cand.push(newCursor(h[j], int(c.sh), j))
			}
		}
	}
	return out, nil
}

// Hold pins partition at pos for holder (rows at or above pos are kept),
// replacing that holder's previous hold on partition, until ttl passes on
// the index's clock without another Hold by the same holder for the same
// partition. A holder's holds on different partitions are independent.
// pos < 0 releases the hold; otherwise ttl must be positive.
func (x *Index) Hold(_ context.Context, holder string, partition int32, pos int64, ttl time.Duration) error {
	k := holdKey{holder: holder, part: partition}
	if pos < 0 {
		x.meta.Lock()
		delete(x.holds, k)
		x.meta.Unlock()
		return nil
	}
	if ttl <= 0 {
		return fmt.Errorf("memory: hold %q: ttl %v must be positive", holder, ttl)
	}
	until := unixNanos(x.now().Add(ttl))
	x.meta.Lock()
	x.holds[k] = hold{pos: pos, until: until}
	x.meta.Unlock()
	return nil
}

// holdLineLocked returns the minimum live hold of partition and forgets
// expired holds; the caller holds meta. Holds are few (one per poller and
// partition), so it scans them all.
func (x *Index) holdLineLocked(partition int32) (line int64, ok bool) {
	now := unixNanos(x.now())
	for k, h := range x.holds {
		if h.until <= now {
			delete(x.holds, k)
			continue
		}
		if k.part == partition && (!ok || h.pos < line) {
			line, ok = h.pos, true
		}
	}
	return line, ok
}

// SafeLine returns the minimum, for partition, of the registered clients'
// pins (each one's lowest pending Pos) and the live holds; ok is false when
// nothing pins the partition.
//
// Cost: O(holds + clients), independent of the number of pending entries
// (each pin is a heap root): some tens of µs for 5,000 clients (see
// BenchmarkSafeLine5000Clients). Shards are read one at a time, so sends and
// acks are never blocked for the whole pass.
//
// The holds are read before the pins. A holder promises that every row
// below its hold was sent, and recorded with Sent, before it raised the
// hold; reading the hold first means any such Sent completed before the
// pins are read, so a row the holder passed over is never missed. (Reading
// the pins first could miss a send made between the two reads and then see
// the raised hold.)
//
// It first checks, under the lock that Reset and MarkPrimed take, that the
// index is primed with identity (and that identity is this index's own):
// otherwise waterline.ErrNotPrimed.
func (x *Index) SafeLine(_ context.Context, partition int32, identity string) (int64, bool, error) {
	x.meta.Lock()
	primed := x.primed && x.primedIdentity == identity && x.identity == identity
	if !primed {
		x.meta.Unlock()
		return 0, false, fmt.Errorf("memory: safe line: primed %v as %q, asked for %q: %w", x.primed, x.primedIdentity, identity, waterline.ErrNotPrimed)
	}
	line, ok := x.holdLineLocked(partition)
	// Holding meta while the pins are read keeps a Reset from running in
	// between (Reset takes meta first, then every shard).
	defer x.meta.Unlock()
	for i := range x.shards {
		s := &x.shards[i]
		s.mu.RLock()
		for _, cl := range s.list {
			h := cl.pins(partition, false)
			if h == nil || len(*h) == 0 {
				continue
			}
			if p := (*h)[0].pos; !ok || p < line {
				line, ok = p, true
			}
		}
		s.mu.RUnlock()
	}
	return line, ok, nil
}

// Clients lists the registered clients, sorted by ID. Start maps are copies.
// O(clients log clients).
func (x *Index) Clients(_ context.Context) ([]waterline.Client, error) {
	var out []waterline.Client
	for i := range x.shards {
		s := &x.shards[i]
		s.mu.RLock()
		for _, cl := range s.list {
			c := cl.info
			c.Start = maps.Clone(c.Start)
			out = append(out, c)
		}
		s.mu.RUnlock()
	}
	slices.SortFunc(out, func(a, b waterline.Client) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// Reset forgets every client, pending entry and hold and clears the priming
// record, atomically. Identity is unchanged.
func (x *Index) Reset(_ context.Context) error {
	x.meta.Lock()
	defer x.meta.Unlock()
	for i := range x.shards {
		x.shards[i].mu.Lock()
	}
	for i := range x.shards {
		s := &x.shards[i]
		s.clients = make(map[string]*client)
		s.list, s.leases, s.pending = nil, nil, 0
		s.mu.Unlock()
	}
	x.holds = make(map[holdKey]hold)
	x.primed, x.primedIdentity = false, ""
	return nil
}

// State returns the priming record: Primed is false from New until
// MarkPrimed and again after Reset.
func (x *Index) State(_ context.Context) (waterline.State, error) {
	x.meta.Lock()
	defer x.meta.Unlock()
	return waterline.State{Primed: x.primed, Identity: x.primedIdentity}, nil
}

// MarkPrimed sets the primed flag and records identity.
func (x *Index) MarkPrimed(_ context.Context, identity string) error {
	x.meta.Lock()
	defer x.meta.Unlock()
	x.primed, x.primedIdentity = true, identity
	return nil
}

// InProcess reports true: no method waits on I/O (waterline.InProcess).
func (x *Index) InProcess() bool { return true }

// Identity returns the random identity drawn when the index was created;
// it never changes, not even on Reset.
func (x *Index) Identity(_ context.Context) (string, error) {
	return x.identity, nil
}

// Stats counts registered clients and pending entries. O(shards).
func (x *Index) Stats(_ context.Context) (waterline.Stats, error) {
	var st waterline.Stats
	for i := range x.shards {
		s := &x.shards[i]
		s.mu.RLock()
		st.Clients += len(s.list)
		st.Pending += s.pending
		s.mu.RUnlock()
	}
	return st, nil
}

// unixNanos returns t as Unix nanoseconds, clamped to the int64 range
// (years 1678 to 2262), so that leases compare as plain integers and far
// past or future times keep their order.
func unixNanos(t time.Time) int64 {
	const maxSec = math.MaxInt64/int64(time.Second) - 1
	switch sec := t.Unix(); {
	case sec < -maxSec:
		return math.MinInt64
	case sec > maxSec:
		return math.MaxInt64
	}
	return t.UnixNano()
}
