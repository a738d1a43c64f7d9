package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/tetra-messenger/tetra/workload/history"
)

// CommitFailureWindow is how long a failed group commit keeps /readyz at
// 503 when no commit succeeded after it. A commit that succeeds ends it at
// once; without traffic the last failure stops counting after the window,
// so a quiet process whose store came back becomes ready again (it would
// otherwise get no traffic to prove it).
const CommitFailureWindow = 10 * time.Second

// commitHealth keeps the outcome of recent group commits (ingest Hooks).
type commitHealth struct {
	mu          sync.Mutex
	lastOK      time.Time
	failedSince time.Time // first failure after the last success; zero when the last commit succeeded
	lastFailure time.Time
	lastErr     string
	failures    int  // since the last success
	full        bool // a failure since the last success was history.ErrStorageFull
}

func (h *commitHealth) succeeded() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastOK = time.Now()
	h.failedSince, h.failures, h.lastErr, h.full = time.Time{}, 0, "", false
}

func (h *commitHealth) failed(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	if h.failedSince.IsZero() {
		h.failedSince = now
	}
	h.lastFailure, h.lastErr = now, err.Error()
	h.failures++
	h.full = h.full || errors.Is(err, history.ErrStorageFull)
}

// probeable reports whether a write probe may end the failure: commits
// failed, but none for want of room (a full store may take a small write
// and still refuse the commits; only a commit that succeeds proves it).
func (h *commitHealth) probeable(now time.Time) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return !h.failedSince.IsZero() && now.Sub(h.lastFailure) <= CommitFailureWindow && !h.full
}

// check returns "" when commits are healthy, else why not: the last commit
// failed, less than CommitFailureWindow ago, and none succeeded since.
func (h *commitHealth) check(now time.Time) string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.failedSince.IsZero() || now.Sub(h.lastFailure) > CommitFailureWindow {
		return ""
	}
	return fmt.Sprintf("%d group commits failed since %s, none succeeded: %s",
		h.failures, h.failedSince.UTC().Format(time.RFC3339), truncate(h.lastErr, 300))
}

// handleReady answers GET /readyz with one entry per check, each "ok" or
// why not: "store" (a ping), "index" (its stats), "outbox" (Kafka mode: the
// topic's head) and "commits" (whether recent group commits failed: a store
// that answers pings but cannot write, such as SQLite on a full disk, is
// not ready), plus "status": "ok", "degraded" or "not ready".
//
// 200 when the store, the outbox and the commits are ok, else 503. The
// index does not decide readiness (issue 24, point 2): while it fails the
// answer is 200 with "status":"degraded" and "degraded" and "reason" saying why (the
// HTTP API and history work; new sockets are refused with 1013), so a Redis
// outage does not take the pods out of their Service.
//
// While commits have failed (commitHealth), the store is probed with one
// small write (history.WriteProber) instead of waiting for the next group
// commit or the end of CommitFailureWindow: once the store takes writes
// again, /readyz is 200 at its next call (before: up to 10 s later). A
// store that reported itself full (history.ErrStorageFull) is not probed:
// a small write may fit where a commit does not, so there only a commit
// that succeeds (or the window's end) ends it, as before.
//
// The backend checks run at once and each gets what is left of
// Config.ReadyTimeout: one that has not answered by then reports a timeout,
// so the answer comes within ReadyTimeout even when a store hangs (its
// backends stopped, its host stalled).
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() || s.unready.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "draining"})
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.cfg.ReadyTimeout)
	defer cancel()
	type result struct{ name, err string }
	checks := map[string]func(context.Context) error{
		"store": s.store.Ping,
		"index": func(ctx context.Context) error { _, err := s.index.Stats(ctx); return err },
	}
	if s.relay != nil {
		// The outbox topic's head: a metadata and a ListOffsets round trip.
		checks["outbox"] = func(ctx context.Context) error { _, err := s.outbox.Head(ctx, 0); return err }
	}
	if p := s.backends.Prober; p != nil && s.commits.probeable(time.Now()) {
		checks["commits"] = func(ctx context.Context) error {
			if err := p.ProbeWrite(ctx); err != nil {
				return err
			}
			s.commits.succeeded()
			return nil
		}
	}
	results := make(chan result, len(checks)) // buffered: a late check never blocks
	for name, check := range checks {
		go func() {
			msg := ""
			if err := check(ctx); err != nil {
				msg = err.Error()
			}
			results <- result{name, msg}
		}()
	}
	out := map[string]string{}
	for name := range checks {
		out[name] = fmt.Sprintf("no answer within %v", s.cfg.ReadyTimeout)
	}
wait:
	for range checks {
		select {
		case res := <-results:
			out[res.name] = "ok"
			if res.err != "" {
				out[res.name] = res.err
			}
		case <-ctx.Done():
			break wait
		}
	}
	if out["index"] == "ok" {
		s.noteIndex(nil)
	} else {
		s.noteIndex(errors.New(out["index"]))
	}
	out["commits"] = "ok"
	if why := s.commits.check(time.Now()); why != "" {
		out["commits"] = why
	}
	status := http.StatusOK
	for name, v := range out {
		if v != "ok" && name != "index" {
			status = http.StatusServiceUnavailable
		}
	}
	why := s.Degraded()
	if why != "" {
		// "reason" is the key the operator reads (adminapi.Readyz), for
		// its Degraded condition; "degraded" says the same for people.
		out["degraded"] = why
		out["reason"] = why
	}
	switch {
	case status != http.StatusOK:
		out["status"] = "not ready"
	case why != "":
		out["status"] = "degraded"
	default:
		out["status"] = "ok"
	}
	writeJSON(w, status, out)
}
