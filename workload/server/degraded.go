package server

import (
	"context"
	"sync"
	"time"

	"github.com/tetra-messenger/tetra/workload/metrics"
)

// Degraded operation (issue 24, point 2). A Redis outage takes live
// delivery's bookkeeping away, not the store: the HTTP API and history keep
// working, so /readyz stays 200 (pods stay in the Service) and says
// "degraded" in its body; new WebSocket connections are refused with 1013
// before hello (session.run: the engine cannot register them), and open
// ones keep what they have. The state is kept here, from the checks of
// /readyz and of healthLoop (once a second), and exported as the body's
// "status"/"degraded" fields and the tetra_degraded{reason} gauge.

// healthInterval is how often healthLoop asks the index.
const healthInterval = time.Second

// liveHealth is what the server last saw of its index.
type liveHealth struct {
	mu       sync.Mutex
	indexErr string    // "" while the index answers
	since    time.Time // when indexErr became non-empty
}

// noteIndex records the outcome of one index check (nil: it answered),
// logging and exporting each change.
func (s *Server) noteIndex(err error) {
	h := &s.health
	h.mu.Lock()
	was := h.indexErr
	switch {
	case err == nil:
		h.indexErr = ""
	case was == "":
		h.indexErr, h.since = truncate(err.Error(), 300), time.Now()
	default:
		h.indexErr = truncate(err.Error(), 300)
	}
	now := h.indexErr
	since := h.since
	h.mu.Unlock()
	switch {
	case was == "" && now != "":
		s.log.Warn("degraded: the waterline index does not answer; HTTP and history keep working, new sockets are refused with 1013 until it does", "err", now)
		s.metrics.SetDegraded(metrics.ReasonIndexUnavailable, true)
	case was != "" && now == "":
		s.log.Info("the waterline index answers again; no longer degraded", "after", time.Since(since).Round(time.Millisecond).String())
		s.metrics.SetDegraded(metrics.ReasonIndexUnavailable, false)
	}
}

// Degraded returns why the server runs degraded ("" when it does not):
// "index_unavailable: " and the index's last error. It is /readyz's
// "degraded" field.
func (s *Server) Degraded() string {
	h := &s.health
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.indexErr == "" {
		return ""
	}
	return metrics.ReasonIndexUnavailable + " since " + h.since.UTC().Format(time.RFC3339) + ": " + h.indexErr +
		" (live delivery only: new WebSocket connections are refused with 1013, open ones keep theirs; HTTP and history work)"
}

// healthLoop asks the index once per healthInterval, so the degraded state
// and its gauge follow the index without a probe calling /readyz.
func (s *Server) healthLoop(ctx context.Context) {
	defer s.bg.Done()
	t := time.NewTicker(healthInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, s.cfg.ReadyTimeout)
		_, err := s.index.Stats(cctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		s.noteIndex(err)
	}
}
