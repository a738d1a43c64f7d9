package delivery

import (
	"context"
	"fmt"
	"time"

	"github.com/tetra-messenger/tetra/workload/config"
	"github.com/tetra-messenger/tetra/workload/protocol"
)

// Withdrawal reasons, as used in logs and metrics.
const (
	ReasonIdle       = "idle"
	ReasonOverload   = "overload"
	ReasonAttempts   = "attempts"
	ReasonSuperseded = "superseded"
)

// spared reports whether a connection of the given age is still inside the
// reconnect grace, during which the overload and attempts reapers do not
// fire. With the default grace 0 nothing is spared.
func spared(t config.Tuning, age time.Duration) bool {
	return age < t.ReconnectGrace
}

// OverloadReaper judges a client that has messages waiting behind its full
// push window (paper: "signal: depth", judged as depth that does not
// drain): withdraw it when its window made no progress for longer than
// pendingTimeout (stalled: time since an acknowledgement last freed a slot,
// or since it fell behind), or when the oldest message waiting for it is
// older than lease x maxDeliveryAttempts (lag: it cannot keep up; an
// unacknowledged message would have withdrawn it by then too). A client
// that acknowledges as frames arrive is never withdrawn for a burst.
func OverloadReaper(t config.Tuning, stalled, lag, age time.Duration) bool {
	maxLag := t.Lease * time.Duration(t.MaxDeliveryAttempts)
	return (stalled > t.PendingTimeout || lag > maxLag) && !spared(t, age)
}

// AttemptsReaper: withdraw the recipient of a message that is due again
// after it was already sent maxDeliveryAttempts times (paper: "signal:
// staleness of the oldest outstanding row").
func AttemptsReaper(t config.Tuning, attempts int, age time.Duration) bool {
	return attempts >= t.MaxDeliveryAttempts && !spared(t, age)
}

// IdleReaper: close a connection that answered no ping and sent no frame
// for pingInterval+pingTimeout (paper: "signal: silence"). The grace does
// not apply: a silent socket is a zombie whatever its age.
func IdleReaper(t config.Tuning, lastSeen, now time.Time) bool {
	return now.Sub(lastSeen) > t.PingInterval+t.PingTimeout
}

// ReapOverloaded applies the overload reaper to every connection that has
// messages waiting behind its full push window: it is withdrawn (close
// 4003) when its window made no progress (no acknowledgement freed a slot)
// for longer than pending-timeout, or when the oldest message waiting for
// it was accepted longer ago than an unacknowledged one may stay
// unacknowledged (lease x max-delivery-attempts). A client that
// acknowledges as frames arrive keeps making progress and catches up,
// whatever burst it received.
func (e *Engine) ReapOverloaded() {
	t := e.tuning()
	now := e.now()
	type verdict struct {
		m   *Member
		why string
	}
	var over []verdict
	for _, m := range e.reg.laggingMembers() {
		m.mu.Lock()
		if len(m.behind) == 0 {
			m.mu.Unlock()
			continue
		}
		stalled := now.Sub(m.progressAt)
		var lag time.Duration
		for _, oldest := range m.behind {
			lag = max(lag, now.Sub(oldest))
		}
		m.mu.Unlock()
		if OverloadReaper(t, stalled, lag, now.Sub(m.connectedAt)) {
			why := fmt.Sprintf("withdrawn: %d unacknowledged messages (max-pending) held the window for %v with more waiting", t.MaxPending, stalled.Round(time.Millisecond))
			if stalled <= t.PendingTimeout {
				why = fmt.Sprintf("withdrawn: too far behind, the oldest message waiting is %v old", lag.Round(time.Millisecond))
			}
			over = append(over, verdict{m, why})
		}
	}
	for _, v := range over {
		e.withdraw(v.m, protocol.ClosePending, v.why, ReasonOverload)
	}
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
	var idle []*Member
	for _, m := range e.reg.all() {
		if IdleReaper(t, time.Unix(0, m.lastSeen.Load()), now) {
			idle = append(idle, m)
		}
	}
	for _, m := range idle {
		e.withdraw(m, protocol.CloseIdle, "idle: no answer to pings", ReasonIdle)
	}
}
