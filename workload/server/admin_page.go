package server

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/tetra-messenger/tetra/workload/admin"
	"github.com/tetra-messenger/tetra/workload/protocol"
)

// Series ring: one sample a second for SeriesCapacity seconds.
const (
	SeriesCapacity = 600
	seriesInterval = time.Second
)

// Sample is one once-a-second reading of the server's own counters and
// gauges, as served by GET /admin/series. Counters are totals since start;
// the page turns them into rates.
type Sample struct {
	T                int64            `json:"t"` // unix milliseconds
	Accepted         int64            `json:"accepted"`
	Deliveries       map[string]int64 `json:"deliveries"` // by path: fast, poll, redelivery
	Acks             int64            `json:"acks"`
	OutboxDepth      int64            `json:"outboxDepth"`
	OldestAgeSeconds float64          `json:"oldestAgeSeconds"`
	Connected        int64            `json:"connected"`
	Withdrawals      map[string]int64 `json:"withdrawals"` // by reason (reaper)
	Reconnects       int64            `json:"reconnects"`
	InboundQueued    int64            `json:"inboundQueued"`
}

// SeriesResponse is the body of GET /admin/series.
type SeriesResponse struct {
	IntervalMs int64    `json:"intervalMs"`
	Capacity   int      `json:"capacity"`
	Samples    []Sample `json:"samples"`
}

// seriesRing is a fixed-size ring of samples.
type seriesRing struct {
	mu   sync.Mutex
	buf  [SeriesCapacity]Sample
	next int
	n    int
}

func (r *seriesRing) add(s Sample) {
	r.mu.Lock()
	r.buf[r.next] = s
	r.next = (r.next + 1) % SeriesCapacity
	r.n = min(r.n+1, SeriesCapacity)
	r.mu.Unlock()
}

// since returns the samples taken at or after t (unix ms), oldest first.
func (r *seriesRing) since(t int64) []Sample {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]Sample, 0, r.n)
	for i := 0; i < r.n; i++ {
		s := r.buf[(r.next-r.n+i+SeriesCapacity)%SeriesCapacity]
		if s.T >= t {
			out = append(out, s)
		}
	}
	return out
}

// adminPageRoutes serves the operator page (package admin) and
// GET /admin/series from the ring the sampler fills (started by Start,
// sampleLoop). Called once, from routes.
func (s *Server) adminPageRoutes(mux *http.ServeMux) {
	page := admin.Handler()
	mux.Handle("GET "+admin.PagePath, page)
	mux.Handle("GET "+admin.ScriptPath, page)
	mux.Handle("GET "+admin.StylePath, page)
	ring := s.series
	mux.HandleFunc("GET /admin/series", s.adminOnly(func(w http.ResponseWriter, r *http.Request) {
		q, ok := queryValues(w, r)
		if !ok {
			return
		}
		minutes := 10.0
		if v := q.Get("minutes"); v != "" {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f <= 0 {
				writeError(w, protocol.CodeInvalid, "minutes must be a positive number")
				return
			}
			minutes = min(f, float64(SeriesCapacity)/60)
		}
		from := time.Now().Add(-time.Duration(minutes * float64(time.Minute))).UnixMilli()
		w.Header().Set("Cache-Control", "no-store")
		writeJSON(w, http.StatusOK, SeriesResponse{IntervalMs: seriesInterval.Milliseconds(), Capacity: SeriesCapacity, Samples: ring.since(from)})
	}))
	s.pprofRoutes(mux)
}

// sampleLoop records a sample into ring every seriesInterval until ctx
// ends (Shutdown cancels it and waits). It wakes more often than that so
// that the grid below can notice a stall.
func (s *Server) sampleLoop(ctx context.Context, ring *seriesRing) {
	defer s.bg.Done()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	ring.add(s.sample())
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		if now := time.Now(); now.Sub(last) >= seriesInterval {
			// Keep samples on a 1 s grid from the first one (now - last
			// would drift by up to a tick per sample); after a stall
			// longer than an interval, restart the grid instead of
			// catching up with a burst of samples.
			last = last.Add(seriesInterval)
			if now.Sub(last) >= seriesInterval {
				last = now
			}
			ring.add(s.sample())
		}
	}
}

// sample reads the server's own metrics registry: the same numbers
// /metrics exposes, so the page and Prometheus agree.
func (s *Server) sample() Sample {
	sm := Sample{T: time.Now().UnixMilli(), Deliveries: map[string]int64{}, Withdrawals: map[string]int64{}}
	mfs, err := s.metrics.Registry().Gather()
	if err != nil && len(mfs) == 0 {
		return sm
	}
	label := func(m *dto.Metric, name string) string {
		for _, l := range m.GetLabel() {
			if l.GetName() == name {
				return l.GetValue()
			}
		}
		return ""
	}
	val := func(m *dto.Metric) float64 {
		switch {
		case m.GetCounter() != nil:
			return m.GetCounter().GetValue()
		case m.GetGauge() != nil:
			return m.GetGauge().GetValue()
		}
		return 0
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			v := val(m)
			switch mf.GetName() {
			case "tetra_messages_accepted_total":
				sm.Accepted = int64(v)
			case "tetra_deliveries_total":
				sm.Deliveries[label(m, "path")] = int64(v)
			case "tetra_acks_total":
				sm.Acks = int64(v)
			case "tetra_outbox_depth_rows":
				sm.OutboxDepth += int64(v)
			case "tetra_outbox_oldest_age_seconds":
				sm.OldestAgeSeconds = v
			case "tetra_connected_clients":
				sm.Connected = int64(v)
			case "tetra_withdrawals_total":
				sm.Withdrawals[label(m, "reason")] = int64(v)
			case "tetra_reconnects_total":
				sm.Reconnects = int64(v)
			case "tetra_inbound_queue_messages":
				sm.InboundQueued = int64(v)
			}
		}
	}
	return sm
}
