package server

import (
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/tetra-messenger/tetra/workload/protocol"
)

// The chat creation budget (config.Tuning.ChatCreatesPerMinute): POST
// /api/chats writes a chat row and a row per member, so without a bound
// one client could create chats as fast as the store takes them. Each
// user has one token bucket per process, refilled at ChatCreatesPerMinute
// a minute and holding one minute's worth; a creation over it is answered
// 429 rate_limited with retryAfterMs and Retry-After (PROTOCOL.md §7.7).
// A call that creates nothing (the direct chat of a pair that has one,
// answered 200; a refusal of the store) gives its token back. The bucket
// is this package's own, not a rate.Limiter: a Limiter's reservation
// cannot be given back once it is due.

// maxIdleBuckets is how many users' buckets createBudgets keeps before it
// drops the full ones (a full bucket is what a new one would be).
const maxIdleBuckets = 10000

// createBudgets holds the users' buckets. The zero value is ready.
type createBudgets struct {
	mu sync.Mutex
	m  map[string]*createBucket
}

// createBucket is one user's bucket, kept as the time it is empty until
// (GCRA's theoretical arrival time): each creation moves it one interval
// (a minute / perMinute) later, and a creation is allowed while it is at
// most perMinute-1 intervals ahead of now. Integer durations, so a wait
// it names is exact.
type createBucket struct {
	tat time.Time
}

// take takes one creation from user's bucket at perMinute a minute. It
// returns ok and a function that gives the token back (when nothing was
// created), or, over the budget, !ok and the wait in milliseconds (at
// least 1) until a creation is allowed.
func (b *createBudgets) take(user string, perMinute int, now time.Time) (giveBack func(), retryMs int64, ok bool) {
	perMinute = max(perMinute, 1)
	interval := time.Minute / time.Duration(perMinute)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[string]*createBucket{}
	}
	u := b.m[user]
	if u == nil {
		if len(b.m) >= maxIdleBuckets {
			for name, o := range b.m {
				if !o.tat.After(now) {
					delete(b.m, name) // full: as a new one
				}
			}
		}
		u = &createBucket{tat: now}
		b.m[user] = u
	}
	if u.tat.Before(now) {
		u.tat = now
	}
	if over := u.tat.Sub(now) - time.Duration(perMinute-1)*interval; over > 0 {
		return nil, max(1, int64((over+time.Millisecond-1)/time.Millisecond)), false
	}
	u.tat = u.tat.Add(interval)
	return func() {
		b.mu.Lock()
		defer b.mu.Unlock()
		u.tat = u.tat.Add(-interval)
	}, 0, true
}

// chargeCreate takes one chat creation from user's budget and returns the
// function that gives it back, or answers 429 rate_limited with
// retryAfterMs (and Retry-After) and returns nil.
func (s *Server) chargeCreate(w http.ResponseWriter, user string) func() {
	perMinute := s.Tuning().ChatCreatesPerMinute
	giveBack, retryMs, ok := s.creates.take(user, perMinute, time.Now())
	if !ok {
		writeErrorRetry(w, protocol.CodeRateLimited,
			fmt.Sprintf("chat creation over chatCreatesPerMinute: at most %d new chats a minute per user; retry later", perMinute), retryMs)
		return nil
	}
	return giveBack
}
