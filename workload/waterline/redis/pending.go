package redis

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetra-messenger/tetra/workload/waterline"
	"github.com/tetra-messenger/tetra/workload/waterline/memory"
)

// Per-message state lives in the process (doc.go, "Where the state
// lives"): a client's pending entries, their attempts and leases are in
// x.local, a memory.Index of this Index value's clients, and Redis holds
// only what other processes read: the registrations, the pins, the holds
// and the primed flags. Every Sent, SentMany, Ack, AckMany and Restore
// changes x.local and then writes the pins of its clients that moved,
// waiting until they are in Redis.
//
// Pins are written by one flight at a time (x.pins, a coalescer: calls
// that arrive while a flight is in the air go together in the next), and a
// flight writes each client's pins as x.local has them when the flight
// starts, never a value computed earlier. So however calls of one client
// interleave, the last flight leaves Redis with the client's pins of a
// moment after its last change, and a call returns only once a flight that
// started after its change landed: a Sent's pin is in Redis before the
// frame it records is queued. written remembers what each client's pins
// are in Redis, so a flight writes only the pins that moved: in a
// one-to-one chat that keeps up, one ZADD when a send finds the client
// with nothing pending and one ZREM when the ack empties it again.

// pinState is what the flights know of the pins in Redis.
type pinState struct {
	mu sync.Mutex
	// written holds each client's pins as the last flight that wrote them
	// left them in Redis.
	written map[string][]memory.Pin
	// retry lists the clients whose pins a flight failed to write, until
	// one writes them: every flight writes them too, and SafeLine gives no
	// line while any is listed.
	retry map[string]struct{}
	// unsure lists the clients whose pins in Redis are not known (a flight
	// that failed may still have run on the server; a Reset came between
	// a flight's script and its answer): the next flight writes every
	// partition of theirs, the pins that are set and the ZREM of those
	// that are not, as if nothing had been written.
	unsure map[string]struct{}
	// gen counts Resets (see unsure).
	gen uint64
}

// pinCall is one call that needs its clients' pins in Redis.
type pinCall struct {
	clients []string
	errs    []error // per client: nil, or an error wrapping ErrUnknownClient or ErrUnavailable
	err     error   // the flight's error, if its script failed

	done chan struct{} // closed when recorded, or when handed the lead
	lead []*pinCall    // the group this call runs, when it runs one
}

// syncPins writes the pins of clients (after their change in x.local)
// and returns one error per client: nil, unknown when Redis holds no
// registration of it (a flush, a reap: nothing written for it), or
// unavailable.
func (x *Index) syncPins(ctx context.Context, clients []string) *pinCall {
	c := &pinCall{clients: clients, errs: make([]error, len(clients))}
	x.pins.do(ctx, c, x.pinGroup)
	return c
}

// flushRetries writes the pins a failed flight left unwritten, if any,
// and fails unless none is left.
func (x *Index) flushRetries(ctx context.Context) error {
	x.pst.mu.Lock()
	n := len(x.pst.retry)
	x.pst.mu.Unlock()
	if n == 0 {
		return nil
	}
	if err := x.syncPins(ctx, nil).err; err != nil {
		return err
	}
	x.pst.mu.Lock()
	n = len(x.pst.retry)
	x.pst.mu.Unlock()
	if n > 0 {
		return unavailable("pins", fmt.Errorf("%d clients' pins are not written yet", n))
	}
	return nil
}

// pinsChunk is the most clients one pins script carries, so that a flight
// after an outage (every client in retry) never blocks Redis for long.
const pinsChunk = 1000

