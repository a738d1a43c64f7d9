package server

import (
	"context"
	"time"

	"github.com/tetra-messenger/tetra/workload/metrics"
	"github.com/tetra-messenger/tetra/workload/nudge"
	redisidx "github.com/tetra-messenger/tetra/workload/waterline/redis"
)

// newNudger builds the offline nudge's webhook sender (docs/nudge.md) when
// cfg.Nudge.URL is set; nil otherwise. With the Redis index it checks
// offline candidates against the fleet's presence, kept in that Redis.
func (s *Server) newNudger() (*nudge.Nudger, error) {
	ncfg := s.cfg.Nudge
	if ncfg.URL == "" {
		return nil, nil
	}
	if ri, ok := s.index.(*redisidx.Index); ok && ncfg.Presence == nil {
		ncfg.Presence = redisPresence{ri.Presence()}
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

// redisPresence adapts the Redis index's presence to nudge.Presence.
type redisPresence struct{ p *redisidx.Presence }

func (r redisPresence) Publish(ctx context.Context, live, gone []nudge.Conn, ttl time.Duration) error {
	conv := func(cs []nudge.Conn) []redisidx.PresenceConn {
		out := make([]redisidx.PresenceConn, len(cs))
		for i, c := range cs {
			out[i] = redisidx.PresenceConn{User: c.User, ID: c.ID}
		}
		return out
	}
	return r.p.Publish(ctx, conv(live), conv(gone), ttl)
}

func (r redisPresence) Online(ctx context.Context, users []string) (map[string]bool, error) {
	return r.p.Online(ctx, users)
}
