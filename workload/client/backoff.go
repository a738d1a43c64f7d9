package client

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// backoff returns the wait before retry number attempt (0 for the first):
// lo doubled attempt times, capped at hi, with equal jitter (uniform in
// [d/2, d]) so that thousands of clients dropped at once do not come back
// in step, and no wait is shorter than half the nominal one.
func backoff(lo, hi time.Duration, attempt int) time.Duration {
	d := lo
	for i := 0; i < attempt && d < hi; i++ {
		d *= 2
	}
	if d > hi {
		d = hi
	}
	return jitter(d)
}

// jitter returns a uniform duration in [d/2, d].
func jitter(d time.Duration) time.Duration {
	if d <= 1 {
		return d
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

// sleep waits for d, or until ctx ends or stop is closed; it reports
// whether the whole wait elapsed.
func sleep(ctx context.Context, stop <-chan struct{}, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-stop:
		return false
	}
}

// semaphore counts sends in flight against hello's maxInFlightSends. Unlike
// golang.org/x/sync/semaphore its limit can change (every hello may report
// another), and it is FIFO so no sender starves. A limit <= 0 means no
// limit.
type semaphore struct {
	mu      sync.Mutex
	limit   int
	used    int
	waiters []chan struct{}
}

// acquire takes one slot, waiting in FIFO order; it fails when ctx ends or
// stop is closed first.
func (s *semaphore) acquire(ctx context.Context, stop <-chan struct{}) error {
	s.mu.Lock()
	if len(s.waiters) == 0 && (s.limit <= 0 || s.used < s.limit) {
		s.used++
		s.mu.Unlock()
		return nil
	}
	ch := make(chan struct{})
	s.waiters = append(s.waiters, ch)
	s.mu.Unlock()

	var err error
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		err = ctx.Err()
	case <-stop:
		err = ErrClosed
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	select {
	case <-ch: // granted while we were giving up: hand the slot on
		s.used--
		s.grant()
	default:
		for i, w := range s.waiters {
			if w == ch {
				s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
				break
			}
		}
	}
	return err
}

func (s *semaphore) release() {
	s.mu.Lock()
	s.used--
	s.grant()
	s.mu.Unlock()
}

// setLimit changes the limit; slots already taken stay taken.
func (s *semaphore) setLimit(n int) {
	s.mu.Lock()
	s.limit = n
	s.grant()
	s.mu.Unlock()
}

// grant wakes waiters while slots are free. s.mu is held.
func (s *semaphore) grant() {
	for len(s.waiters) > 0 && (s.limit <= 0 || s.used < s.limit) {
		close(s.waiters[0])
		s.waiters[0] = nil
		s.waiters = s.waiters[1:]
		s.used++
	}
}

// inUse reports the slots taken (for tests and Stats).
func (s *semaphore) inUse() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used
}