// pinGroup is one flight: it writes, with one pinsScript call per
// pinsChunk clients, the pins that moved of every client of group's calls
// and of every client a failed flight left (pinState.retry). It runs
// under ctx's values but not its cancellation, bounded by the index's
// timeout per script: the group's other calls wait for it too.
func (x *Index) pinGroup(ctx context.Context, group []*pinCall) {
	seen := map[string]bool{}
	var list []string
	for _, c := range group {
		for _, id := range c.clients {
			if !seen[id] {
				seen[id] = true
				list = append(list, id)
			}
		}
	}
	x.pst.mu.Lock()
	for id := range x.pst.retry {
		if !seen[id] {
			seen[id] = true
			list = append(list, id)
		}
	}
	gen := x.pst.gen
	x.pst.mu.Unlock()

	errOf := map[string]error{}
	var flightErr error
	for len(list) > 0 {
		n := min(pinsChunk, len(list))
		if err := x.writePins(ctx, list[:n], gen, errOf); err != nil {
			flightErr = err
		}
		list = list[n:]
	}
	for _, c := range group {
		if flightErr != nil {
			c.err = unavailable("pins", flightErr)
		}
		for i, id := range c.clients {
			c.errs[i] = errOf[id]
		}
	}
}

// writePins writes the pins that moved of clients with one pinsScript
// call, records in errOf the error of each client that has one, and
// returns the script's error.
func (x *Index) writePins(ctx context.Context, clients []string, gen uint64, errOf map[string]error) error {
	seq := x.seq.Add(1)
	args := []any{x.cfg.Prefix, seq}
	var sent, clean []string
	var pins [][]memory.Pin
	for _, id := range clients {
		cur, ok := x.local.PinsOf(nil, id)
		if !ok {
			clean = append(clean, id) // withdrawn or reset: its pins went with its registration
			continue
		}
		x.pst.mu.Lock()
		old, known := x.pst.written[id], true
		if _, u := x.pst.unsure[id]; u {
			old, known = nil, false
		}
		x.pst.mu.Unlock()
		n0 := len(args)
		args = append(args, id, 0)
		for _, p := range cur {
			if !known || moved(p, old) {
				pos := ""
				if p.Set {
					pos = strconv.FormatInt(p.Pos, 10)
				}
				args = append(args, itoa32(p.Partition), pos)
			}
		}
		if moves := (len(args) - n0 - 2) / 2; moves == 0 {
			args = args[:n0]
			clean = append(clean, id)
		} else {
			args[n0+1] = moves
			sent = append(sent, id)
			pins = append(pins, cur)
		}
	}
	var res []int64
	var err error
	if len(sent) > 0 {
		x.flights.Add(1)
		cctx, cancel := x.call(context.WithoutCancel(ctx))
		res, err = pinsScript.Run(cctx, x.rdb, []string{x.kClients, x.kPinSeq}, args...).Int64Slice()
		cancel()
		if err == nil && len(res) != len(sent) {
			err = fmt.Errorf("the script returned %d results for %d clients", len(res), len(sent))
		}
	}
	x.pst.mu.Lock()
	defer x.pst.mu.Unlock()
	for _, id := range clean {
		delete(x.pst.retry, id)
	}
	for k, id := range sent {
		switch {
		case err != nil:
			// The script may yet run on the server, or may have: what
			// Redis holds of this client is unknown until a flight
			// writes all of it (the fence keeps this one from landing
			// after that flight).
			errOf[id] = unavailable("pins", err)
			x.pst.retry[id] = struct{}{}
			x.pst.unsure[id] = struct{}{}
		case res[k] < 0:
			errOf[id] = unknown("pins", id)
			delete(x.pst.written, id)
			delete(x.pst.retry, id)
			delete(x.pst.unsure, id)
		case x.pst.gen != gen:
			// A Reset came between: Connect may have registered the
			// client again before this script ran.
			delete(x.pst.written, id)
			x.pst.retry[id] = struct{}{}
			x.pst.unsure[id] = struct{}{}
		default:
			delete(x.pst.retry, id)
			delete(x.pst.unsure, id)
			if _, ok := x.local.PinsOf(nil, id); ok { // not withdrawn meanwhile
				x.pst.written[id] = pins[k]
			}
		}
	}
	return err
}

