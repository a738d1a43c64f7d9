package delivery

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tetra-messenger/tetra/workload/protocol"
	"github.com/tetra-messenger/tetra/workload/waterline"
)

// ErrSuperseded is returned by Register when a newer connection of the same
// (user, device) already claimed the device (on this or another process):
// the caller closes the socket with 4001 (PROTOCOL.md §3).
var ErrSuperseded = errors.New("delivery: superseded by a newer connection of the same device")

// ReasonOwnerLapsed counts connections closed because this process's
// liveness in a shared index lapsed and another process reaped its state.
const ReasonOwnerLapsed = "owner-lapsed"

// The fleet: when the index is shared by several processes (it implements
// waterline.Fleet, as the Redis index does), the engine
//
//   - claims every new connection's device in the index and closes its own
//     older connection of a device another process claimed later (4001);
//   - forwards broadcasts (read receipts) to the other processes, which
//     queue them on their own connections of the named users;
//   - publishes a wake-up after every hand-off, and runs its poller at once
//     when another process publishes one, so a message accepted on one
//     process reaches a recipient on another without waiting for the poll
//     interval;
//   - heartbeats its owner (Config.OwnerTTL) and, in every GC pass, reaps
//     the state of owners whose heartbeat lapsed (a crashed process), so
//     their pins stop holding the outbox long before the age backstop; a
//     process that learns it was reaped closes its connections (1001), and
//     its clients recover from history;
//   - deletes nothing while any live owner has not rebuilt its part of the
//     index since the index's identity changed (Fleet.Laggards), nor within
//     OwnerTTL/2 of the first sighting of an identity by any process
//     (Fleet.IdentityAge), so that after a failover every live owner had a
//     heartbeat to list itself again.

// fleetLink is this process's link to the others sharing its index: the
// liveness record and its heartbeat, the subscription to their claims,
// wake-ups and broadcasts, and the publishing of this process's own. It
// owns the publish queues and the heartbeat's wake-up; it reaches the
// registry, the withdrawals, the poller's wake-up and the counters through
// its engine. The engine has none (nil) when its index is not shared; the
// methods the delivery path calls are no-ops on nil.
type fleetLink struct {
	e     *Engine
	fleet waterline.Fleet
	// wakeOut and castOut queue this process's wake-ups (coalescing) and
	// broadcasts for the wake loop, which publishes them.
	wakeOut chan struct{}
	castOut chan fleetCast
	// beatNow asks the heartbeat loop for a heartbeat now (checkReaped).
	beatNow chan struct{}
}

// startFleetLink takes this process's liveness record in e's index when
// the index is shared (waterline.Fleet) and binds its key prefix to e's
// outbox; it returns nil (and no error) for an index that is not shared.
func startFleetLink(ctx context.Context, e *Engine) (*fleetLink, error) {
	f, ok := e.idx.(waterline.Fleet)
	if !ok {
		return nil, nil
	}
	l := &fleetLink{e: e, fleet: f, wakeOut: make(chan struct{}, 1), castOut: make(chan fleetCast, 1024), beatNow: make(chan struct{}, 1)}
	// Take the owner's liveness record. Held by another token: either a
	// crashed predecessor under the same name (its record expires within
	// OwnerTTL) or another live process with the same --index-owner (it
	// keeps heartbeating: refuse, or the two would wipe each other's
	// registrations).
	deadline := time.Now().Add(e.cfg.OwnerTTL + time.Second)
	waited := false
	for {
		held, err := f.Acquire(ctx, e.cfg.OwnerTTL)
		if err != nil {
			return nil, err
		}
		if held {
			if err := l.bindOutbox(ctx); err != nil {
				return nil, err
			}
			return l, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("another live process uses index owner %q (its heartbeat stayed fresh for %v): give every process its own --index-owner: %w",
				f.Owner(), e.cfg.OwnerTTL, waterline.ErrOwnerTaken)
		}
		if !waited {
			waited = true
			e.logger.Warn("fleet: index owner is held by another process or a crashed predecessor; waiting up to the owner TTL for it to lapse", "owner", f.Owner(), "ttl", e.cfg.OwnerTTL)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(max(e.cfg.OwnerTTL/10, 50*time.Millisecond)):
		}
	}
}

// stop releases this owner's liveness record (a graceful stop).
func (l *fleetLink) stop(ctx context.Context) {
	if l == nil {
		return
	}
	if err := l.fleet.Release(ctx); err != nil {
		l.e.logger.Debug("fleet: release the owner's liveness record", "err", err)
	}
}

// run subscribes to the other processes' claims, wake-ups and broadcasts
// and starts publishing this one's; rctx ends them. (The heartbeat loop
// starts earlier, in Start.)
func (l *fleetLink) run(rctx context.Context) error {
	e := l.e
	done, err := l.fleet.Subscribe(rctx, waterline.FleetHandlers{OnClaim: l.onClaim, OnWake: e.poller.wakeUp, OnBroadcast: e.onBroadcast})
	if err != nil {
		return err
	}
	e.wg.Go(func() { <-done })
	e.wg.Add(1)
	go l.wakeLoop(rctx)
	return nil
}

// onClaim closes this process's connection of a device that another
// process claimed later. It runs on the subscriber goroutine.
func (l *fleetLink) onClaim(c waterline.Claim) {
	e := l.e
	m := e.reg.device(c.User, c.Device)
	if m == nil || m.client.ID == c.ConnID || m.epoch >= c.Epoch {
		return
	}
	// Not on the subscriber goroutine: withdrawing talks to the index.
	e.wg.Go(func() {
		e.withdraw(m, protocol.CloseSuperseded, "superseded by a newer connection of the same device", ReasonSuperseded)
	})
}

