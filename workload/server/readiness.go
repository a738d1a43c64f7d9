package server

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"
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
	failures    int // since the last success
}

func (h *commitHealth) succeeded() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lastOK = time.Now()
	h.failedSince, h.failures, h.lastErr = time.Time{}, 0, ""
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

// handleReady answers GET /readyz: 200 when every check passes, else 503,
// with {"store":..., "index":..., "commits":...} (and "outbox" in Kafka
// mode), each "ok" or why not. "store", "index" and "outbox" ask the
// backend; "commits" says whether recent group commits failed (a store that
// answers pings but cannot write, such as SQLite on a full disk, is not
// ready). The backend checks run at once and each gets what is left of
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
	if s.kafkaLog != nil {
		// The outbox topic's head: a metadata and a ListOffsets round trip.
		checks["outbox"] = func(ctx context.Context) error { _, err := s.outbox.Head(ctx, 0); return err }
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
	status := http.StatusOK
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
	out["commits"] = "ok"
	if why := s.commits.check(time.Now()); why != "" {
		out["commits"] = why
	}
	for _, v := range out {
		if v != "ok" {
			status = http.StatusServiceUnavailable
		}
	}
	writeJSON(w, status, out)
}
