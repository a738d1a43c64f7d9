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

func (e *Engine) startFleet(ctx context.Context) error {
	f, ok := e.idx.(waterline.Fleet)
	if !ok {
		return nil
	}
	e.fleet = f
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
			return err
		}
		if held {
			return e.bindOutbox(ctx, f)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("another live process uses index owner %q (its heartbeat stayed fresh for %v): give every process its own --index-owner: %w",
				f.Owner(), e.cfg.OwnerTTL, waterline.ErrOwnerTaken)
		}
		if !waited {
			waited = true
			e.logger.Warn("fleet: index owner is held by another process or a crashed predecessor; waiting up to the owner TTL for it to lapse", "owner", f.Owner(), "ttl", e.cfg.OwnerTTL)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(max(e.cfg.OwnerTTL/10, 50*time.Millisecond)):
		}
	}
}

// stopFleet releases this owner's liveness record (a graceful stop).
func (e *Engine) stopFleet(ctx context.Context) {
	if e.fleet == nil {
		return
	}
	if err := e.fleet.Release(ctx); err != nil {
		e.logger.Debug("fleet: release the owner's liveness record", "err", err)
	}
}

// runFleet subscribes to the other processes' claims and wake-ups and
// starts publishing this one's wake-ups; rctx ends them. (The heartbeat
// loop starts earlier, in Start.)
func (e *Engine) runFleet(rctx context.Context) error {
	if e.fleet == nil {
		return nil
	}
	done, err := e.fleet.Subscribe(rctx, waterline.FleetHandlers{OnClaim: e.onClaim, OnWake: e.poller.wakeUp, OnBroadcast: e.onBroadcast})
	if err != nil {
		return err
	}
	e.wg.Go(func() { <-done })
	e.wg.Add(1)
	go e.wakeLoop(rctx)
	return nil
}

// onClaim closes this process's connection of a device that another
// process claimed later. It runs on the subscriber goroutine.
func (e *Engine) onClaim(c waterline.Claim) {
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
func (e *Engine) publishWake() {
	if e.fleet == nil {
		return
	}
	select {
	case e.wakeOut <- struct{}{}:
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
func (e *Engine) publishBroadcast(users []string, frame []byte) {
	if e.fleet == nil {
		return
	}
	select {
	case e.castOut <- fleetCast{users: users, frame: frame}:
	default:
		e.logger.Debug("fleet: broadcast queue full; a read receipt stays on this process")
	}
}

func (e *Engine) wakeLoop(ctx context.Context) {
	defer e.wg.Done()
	for {
		var cast *fleetCast
		select {
		case <-ctx.Done():
			return
		case <-e.wakeOut:
		case c := <-e.castOut:
			cast = &c
		}
		cctx, cancel := context.WithTimeout(ctx, e.cfg.StoreTimeout)
		var err error
		if cast != nil {
			err = e.fleet.Broadcast(cctx, cast.users, cast.frame)
		} else {
			err = e.fleet.Wake(cctx)
		}
		if err != nil && ctx.Err() == nil {
			e.logger.Debug("fleet: publish", "err", err)
		}
		cancel()
	}
}

func (e *Engine) heartbeatLoop(ctx context.Context) {
	defer e.wg.Done()
	ticker := time.NewTicker(e.cfg.OwnerTTL / 3)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		case <-e.beatNow:
		}
		e.heartbeat(ctx)
	}
}

// heartbeat refreshes this owner's liveness. When another process reaped
// this owner meanwhile, every registration is gone from the index: the
// connections are closed with 1001 so their clients reconnect and recover
// from history, and the next GC pass rebuilds (the primed flag went too).
func (e *Engine) heartbeat(ctx context.Context) {
	cctx, cancel := context.WithTimeout(ctx, e.cfg.StoreTimeout)
	reaped, err := e.fleet.Heartbeat(cctx, e.cfg.OwnerTTL)
	cancel()
	if errors.Is(err, waterline.ErrOwnerTaken) {
		// This process's record lapsed and another process with the same
		// owner name took it: the registrations under the name are not
		// this process's to trust any more.
		e.logger.Error("fleet: another process took this process's index owner name; closing every connection", "owner", e.fleet.Owner())
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
	e.logger.Error("fleet: this process's liveness lapsed and another process reaped its index state; closing every connection so clients recover from history", "owner", e.fleet.Owner())
	ms := e.reg.all()
	for _, m := range ms {
		e.withdraw(m, protocol.CloseGoingAway, "this server lost its lease on the delivery index; reconnect", ReasonOwnerLapsed)
	}
}

// checkReaped asks the heartbeat loop to run now (a registered member was
// unknown to the index: this owner may have been reaped).
func (e *Engine) checkReaped() {
	select {
	case e.beatNow <- struct{}{}:
	default:
	}
}

// fleetMayDelete reaps dead owners and reports whether GC may delete: no
// live owner lags behind the index's current identity, and that identity
// was first seen, by any process, at least OwnerTTL/2 ago
// (Fleet.IdentityAge).
func (e *Engine) fleetMayDelete(ctx context.Context, identity string) (bool, error) {
	if e.fleet == nil {
		return true, nil
	}
	cctx, cancel := context.WithTimeout(ctx, e.cfg.StoreTimeout)
	defer cancel()
	reaped, err := e.fleet.ReapDead(cctx)
	if err != nil {
		return false, err
	}
	if len(reaped) > 0 {
		e.logger.Warn("fleet: reaped the index state of processes whose heartbeat lapsed", "owners", reaped)
		e.statMu.Lock()
		e.stats.OwnersReaped += int64(len(reaped))
		e.statMu.Unlock()
	}
	age, err := e.fleet.IdentityAge(cctx, identity)
	if err != nil {
		return false, err
	}
	if age < e.cfg.OwnerTTL/2 {
		return false, nil // a failover (or a new Redis) moments ago
	}
	lag, err := e.fleet.Laggards(cctx, identity)
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
func (e *Engine) bindOutbox(ctx context.Context, f waterline.Fleet) error {
	id, err := e.outbox.ID(ctx)
	if err == nil {
		err = f.BindOutbox(ctx, id)
	}
	if err != nil {
		_ = f.Release(context.WithoutCancel(ctx))
		return err
	}
	return nil
}
