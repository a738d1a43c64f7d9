package server

import (
	"context"
	"net/http"
	"time"

	"github.com/tetra-messenger/tetra/workload/delivery"
	"github.com/tetra-messenger/tetra/workload/outbox"
	"github.com/tetra-messenger/tetra/workload/protocol"
)

// AdminStats is the body of GET /admin/stats: live delivery counters and
// the outbox per partition.
type AdminStats struct {
	Delivery      delivery.Stats `json:"delivery"`
	Outbox        []outbox.Stats `json:"outbox"`
	OutboxDepth   int64          `json:"outboxDepth"`
	OutboxOldest  time.Time      `json:"outboxOldest,omitzero"`
	InboundQueued int            `json:"inboundQueued"`
}

// adminOnly serves h to admin tokens only: a valid user token gets 403
// forbidden (it is a token, just not enough), a missing or bad one 401
// (PROTOCOL.md §1).
func (s *Server) adminOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok := bearer(r)
		if err := s.signer.VerifyAdmin(tok); err != nil {
			if _, uerr := s.signer.Verify(tok); uerr == nil {
				writeError(w, protocol.CodeForbidden, "an admin token is required (tetra token --admin); a user token is not enough")
				return
			}
			writeError(w, protocol.CodeUnauthorized, "an admin token is required (tetra token --admin)")
			return
		}
		h(w, r)
	}
}

// Stats collects AdminStats.
func (s *Server) Stats(ctx context.Context) (AdminStats, error) {
	st := AdminStats{Delivery: s.engine.Stats(), InboundQueued: s.pipeline.Depth()}
	parts, err := s.outbox.Partitions(ctx)
	if err != nil {
		return st, err
	}
	for _, p := range parts {
		ps, err := s.outbox.Stats(ctx, p)
		if err != nil {
			return st, err
		}
		st.Outbox = append(st.Outbox, ps)
		st.OutboxDepth += ps.Depth
		if !ps.OldestAt.IsZero() && (st.OutboxOldest.IsZero() || ps.OldestAt.Before(st.OutboxOldest)) {
			st.OutboxOldest = ps.OldestAt
		}
	}
	return st, nil
}

func (s *Server) handleAdminStats(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	st, err := s.Stats(ctx)
	if err != nil {
		writeError(w, protocol.CodeUnavailable, "outbox unavailable: "+err.Error())
		return
	}
	writeJSON(w, http.StatusOK, st)
}

// handleAdminRebuild rebuilds this process's part of the waterline index
// now, from its connections' windows (delivery.Engine.Rebuild; the
// operator calls it after a Redis failover).
func (s *Server) handleAdminRebuild(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 60*time.Second)
	defer cancel()
	start := time.Now()
	if err := s.engine.Rebuild(ctx, delivery.RebuildRequested); err != nil {
		writeError(w, protocol.CodeUnavailable, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"rebuilt": true, "tookMs": time.Since(start).Milliseconds()})
}