// moved reports whether p differs from the pin of its partition in old
// (what Redis holds): a pin of a partition old does not list is absent
// from Redis.
func moved(p memory.Pin, old []memory.Pin) bool {
	for _, q := range old {
		if q.Partition == p.Partition {
			return q.Set != p.Set || (p.Set && q.Pos != p.Pos)
		}
	}
	return p.Set
}

// forget drops a client's pending set in the process and what the flights
// know of it (Withdraw).
func (x *Index) forget(clientID string) {
	x.pst.mu.Lock()
	defer x.pst.mu.Unlock()
	_, _ = x.local.Withdraw(context.Background(), clientID)
	delete(x.pst.written, clientID)
	delete(x.pst.retry, clientID)
	delete(x.pst.unsure, clientID)
}

// forgetAll drops every pending set in the process and what the flights
// know (Reset).
func (x *Index) forgetAll(ctx context.Context) {
	x.pst.mu.Lock()
	defer x.pst.mu.Unlock()
	_ = x.local.Reset(ctx)
	clear(x.pst.written)
	clear(x.pst.retry)
	clear(x.pst.unsure)
	x.pst.gen++
}

// errClosed is the cause of ErrUnavailable after Close.
var errClosed = errors.New("index closed")

// closedErr returns an error wrapping ErrUnavailable once Close was called.
func (x *Index) closedErr(op string) error {
	if x.closed.Load() {
		return unavailable(op, errClosed)
	}
	return nil
}

// localErr maps an error of x.local (only ever an unknown client) to this
// package's.
func localErr(op, clientID string, err error) error {
	if errors.Is(err, waterline.ErrUnknownClient) {
		return unknown(op, clientID)
	}
	return fmt.Errorf("redis: %s %q: %w", op, clientID, err)
}

// Sent records entries as sent to the client with a lease until
// leaseUntil: a MessageID not pending is added with Attempts 1; a pending
// one gets Attempts+1 and the new lease and keeps its Partition and Pos.
// Entries are applied in order, so a MessageID repeated within entries
// counts twice. The client's pins that moved are written to Redis before
// it returns (one flight, shared with concurrent calls). It returns the
// client's pending count, waterline.ErrUnknownClient for a client this
// Index value did not register (nothing recorded), or, for one whose
// registration Redis lost (a flush, a reap by another process), the
// entries recorded in the process and ErrUnknownClient; an error wrapping
// ErrUnavailable when the pins could not be written (they are written by
// the next flight, and SafeLine gives no line until they are). Positions
// must lie within ±MaxPos.
func (x *Index) Sent(ctx context.Context, clientID string, entries []waterline.Entry, leaseUntil time.Time) (int, error) {
	if err := checkEntries("sent", clientID, entries); err != nil {
		return 0, err
	}
	if err := x.closedErr("sent"); err != nil {
		return 0, err
	}
	n, err := x.local.Sent(ctx, clientID, entries, leaseUntil)
	if err != nil {
		return 0, localErr("sent", clientID, err)
	}
	if err := x.syncPins(ctx, []string{clientID}).errs[0]; err != nil {
		return 0, err
	}
	return n, nil
}

// SentMany is Sent for each batch, with one flight for all of them (and
// for the concurrent calls that wait for the same flight: the fast path's
// workers each record a small batch). Errors are per batch, as
// waterline.ManySender says; a batch with a position beyond ±MaxPos fails
// alone, before anything is recorded.
func (x *Index) SentMany(ctx context.Context, batches []waterline.SentBatch, leaseUntil time.Time) []error {
	return x.many(ctx, "sent", len(batches), func(i int) (string, error) {
		b := batches[i]
		if err := checkEntries("sent", b.ClientID, b.Entries); err != nil {
			return "", err
		}
		_, err := x.local.Sent(ctx, b.ClientID, b.Entries, leaseUntil)
		return b.ClientID, err
	})
}

