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

// OverloadReaper judges a client that has messages waiting behind its push
// window (paper: "signal: depth", judged as depth that does not drain) by
// the time its window was full: then the client owes the next
// acknowledgement, while with room in the window the server owes the next
// frames (a slow poller, a loaded database or CPU) and that never counts.
// Withdraw it when the window has now been full for longer than
// pendingTimeout with no acknowledgement freeing a slot (stalled), or when
// it cannot keep up: since it fell behind (behind ago) its window was full
// for longer than lease x maxDeliveryAttempts in all (held; an
// unacknowledged message would have withdrawn it by then too) and for at
// least keepUpShare of that time, so the client, not the server, is what
// holds the backlog. A client that acknowledges as frames arrive holds a
// full window for a round trip at a time and is never withdrawn, for a
// burst or for a server that is slow to serve it.
func OverloadReaper(t config.Tuning, stalled, held, behind, age time.Duration) bool {
	maxHeld := t.Lease * time.Duration(t.MaxDeliveryAttempts)
	cannotKeepUp := held > maxHeld && float64(held) >= keepUpShare*float64(behind)
	return (stalled > t.PendingTimeout || cannotKeepUp) && !spared(t, age)
}

// keepUpShare is the least share of its time behind that a client's window
// must have been full for the overload reaper to find that the client
// cannot keep up. A client slower than the messages it is sent keeps its
// window full nearly all the time; one served slowly by a loaded server
// was measured with its window full for about a quarter of it.
const keepUpShare = 0.75

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
// messages waiting behind its push window: it is withdrawn (close 4003)
// when its full window made no progress (no acknowledgement freed a slot)
// for longer than pending-timeout, or when it cannot keep up (see
// OverloadReaper). A client that acknowledges as frames arrive keeps
// making progress and catches up, whatever burst it received and however
// slowly the server refills its window.
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
		stalled, held, behind := m.heldLocked(now)
		var lag time.Duration
		for _, oldest := range m.behind {
			lag = max(lag, now.Sub(oldest))
		}
		m.mu.Unlock()
		if OverloadReaper(t, stalled, held, behind, now.Sub(m.connectedAt)) {
			why := fmt.Sprintf("withdrawn: %d unacknowledged messages (max-pending) held the window for %v with more waiting", t.MaxPending, stalled.Round(time.Millisecond))
			if stalled <= t.PendingTimeout {
				why = fmt.Sprintf("withdrawn: cannot keep up, the window was full for %v of %v with more waiting (the oldest %v old)", held.Round(time.Millisecond), behind.Round(time.Millisecond), lag.Round(time.Millisecond))
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
