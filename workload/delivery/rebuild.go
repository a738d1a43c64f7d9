package delivery

import (
	"context"
	"fmt"
	"time"

	"github.com/tetra-messenger/tetra/workload/waterline"
)

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
	return e.rebuildLocked(ctx, reason)
}

// rebuildLocked is Rebuild with idxMu held.
func (e *Engine) rebuildLocked(ctx context.Context, reason string) error {
	start := time.Now()
	if err := e.idx.Reset(ctx); err != nil {
		return fmt.Errorf("delivery: rebuild: reset index: %w", err)
	}
	if h := e.hooks.afterReset; h != nil {
		h(reason) // tests: the flag is cleared until MarkPrimed below
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
		if err := e.idx.Hold(ctx, e.cfg.Holder, p, e.poller.holdPos(p), e.cfg.HoldTTL); err != nil {
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
	for _, m := range e.reg.all() {
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
	e.primedOnce.Store(true)
	e.statMu.Unlock()
	e.logger.Info("waterline index rebuilt from the connections' windows", "reason", reason, "connections", conns, "entries", entries, "took", time.Since(start))
	return nil
}