// many runs n changes in the process (change(i) returns its client, or an
// error) and writes the pins of the clients changed with one flight. It
// returns one error per change.
func (x *Index) many(ctx context.Context, op string, n int, change func(i int) (string, error)) []error {
	errs := make([]error, n)
	if err := x.closedErr(op); err != nil {
		for i := range errs {
			errs[i] = err
		}
		return errs
	}
	var clients []string
	var at []int
	for i := range n {
		id, err := change(i)
		if err != nil {
			if id != "" {
				err = localErr(op, id, err)
			}
			errs[i] = err
			continue
		}
		clients = append(clients, id)
		at = append(at, i)
	}
	if len(clients) > 0 {
		c := x.syncPins(ctx, clients)
		for k, i := range at {
			errs[i] = c.errs[k]
		}
	}
	return errs
}

// Ack removes the given message ids from the client's pending set,
// ignoring ids that are not pending, and writes the client's pins that
// moved (a pin rises to the next pending position, or goes when nothing
// is left). It returns the pending count after, or errors as Sent.
func (x *Index) Ack(ctx context.Context, clientID string, messageIDs []string) (int, error) {
	if err := x.closedErr("ack"); err != nil {
		return 0, err
	}
	n, err := x.local.Ack(ctx, clientID, messageIDs)
	if err != nil {
		return 0, localErr("ack", clientID, err)
	}
	if err := x.syncPins(ctx, []string{clientID}).errs[0]; err != nil {
		return 0, err
	}
	return n, nil
}

// AckMany is Ack for each batch, with one flight for all of them. Errors
// are per batch, as waterline.ManyAcker says.
func (x *Index) AckMany(ctx context.Context, batches []waterline.AckBatch) []error {
	return x.many(ctx, "ack", len(batches), func(i int) (string, error) {
		_, err := x.local.Ack(ctx, batches[i].ClientID, batches[i].MessageIDs)
		return batches[i].ClientID, err
	})
}

// Restore adds entries to the client's pending set, each with its Attempts
// and LeaseUntil (zero: due at once), skipping MessageIDs already pending,
// and writes the client's pins that moved. It returns errors as Sent; a
// position beyond ±MaxPos fails the call before anything is recorded.
func (x *Index) Restore(ctx context.Context, clientID string, entries []waterline.Pending) error {
	for _, e := range entries {
		if err := checkPos("restore", clientID, e.Entry); err != nil {
			return err
		}
	}
	if err := x.closedErr("restore"); err != nil {
		return err
	}
	if err := x.local.Restore(ctx, clientID, entries); err != nil {
		return localErr("restore", clientID, err)
	}
	return x.syncPins(ctx, []string{clientID}).errs[0]
}

// Expired returns up to limit pending entries of this Index value's
// clients whose lease ended at or before now, earliest lease first, equal
// leases lowest Pos first. It reads the process's state, not Redis.
// limit <= 0 returns nothing. It changes nothing.
func (x *Index) Expired(ctx context.Context, now time.Time, limit int) ([]waterline.Pending, error) {
	if err := x.closedErr("expired"); err != nil {
		return nil, err
	}
	return x.local.Expired(ctx, now, limit)
}

// Stats counts this owner's clients (HLEN of its registration hash) and
// their pending entries (in the process).
func (x *Index) Stats(ctx context.Context) (waterline.Stats, error) {
	cctx, cancel := x.call(ctx)
	defer cancel()
	n, err := x.rdb.HLen(cctx, x.kClients).Result()
	if err != nil {
		return waterline.Stats{}, unavailable("stats", err)
	}
	st, _ := x.local.Stats(ctx)
	return waterline.Stats{Clients: int(n), Pending: st.Pending}, nil
}

// coalescer runs concurrent calls in groups: while a group's flight is in
// the air, the calls that arrive wait; when it lands, the first of them
// runs all of them as the next group.
type coalescer struct {
	mu      sync.Mutex
	busy    bool // a group is in flight
	waiting []*pinCall

	groups atomic.Int64  // groups run, for tests
	queued chan struct{} // tests: told of every call that waits
}

// do runs c, in a group of its own when nothing is in flight, else in the
// next group.
func (q *coalescer) do(ctx context.Context, c *pinCall, run func(context.Context, []*pinCall)) {
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
		c.lead = []*pinCall{c}
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
