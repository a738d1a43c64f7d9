package config

import (
	"flag"
	"strconv"
	"time"
)

// Kind is the type of a knob's value.
type Kind int

const (
	// Duration values are Go durations ("10s", "26h").
	Duration Kind = iota
	// Count values are decimal integers.
	Count
)

// Knob describes one live-tunable setting. Knobs is the one table the
// rest derives from: the tuning-file keys (Keys, Set, Render), the ranges
// Validate checks, the `tetra serve` flags (RegisterFlags, and through them
// the TETRA_* environment variables), the flags the load generator passes
// its servers (Args), the operator's mapping of Messenger fields (CRD;
// render.Tuning walks the table) and the knobs a load sweep row may move
// (loadgen.SweepRow); tests hold the Messenger CRD's markers
// (internal/operator/render) and the README's knob table to it.
type Knob struct {
	// Key names the setting in a tuning directory, in the operator's
	// ConfigMap and in errors.
	Key string
	// Flag is the `tetra serve` flag, without dashes; its environment
	// variable is TETRA_ and the flag in upper case with _ for -.
	Flag string
	// CRD is the Messenger field that sets it, relative to spec
	// ("delivery.maxDeliveryAttempts"); empty when the CRD has none.
	CRD string
	// Kind, and the inclusive range: nanoseconds for a Duration.
	Kind     Kind
	Min, Max int64
	// Usage is the flag's help text.
	Usage string
	// field points at the setting in t.
	field func(t *Tuning) any
}

func dur(p *time.Duration) any { return p }
func cnt(p *int) any           { return p }

// Knobs is every setting, in the order flags and files list them. Names
// differ across the three surfaces in a few places, kept for compatibility
// and recorded here: the key pingTimeout is the CRD's delivery.idleTimeout,
// outboxRetention is retention.outboxBackstop, historyRetention is
// retention.history, and the flags --max-body, --max-inflight, --send-rate,
// --fanout-rate and --chat-create-rate set maxBodyBytes, maxInFlightSends,
// sendsPerSecond, fanoutPerSecond and chatCreatesPerMinute.
var Knobs = []Knob{
	{Key: "lease", Flag: "lease", CRD: "delivery.lease", Kind: Duration, Min: int64(100 * time.Millisecond), Max: int64(time.Hour),
		Usage: "re-deliver an unacknowledged message after this long", field: func(t *Tuning) any { return dur(&t.Lease) }},
	{Key: "maxDeliveryAttempts", Flag: "max-delivery-attempts", CRD: "delivery.maxDeliveryAttempts", Kind: Count, Min: 1, Max: 100,
		Usage: "withdraw a client (4002) when a message is due after this many sends", field: func(t *Tuning) any { return cnt(&t.MaxDeliveryAttempts) }},
	{Key: "maxPending", Flag: "max-pending", CRD: "delivery.maxPending", Kind: Count, Min: 1, Max: 100000,
		Usage: "push window: most message frames unacknowledged per connection; more wait in the outbox", field: func(t *Tuning) any { return cnt(&t.MaxPending) }},
	{Key: "pendingTimeout", Flag: "pending-timeout", CRD: "delivery.pendingTimeout", Kind: Duration, Min: int64(100 * time.Millisecond), Max: int64(time.Hour),
		Usage: "withdraw a client (4003) whose full window made no progress this long while messages wait", field: func(t *Tuning) any { return dur(&t.PendingTimeout) }},
	{Key: "reconnectGrace", Flag: "reconnect-grace", CRD: "delivery.reconnectGrace", Kind: Duration, Min: 0, Max: int64(time.Hour),
		Usage: "spare connections younger than this from the overload and attempts reapers", field: func(t *Tuning) any { return dur(&t.ReconnectGrace) }},
	{Key: "pingInterval", Flag: "ping-interval", CRD: "delivery.pingInterval", Kind: Duration, Min: int64(100 * time.Millisecond), Max: int64(10 * time.Minute),
		Usage: "server ping cadence", field: func(t *Tuning) any { return dur(&t.PingInterval) }},
	{Key: "pingTimeout", Flag: "ping-timeout", CRD: "delivery.idleTimeout", Kind: Duration, Min: int64(100 * time.Millisecond), Max: int64(10 * time.Minute),
		Usage: "close as idle (4004) after ping-interval+ping-timeout of silence", field: func(t *Tuning) any { return dur(&t.PingTimeout) }},
	{Key: "gcGrace", Flag: "gc-grace", CRD: "delivery.gcGrace", Kind: Duration, Min: 0, Max: int64(time.Hour),
		Usage: "never delete an outbox row younger than this", field: func(t *Tuning) any { return dur(&t.GCGrace) }},
	{Key: "gcInterval", Flag: "gc-interval", CRD: "delivery.gcInterval", Kind: Duration, Min: int64(10 * time.Millisecond), Max: int64(time.Hour),
		Usage: "waterline GC cadence", field: func(t *Tuning) any { return dur(&t.GCInterval) }},
	{Key: "outboxRetention", Flag: "outbox-retention", CRD: "retention.outboxBackstop", Kind: Duration, Min: int64(time.Minute), Max: int64(365 * 24 * time.Hour),
		Usage: "age backstop: delete outbox rows older than this even when pinned", field: func(t *Tuning) any { return dur(&t.OutboxRetention) }},
	{Key: "historyRetention", Flag: "history-retention", CRD: "retention.history", Kind: Duration, Min: int64(time.Hour), Max: int64(100 * 365 * 24 * time.Hour),
		Usage: "purge history older than this (must exceed --outbox-retention)", field: func(t *Tuning) any { return dur(&t.HistoryRetention) }},
	{Key: "pollInterval", Flag: "poll-interval", CRD: "delivery.pollInterval", Kind: Duration, Min: int64(time.Millisecond), Max: int64(time.Minute),
		Usage: "outbox poller cadence", field: func(t *Tuning) any { return dur(&t.PollInterval) }},
	{Key: "pollBatch", Flag: "poll-batch", CRD: "delivery.pollBatch", Kind: Count, Min: 1, Max: 1000000,
		Usage: "rows the poller reads per scan", field: func(t *Tuning) any { return cnt(&t.PollBatch) }},
	{Key: "maxBodyBytes", Flag: "max-body", CRD: "limits.maxBodyBytes", Kind: Count, Min: 1, Max: 60000,
		Usage: "largest message body in bytes", field: func(t *Tuning) any { return cnt(&t.MaxBodyBytes) }},
	{Key: "maxInFlightSends", Flag: "max-inflight", CRD: "limits.maxInFlightSends", Kind: Count, Min: 1, Max: 100000,
		Usage: "per-connection credits: sends awaiting an answer", field: func(t *Tuning) any { return cnt(&t.MaxInFlightSends) }},
	{Key: "sendsPerSecond", Flag: "send-rate", CRD: "limits.sendsPerSecond", Kind: Count, Min: 1, Max: 1000000,
		Usage: "per-connection sends per second", field: func(t *Tuning) any { return cnt(&t.SendsPerSecond) }},
	{Key: "fanoutPerSecond", Flag: "fanout-rate", CRD: "limits.fanoutPerSecond", Kind: Count, Min: 1, Max: 100000000,
		Usage: "per-user outbox rows per second: a send costs one per member of its chat; over it, rate_limited", field: func(t *Tuning) any { return cnt(&t.FanoutPerSecond) }},
	{Key: "chatCreatesPerMinute", Flag: "chat-create-rate", CRD: "limits.chatCreatesPerMinute", Kind: Count, Min: 1, Max: 1000000,
		Usage: "per-user chats created per minute (POST /api/chats), a minute's worth at once; over it, 429 rate_limited", field: func(t *Tuning) any { return cnt(&t.ChatCreatesPerMinute) }},
}

