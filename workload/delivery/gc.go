package delivery

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tetra-messenger/tetra/workload/protocol"
	"github.com/tetra-messenger/tetra/workload/waterline"
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

func (e *Engine) gcLoop(ctx context.Context) {
	defer e.wg.Done()
	for {
		timer := time.NewTimer(e.tuning().GCInterval)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		if _, err := e.GCOnce(ctx); err != nil && ctx.Err() == nil {
			e.logger.Warn("gc pass deleted nothing", "err", err)
		}
	}
}

// ensurePrimed rebuilds the index when it is not primed or its server's
// identity changed since it was primed. It returns the current identity.
func (e *Engine) ensurePrimed(ctx context.Context) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, e.cfg.StoreTimeout)
	st, err := e.idx.State(cctx)
	if err != nil {
		cancel()
		return "", fmt.Errorf("delivery: read index state: %w", err)
	}
	id, err := e.idx.Identity(cctx)
	cancel()
	if err != nil {
		return "", fmt.Errorf("delivery: read index identity: %w", err)
	}
	switch {
	case !st.Primed:
		return id, e.Rebuild(ctx, RebuildColdStart)
	case st.Identity != id:
		e.logger.Warn("waterline index server changed identity; rebuilding before any delete", "was", st.Identity, "now", id)
		return id, e.Rebuild(ctx, RebuildIdentity)
	}
	return id, nil
}

