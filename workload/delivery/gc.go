package delivery

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Rebuild reasons, as used in logs and metrics.
const (
	RebuildColdStart = "cold-start"
	RebuildIdentity  = "identity-changed"
	RebuildRequested = "requested"
)

// backstopScanLimit bounds the rows one GC pass reads to find the age
// backstop line.
const backstopScanLimit = 100_000

type headSample struct {
	at   time.Time
	head int64
}

// collector is the waterline GC: once per GC interval it makes sure the
// index is primed (rebuilding it otherwise), then deletes, per partition,
// the outbox prefix below the safe line, capped by the grace and raised by
// the age backstop. It runs on one goroutine (the GC loop, or a test
// calling GCOnce) and owns the state that pass needs from one run to the
// next; it reaches the outbox, the index and the rebuild through its
// engine.
type collector struct {
	e       *Engine
	samples map[int32][]headSample // heads seen, for the grace line
	deleted map[int32]int64        // the line last deleted below
}

func newCollector(e *Engine) *collector {
	return &collector{e: e, samples: map[int32][]headSample{}, deleted: map[int32]int64{}}
}

func (g *collector) loop(ctx context.Context) {
	e := g.e
	defer e.wg.Done()
	for {
		timer := time.NewTimer(e.tuning().GCInterval)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		if n, err := g.once(ctx); err != nil && ctx.Err() == nil {
			e.warnGC.Warn(e.logger, "gc pass failed", "deleted", n, "err", err)
		}
	}
}

// ensurePrimed rebuilds the index when it is not primed or its server's
// identity changed since it was primed. It returns the current identity.
//
// The state is read twice: first without the rebuild's lock (the common
// case, primed, costs no lock), then, when that read asks for a rebuild,
// again under the lock. A rebuild that was running during the first read
// (its reset clears the primed flag until it marks the index primed again)
// has finished by the second, which then finds the index primed: the GC
// does not follow a requested or failover rebuild with a spurious
// cold-start one (issue 24: a pod rebuilt a third time, reason cold-start,
// 28 ms after the requested rebuild of a Sentinel failover).
func (e *Engine) ensurePrimed(ctx context.Context) (string, error) {
	id, _, reason, err := e.primingNeeded(ctx)
	if err != nil || reason == "" {
		return id, err
	}
	if h := e.hooks.beforePrimingRebuild; h != nil {
		h()
	}
	e.idxMu.Lock()
	defer e.idxMu.Unlock()
	id, was, reason, err := e.primingNeeded(ctx)
	if err != nil || reason == "" {
		return id, err
	}
	switch {
	case reason == RebuildIdentity:
		e.logger.Warn("waterline index server changed identity; rebuilding before any delete", "was", was, "now", id)
	case e.primedOnce.Load():
		e.logger.Warn("waterline index lost its state (flushed, or restarted without persistence); rebuilding before any delete", "now", id)
	}
	return id, e.rebuildLocked(ctx, reason)
}

// primingNeeded reads the index's state and its server's identity (id;
// was: the identity it was primed with) and says which rebuild they call
// for: "" (none), RebuildColdStart (not primed) or RebuildIdentity (primed
// with another server's identity: a failover).
func (e *Engine) primingNeeded(ctx context.Context) (id, was, reason string, err error) {
	cctx, cancel := context.WithTimeout(ctx, e.cfg.StoreTimeout)
	defer cancel()
	st, err := e.idx.State(cctx)
	if err != nil {
		return "", "", "", fmt.Errorf("delivery: read index state: %w", err)
	}
	if id, err = e.idx.Identity(cctx); err != nil {
		return "", "", "", fmt.Errorf("delivery: read index identity: %w", err)
	}
	switch {
	case !st.Primed:
		return id, st.Identity, RebuildColdStart, nil
	case st.Identity != id:
		return id, st.Identity, RebuildIdentity, nil
	}
	return id, st.Identity, "", nil
}

// GCOnce runs one GC pass and returns the rows it deleted (see
// collector.once). Exported for tests; the engine runs it on its own
// cadence.
func (e *Engine) GCOnce(ctx context.Context) (int64, error) { return e.gc.once(ctx) }

