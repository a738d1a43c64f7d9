package slogx

import (
	"log/slog"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// Interval is the project's interval for sampled warnings: a failure
// repeating while a dependency is away is logged every 5 s, with a count.
const Interval = 5 * time.Second

// Sampled logs a repeating warning at most once per interval: the first
// occurrence at once, then the first after each interval, each line with
// an "occurrences" attribute counting the warnings since the last line
// (itself included). Safe for concurrent use; one Sampled per kind of
// warning. Make one with NewSampled.
type Sampled struct {
	n atomic.Int64
	s rate.Sometimes
}

// NewSampled returns a Sampled that logs at most once per interval (> 0).
func NewSampled(interval time.Duration) *Sampled {
	return &Sampled{s: rate.Sometimes{Interval: interval}}
}

// Warn counts one occurrence and logs msg with args at level Warn when the
// interval allows.
func (w *Sampled) Warn(l *slog.Logger, msg string, args ...any) {
	w.n.Add(1)
	w.s.Do(func() {
		l.Warn(msg, append(args, "occurrences", w.n.Swap(0))...)
	})
}