// publishWake asks the wake loop to tell the other processes that rows
// were committed. It never blocks; wake-ups coalesce.
func (l *fleetLink) publishWake() {
	if l == nil {
		return
	}
	select {
	case l.wakeOut <- struct{}{}:
	default:
	}
}

// fleetCast is a broadcast for the other processes.
type fleetCast struct {
	users []string
	frame []byte
}

// publishBroadcast queues a broadcast for the other processes; when the
// queue is full the broadcast is dropped (read receipts are best effort).
func (l *fleetLink) publishBroadcast(users []string, frame []byte) {
	if l == nil {
		return
	}
	select {
	case l.castOut <- fleetCast{users: users, frame: frame}:
	default:
		l.e.logger.Debug("fleet: broadcast queue full; a read receipt stays on this process")
	}
}

// wakeLoop publishes the queued wake-ups and broadcasts, one at a time,
// until ctx ends.
func (l *fleetLink) wakeLoop(ctx context.Context) {
	e := l.e
	defer e.wg.Done()
	for {
		var cast *fleetCast
		select {
		case <-ctx.Done():
			return
		case <-l.wakeOut:
		case c := <-l.castOut:
			cast = &c
		}
		cctx, cancel := context.WithTimeout(ctx, e.cfg.StoreTimeout)
		var err error
		if cast != nil {
			err = l.fleet.Broadcast(cctx, cast.users, cast.frame)
		} else {
			err = l.fleet.Wake(cctx)
		}
		if err != nil && ctx.Err() == nil {
			e.logger.Debug("fleet: publish", "err", err)
		}
		cancel()
	}
}

// heartbeatLoop heartbeats every third of the owner TTL, and when asked
// (beatNow), until ctx ends.
func (l *fleetLink) heartbeatLoop(ctx context.Context) {
	defer l.e.wg.Done()
	ticker := time.NewTicker(l.e.cfg.OwnerTTL / 3)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-l.beatNow:
		}
		l.heartbeat(ctx)
	}
}

// heartbeat refreshes this owner's liveness. When another process reaped
// this owner meanwhile, every registration is gone from the index: the
// connections are closed with 1001 so their clients reconnect and recover
// from history, and the next GC pass rebuilds (the primed flag went too).
func (l *fleetLink) heartbeat(ctx context.Context) {
	e := l.e
	cctx, cancel := context.WithTimeout(ctx, e.cfg.StoreTimeout)
	reaped, err := l.fleet.Heartbeat(cctx, e.cfg.OwnerTTL)
	cancel()
	if errors.Is(err, waterline.ErrOwnerTaken) {
		// This process's record lapsed and another process with the same
		// owner name took it: the registrations under the name are not
		// this process's to trust any more.
		e.logger.Error("fleet: another process took this process's index owner name; closing every connection", "owner", l.fleet.Owner())
		reaped, err = true, nil
	}
	if err != nil {
		if ctx.Err() == nil {
			e.logger.Warn("fleet: heartbeat failed; other processes reap this one's state if it lapses", "err", err)
		}
		return
	}
	if !reaped {
		return
	}
	e.logger.Error("fleet: this process's liveness lapsed and another process reaped its index state; closing every connection so clients recover from history", "owner", l.fleet.Owner())
	ms := e.reg.all()
	for _, m := range ms {
		e.withdraw(m, protocol.CloseGoingAway, "this server lost its lease on the delivery index; reconnect", ReasonOwnerLapsed)
	}
}

// checkReaped asks the heartbeat loop to run now (a registered member was
// unknown to the index: this owner may have been reaped).
func (l *fleetLink) checkReaped() {
	if l == nil {
		return
	}
	select {
	case l.beatNow <- struct{}{}:
	default:
	}
}

// mayDelete reaps dead owners and reports whether GC may delete: no
// live owner lags behind the index's current identity, and that identity
// was first seen, by any process, at least OwnerTTL/2 ago
// (Fleet.IdentityAge). Without a fleet (nil) GC may always delete.
func (l *fleetLink) mayDelete(ctx context.Context, identity string) (bool, error) {
	if l == nil {
		return true, nil
	}
	e := l.e
	cctx, cancel := context.WithTimeout(ctx, e.cfg.StoreTimeout)
	defer cancel()
	reaped, err := l.fleet.ReapDead(cctx)
	if err != nil {
		return false, err
	}
	if len(reaped) > 0 {
		e.logger.Warn("fleet: reaped the index state of processes whose heartbeat lapsed", "owners", reaped)
		e.statMu.Lock()
		e.stats.OwnersReaped += int64(len(reaped))
		e.statMu.Unlock()
	}
	age, err := l.fleet.IdentityAge(cctx, identity)
	if err != nil {
		return false, err
	}
	if age < e.cfg.OwnerTTL/2 {
		return false, nil // a failover (or a new Redis) moments ago
	}
	lag, err := l.fleet.Laggards(cctx, identity)
	if err != nil {
		return false, err
	}
	if len(lag) > 0 {
		e.logger.Info("fleet: GC waits for processes that have not rebuilt their part of the index", "owners", lag)
		return false, nil
	}
	return true, nil
}

// bindOutbox records, in the shared index, which outbox its key prefix
// covers, and refuses (releasing this owner's liveness record) when the
// prefix already covers another outbox of a live deployment.
func (l *fleetLink) bindOutbox(ctx context.Context) error {
	id, err := l.e.outbox.ID(ctx)
	if err == nil {
		err = l.fleet.BindOutbox(ctx, id)
	}
	if err != nil {
		_ = l.fleet.Release(context.WithoutCancel(ctx))
		return err
	}
	return nil
}
