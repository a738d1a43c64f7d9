package delivery

import (
	"time"

	"github.com/tetra-messenger/tetra/workload/config"
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
