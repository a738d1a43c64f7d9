package config

import (
	"fmt"
	"time"
)

// Tuning is the live-tunable configuration. The zero value is not valid;
// start from Default().
type Tuning struct {
	// Lease is how long a sent, unacknowledged message waits before the
	// poller re-delivers it. Default 10 s. Keep it well above the P99.9
	// delivery-to-ack latency (paper: "claim-lease").
	Lease time.Duration
	// MaxDeliveryAttempts: a message sent this many times without an ack
	// withdraws its recipient from live delivery (close 4002). Default 3.
	MaxDeliveryAttempts int
	// MaxPending is the push window: the most message frames the server
	// keeps sent and unacknowledged on one connection. What does not fit
	// waits in the outbox and is sent as acknowledgements free the window
	// (docs/design.md, "The push window"); clients learn it from
	// hello.limits.maxPending. Default 20.
	MaxPending int
	// PendingTimeout: a connection whose full window made no progress (no
	// acknowledgement freed a slot) for longer than this while messages
	// wait behind it is withdrawn (the overload reaper, close 4003); so is
	// one whose window, since it fell behind, was full for longer than
	// Lease x MaxDeliveryAttempts in all and for most of that time (it
	// cannot keep up; delivery.OverloadReaper). Only time with a full
	// window counts: a client that acknowledges as frames arrive is never
	// withdrawn for a burst, nor for a server slow to refill its window.
	// Default 5 s.
	PendingTimeout time.Duration
	// ReconnectGrace: the attempts and overload reapers spare a connection
	// younger than this. Default 0 (the paper measured larger values as
	// counter-productive under load).
	ReconnectGrace time.Duration
	// PingInterval is how often the server pings each connection; reported
	// to clients in hello. Default 15 s.
	PingInterval time.Duration
	// PingTimeout: a connection that answered no ping and sent no frame
	// for PingInterval+PingTimeout is closed as idle (4004). Default 10 s.
	PingTimeout time.Duration
	// GCGrace: an outbox row younger than this is never deleted. Default 5 s.
	GCGrace time.Duration
	// GCInterval is the cadence of the waterline GC. Default 1 s.
	GCInterval time.Duration
	// OutboxRetention is the age backstop: outbox rows older than this are
	// deleted even when pinned. Default 26 h.
	OutboxRetention time.Duration
	// HistoryRetention: history older than this is purged. Default 90 days.
	// Must exceed OutboxRetention (invariant I4).
	HistoryRetention time.Duration
	// PollInterval is the outbox poller's cadence. Default 100 ms.
	PollInterval time.Duration
	// PollBatch is the most rows the poller reads per scan call. Default 6000.
	PollBatch int
	// MaxBodyBytes is the largest message body accepted, in bytes of UTF-8.
	// Default 4096.
	MaxBodyBytes int
	// MaxInFlightSends is the per-connection credit: sends not yet answered.
	// Default 64.
	MaxInFlightSends int
	// SendsPerSecond is the per-connection send rate (token bucket with a
	// burst of the same size). Default 50.
	SendsPerSecond int
	// FanoutPerSecond is each user's budget of outbox rows per second on
	// one process, over all the user's connections: a send costs one row
	// per member of its chat (the sender included), as many as it writes,
	// capped at the burst, which is one second's worth, so a send to a
	// chat larger than the budget still goes, alone in its second. A send
	// over the budget is answered rate_limited and not stored; clients
	// learn the value from hello.limits.fanoutPerSecond (issue 13, point
	// 7: before, one connection wrote 50,000 rows in 0.3 s by sending to a
	// 1,000-member group). Default 2000: four times the busiest scenario
	// the load generator runs (groups of 10 at 50 sends/s, 500 rows/s), a
	// whole 1,000-member group twice a second, and every test that lifts
	// the send rate for direct chats (1,000 pipelined sends, 2,000 rows)
	// inside one burst.
	FanoutPerSecond int
	// ChatCreatesPerMinute is each user's budget of chats created per
	// minute on one process (POST /api/chats): a token bucket refilled at
	// this many a minute that holds one minute's worth, so a burst of
	// this many goes at once. A creation over it is answered 429
	// rate_limited with retryAfterMs and Retry-After (PROTOCOL.md §7.7);
	// a call that creates nothing (the direct chat of a pair that has
	// one) costs nothing. Before, one client could create chats without
	// bound. Default 600: ten a second sustained, far above what a person
	// does, and a burst that lets a client (or a conformance suite) create
	// the 501 chats that page a chat list at limit=500 without a wait.
	ChatCreatesPerMinute int
}

// Default returns the paper's defaults.
func Default() Tuning {
	return Tuning{
		Lease:                10 * time.Second,
		MaxDeliveryAttempts:  3,
		MaxPending:           20,
		PendingTimeout:       5 * time.Second,
		ReconnectGrace:       0,
		PingInterval:         15 * time.Second,
		PingTimeout:          10 * time.Second,
		GCGrace:              5 * time.Second,
		GCInterval:           time.Second,
		OutboxRetention:      26 * time.Hour,
		HistoryRetention:     90 * 24 * time.Hour,
		PollInterval:         100 * time.Millisecond,
		PollBatch:            6000,
		MaxBodyBytes:         4096,
		MaxInFlightSends:     64,
		SendsPerSecond:       50,
		FanoutPerSecond:      2000,
		ChatCreatesPerMinute: 600,
	}
}

// Validate checks every setting against its knob's range (Knobs) and the
// cross-field rules; the error names the offending key as it appears in
// Keys (for example "maxDeliveryAttempts must be between 1 and 100, got 0").
func (t Tuning) Validate() error {
	for _, k := range Knobs {
		v := k.value(&t)
		if v >= k.Min && v <= k.Max {
			continue
		}
		if k.Kind == Duration {
			return fmt.Errorf("%s must be between %v and %v, got %v", k.Key, time.Duration(k.Min), time.Duration(k.Max), time.Duration(v))
		}
		return fmt.Errorf("%s must be between %d and %d, got %d", k.Key, k.Min, k.Max, v)
	}
	if t.HistoryRetention <= t.OutboxRetention {
		return fmt.Errorf("historyRetention (%v) must exceed outboxRetention (%v): history must outlive every outbox row (invariant I4)", t.HistoryRetention, t.OutboxRetention)
	}
	return nil
}