// Keys are the names of the tuning settings (Knob.Key), as files in a
// mounted ConfigMap directory (one file per key) and as rendered by the
// operator. Durations use Go syntax ("10s", "26h"); counts are decimal
// integers.
var Keys = func() []string {
	out := make([]string, len(Knobs))
	for i, k := range Knobs {
		out[i] = k.Key
	}
	return out
}()

// Lookup returns the knob named key (Knob.Key).
func Lookup(key string) (Knob, bool) { return knob(key) }

// knob returns the knob named key.
func knob(key string) (Knob, bool) {
	for _, k := range Knobs {
		if k.Key == key {
			return k, true
		}
	}
	return Knob{}, false
}

// value is the knob's setting in t, as an int64 (nanoseconds for a
// Duration).
func (k Knob) value(t *Tuning) int64 {
	switch p := k.field(t).(type) {
	case *time.Duration:
		return int64(*p)
	case *int:
		return int64(*p)
	}
	return 0
}

// Value is the knob's setting in t: nanoseconds for a Duration, the count
// for a Count.
func (k Knob) Value(t Tuning) int64 { return k.value(&t) }

// SetValue sets the knob's setting in t to v: nanoseconds for a Duration,
// the count for a Count. It does not check the range (Tuning.Validate
// does).
func (k Knob) SetValue(t *Tuning, v int64) {
	switch p := k.field(t).(type) {
	case *time.Duration:
		*p = time.Duration(v)
	case *int:
		*p = int(v)
	}
}

// Text renders the knob's setting in t as a tuning file holds it.
func (k Knob) Text(t Tuning) string {
	switch p := k.field(&t).(type) {
	case *time.Duration:
		return p.String()
	case *int:
		return strconv.Itoa(*p)
	}
	return ""
}

// RegisterFlags defines a flag for every knob on fs, each defaulting to
// its value in t and writing to it.
func (t *Tuning) RegisterFlags(fs *flag.FlagSet) {
	for _, k := range Knobs {
		switch p := k.field(t).(type) {
		case *time.Duration:
			fs.DurationVar(p, k.Flag, *p, k.Usage)
		case *int:
			fs.IntVar(p, k.Flag, *p, k.Usage)
		}
	}
}

// Args renders t as `tetra serve` flags, one --flag=value per knob.
func (t Tuning) Args() []string {
	out := make([]string, len(Knobs))
	for i, k := range Knobs {
		out[i] = "--" + k.Flag + "=" + k.Text(t)
	}
	return out
}