// once runs one GC pass and returns the rows it deleted. It first makes
// sure the index is primed (rebuilding it from the connections' windows if
// not: Rebuild), then, per
// partition: line = min(safe line of the index, grace line); line = max(line,
// age-backstop line); delete the prefix below line. Any error reading the
// index or the outbox deletes nothing in that partition.
func (g *collector) once(ctx context.Context) (int64, error) {
	e := g.e
	identity, err := e.ensurePrimed(ctx)
	if err != nil {
		return 0, err
	}
	if ok, err := e.link.mayDelete(ctx, identity); err != nil || !ok {
		return 0, err
	}
	t := e.tuning()
	now := e.now()
	var total int64
	var errs []error
	for _, p := range e.partitions {
		n, err := g.partition(ctx, p, identity, now, t.GCGrace, t.OutboxRetention)
		total += n
		if err != nil {
			errs = append(errs, fmt.Errorf("partition %d: %w", p, err))
		}
	}
	e.statMu.Lock()
	e.stats.GCPasses++
	e.stats.GCDeleted += total
	e.statMu.Unlock()
	return total, errors.Join(errs...)
}

func (g *collector) partition(ctx context.Context, p int32, identity string, now time.Time, grace, retention time.Duration) (int64, error) {
	e := g.e
	cctx, cancel := context.WithTimeout(ctx, e.cfg.StoreTimeout)
	defer cancel()
	// The head, and the oldest row's age for the backstop: two reads at
	// the log's ends. Stats would count the rows too, which is linear in
	// the depth (a sum over every record in SQL, fetches in Kafka) and was
	// most of what a GC pass cost.
	head, err := e.outbox.Head(cctx, p)
	if err != nil {
		return 0, err
	}
	// Grace: remember when each head was seen; every row at or below a head
	// seen at least `grace` ago is older than the grace.
	ss := append(g.samples[p], headSample{at: now, head: head})
	graceLine, found := int64(0), false
	keep := 0
	for i, s := range ss {
		if !now.Before(s.at.Add(grace)) {
			graceLine, found = s.head+1, true
			keep = i
		}
	}
	g.samples[p] = append(ss[:0:0], ss[keep:]...)
	if !found {
		return 0, nil
	}

	if h := e.hooks.beforeSafeLine; h != nil {
		h() // tests: a flush or a failover lands here
	}
	// SafeLine checks, in the same atomic step as it reads the pins, that
	// the index is still primed with the identity ensurePrimed saw: a
	// flush or a failover since then (while the outbox statistics were
	// read, say) yields ErrNotPrimed, not a line from an empty index.
	e.idxMu.RLock()
	line, ok, err := e.idx.SafeLine(cctx, p, identity)
	e.idxMu.RUnlock()
	if err != nil {
		return 0, fmt.Errorf("read the safe-delete line: %w", err)
	}
	if !ok || line > graceLine {
		line = graceLine
	}
	oldest, err := e.outbox.Scan(cctx, p, -1, 1)
	if err != nil {
		return 0, err
	}
	if len(oldest) > 0 && oldest[0].CreatedAt.Before(now.Add(-retention)) {
		bl, err := g.backstopLine(cctx, p, now.Add(-retention))
		if err != nil {
			return 0, err
		}
		if bl > line {
			e.logger.Warn("outbox age backstop deletes pinned rows; a stalled waterline outlived the outbox retention", "partition", p, "line", line, "backstop", bl)
			line = bl
		}
	}
	e.statMu.Lock()
	e.stats.SafeLine[p] = line
	e.statMu.Unlock()
	if line <= g.deleted[p] {
		return 0, nil
	}
	n, err := e.outbox.DeleteBelow(cctx, p, line)
	if err != nil {
		// A relational log deletes in chunks, each its own transaction:
		// what it deleted before the failure stays deleted and counts.
		return n, err
	}
	g.deleted[p] = line
	return n, nil
}

// backstopLine finds the first position whose row is not older than cutoff
// by scanning from the bottom (bounded by backstopScanLimit rows).
func (g *collector) backstopLine(ctx context.Context, p int32, cutoff time.Time) (int64, error) {
	e := g.e
	after := int64(-1)
	for read := 0; read < backstopScanLimit; {
		rows, err := e.outbox.Scan(ctx, p, after, 1000)
		if err != nil {
			return 0, err
		}
		if len(rows) == 0 {
			return after + 1, nil
		}
		for _, r := range rows {
			if !r.CreatedAt.Before(cutoff) {
				return r.Pos, nil
			}
		}
		after = rows[len(rows)-1].Pos
		read += len(rows)
	}
	return after + 1, nil
}