// GCOnce runs one GC pass and returns the rows it deleted. It first makes
// sure the index is primed (rebuilding it from the outbox if not), then, per
// partition: line = min(safe line of the index, grace line); line = max(line,
// age-backstop line); delete the prefix below line. Any error reading the
// index or the outbox deletes nothing in that partition.
func (e *Engine) GCOnce(ctx context.Context) (int64, error) {
	identity, err := e.ensurePrimed(ctx)
	if err != nil {
		return 0, err
	}
	if ok, err := e.fleetMayDelete(ctx, identity); err != nil || !ok {
		return 0, err
	}
	t := e.tuning()
	now := e.now()
	var total int64
	var errs []error
	for _, p := range e.partitions {
		n, err := e.gcPartition(ctx, p, identity, now, t.GCGrace, t.OutboxRetention)
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

func (e *Engine) gcPartition(ctx context.Context, p int32, identity string, now time.Time, grace, retention time.Duration) (int64, error) {
	cctx, cancel := context.WithTimeout(ctx, e.cfg.StoreTimeout)
	defer cancel()
	st, err := e.log.Stats(cctx, p)
	if err != nil {
		return 0, err
	}
	// Grace: remember when each head was seen; every row at or below a head
	// seen at least `grace` ago is older than the grace.
	ss := append(e.samples[p], headSample{at: now, head: st.Head})
	graceLine, found := int64(0), false
	keep := 0
	for i, s := range ss {
		if !now.Before(s.at.Add(grace)) {
			graceLine, found = s.head+1, true
			keep = i
		}
	}
	e.samples[p] = append(ss[:0:0], ss[keep:]...)
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
	if !st.OldestAt.IsZero() && st.OldestAt.Before(now.Add(-retention)) {
		bl, err := e.backstopLine(cctx, p, now.Add(-retention))
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
	if line <= e.deleted[p] {
		return 0, nil
	}
	n, err := e.log.DeleteBelow(cctx, p, line)
	if err != nil {
		return 0, err
	}
	e.deleted[p] = line
	return n, nil
}

// backstopLine finds the first position whose row is not older than cutoff
// by scanning from the bottom (bounded by backstopScanLimit rows).
func (e *Engine) backstopLine(ctx context.Context, p int32, cutoff time.Time) (int64, error) {
	after := int64(-1)
	for read := 0; read < backstopScanLimit; {
		rows, err := e.log.Scan(ctx, p, after, 1000)
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

// Rebuild reconstructs this process's part of the index: it resets it,
// registers every connection of this process again and restores, for each,
// the entries of its push window (what it was sent and has not
// acknowledged) with their attempts and leases, then marks the index primed
// with its server's identity. Sends, acks and GC wait while it runs.
//
// The paper rebuilds from a full scan of the outbox, pinning every row of
// every connected recipient as due. Each process knows better: its
// connections' windows are exactly what they hold unacknowledged (an ack
// the index lost was still received here), and what they have not been
// sent yet is above their horizon, kept by the poller's hold. So nothing is
// re-sent because of a rebuild, and nothing acknowledged is pinned again.
// reason is RebuildColdStart, RebuildIdentity or RebuildRequested.
func (e *Engine) Rebuild(ctx context.Context, reason string) error {
	e.idxMu.Lock()
	defer e.idxMu.Unlock()
	start := time.Now()
	if err := e.idx.Reset(ctx); err != nil {
		return fmt.Errorf("delivery: rebuild: reset index: %w", err)
	}
	// Between the reset and the restore this process's connections pin
	// nothing; a hold at the bottom of every partition keeps another
	// process's GC (sharing a Redis index) from deleting their rows
	// meanwhile. Released when the rebuild is done.
	rebuildHolder := e.cfg.Holder + "-rebuild"
	for _, p := range e.partitions {
		if err := e.idx.Hold(ctx, rebuildHolder, p, 0, e.cfg.HoldTTL); err != nil {
			return fmt.Errorf("delivery: rebuild: hold: %w", err)
		}
		if err := e.idx.Hold(ctx, e.cfg.Holder, p, e.holdPos(p), e.cfg.HoldTTL); err != nil {
			return fmt.Errorf("delivery: rebuild: hold: %w", err)
		}
	}
	defer func() {
		for _, p := range e.partitions {
			_ = e.idx.Hold(context.WithoutCancel(ctx), rebuildHolder, p, -1, e.cfg.HoldTTL)
		}
	}()
	lease := e.now().Add(e.tuning().Lease)
	conns, entries := 0, 0
	for _, m := range e.members() {
		m.mu.Lock()
		c := m.client
		ps := make([]waterline.Pending, 0, len(m.out))
		for _, o := range m.out {
			p := waterline.Pending{Entry: o.entry, Attempts: o.attempts, LeaseUntil: o.leaseUntil}
			if o.attempts == 0 {
				p.LeaseUntil = lease // its first send is on its way
			}
			ps = append(ps, p)
		}
		m.mu.Unlock()
		if c.Start == nil {
			continue // still registering; Register connects it itself
		}
		if err := e.idx.Connect(ctx, c); err != nil {
			return fmt.Errorf("delivery: rebuild: connect %s: %w", c.ID, err)
		}
		conns++
		if len(ps) == 0 {
			continue
		}
		if err := e.idx.Restore(ctx, c.ID, ps); err != nil {
			return fmt.Errorf("delivery: rebuild: restore %s: %w", c.ID, err)
		}
		entries += len(ps)
	}
	id, err := e.idx.Identity(ctx)
	if err != nil {
		return fmt.Errorf("delivery: rebuild: identity: %w", err)
	}
	if err := e.idx.MarkPrimed(ctx, id); err != nil {
		return fmt.Errorf("delivery: rebuild: mark primed: %w", err)
	}
	e.statMu.Lock()
	e.stats.Rebuilds[reason]++
	e.statMu.Unlock()
	e.logger.Info("waterline index rebuilt from the connections' windows", "reason", reason, "connections", conns, "entries", entries, "took", time.Since(start))
	return nil
}

func (e *Engine) idleLoop(ctx context.Context) {
	defer e.wg.Done()
	ticker := time.NewTicker(time.Second)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
			e.ReapIdle()
		}
	}
}

// ReapIdle applies the idle reaper to every connection once.
func (e *Engine) ReapIdle() {
	t := e.tuning()
	now := e.now()
	e.mu.RLock()
	var idle []*Member
	for _, m := range e.byID {
		if IdleReaper(t, time.Unix(0, m.lastSeen.Load()), now) {
			idle = append(idle, m)
		}
	}
	e.mu.RUnlock()
	for _, m := range idle {
		e.withdraw(m, protocol.CloseIdle, "idle: no answer to pings", ReasonIdle)
	}
}
