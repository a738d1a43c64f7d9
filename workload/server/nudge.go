package server

import (
	"time"

	"github.com/tetra-messenger/tetra/workload/metrics"
	"github.com/tetra-messenger/tetra/workload/nudge"
)

// newNudger builds the offline nudge's webhook sender (docs/nudge.md) when
// cfg.Nudge.URL is set; nil otherwise. With the Redis index it checks
// offline candidates against the fleet's presence, kept in that Redis.
func (s *Server) newNudger() (*nudge.Nudger, error) {
	ncfg := s.cfg.Nudge
	if ncfg.URL == "" {
		return nil, nil
	}
	if ncfg.Presence == nil {
		ncfg.Presence = s.backends.NudgePresence // nil with the in-process index
	}
	ncfg.OnBatch = func(_ int, d time.Duration) { s.metrics.NudgeBatch(d.Seconds()) }
	if ncfg.Logger == nil {
		ncfg.Logger = s.log
	}
	return nudge.New(ncfg)
}

// Nudger exposes the offline nudge's sender; nil without --nudge-url.
func (s *Server) Nudger() *nudge.Nudger { return s.nudger }

func (s *Server) nudgeSnapshot() *metrics.NudgeSnapshot {
	if s.nudger == nil {
		return nil
	}
	st := s.nudger.Stats()
	return &metrics.NudgeSnapshot{Queued: st.Queued, Sent: st.Sent, Failed: st.Failed, Online: st.Online,
		Requests: st.Requests, Dropped: st.Dropped, Depth: st.Depth}
}
