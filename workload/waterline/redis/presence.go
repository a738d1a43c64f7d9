package redis

import (
	"context"
	"fmt"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tetra-messenger/tetra/workload/waterline"
)

// PresenceConn is one connection in the fleet's presence.
type PresenceConn struct{ User, ID string }

// Presence is the fleet's presence of connected users, for the offline
// nudge (package nudge): one sorted set per user under the index's prefix
// ("<prefix>presence:<user>"), its members the user's connection ids on
// every process, each scored by the Unix time in milliseconds until which
// it counts as present. A process refreshes its own connections well
// within the TTL and removes them when they go; a crashed process's
// connections stop counting when their TTL passes. It is not part of the
// waterline: nothing the GC decides reads it.
type Presence struct{ x *Index }

// Presence returns the index's presence.
func (x *Index) Presence() *Presence { return &Presence{x: x} }

func (p *Presence) key(user string) string { return p.x.cfg.Prefix + "presence:" + user }

// Publish marks live as present until ttl from now and removes gone, in
// one round trip. Every key expires 2 x ttl after its last write.
func (p *Presence) Publish(ctx context.Context, live, gone []PresenceConn, ttl time.Duration) error {
	if len(live) == 0 && len(gone) == 0 {
		return nil
	}
	until := float64(time.Now().Add(ttl).UnixMilli())
	_, err := p.x.rdb.Pipelined(ctx, func(pl goredis.Pipeliner) error {
		for _, c := range gone {
			pl.ZRem(ctx, p.key(c.User), c.ID)
		}
		for _, c := range live {
			k := p.key(c.User)
			pl.ZAdd(ctx, k, goredis.Z{Score: until, Member: c.ID})
			pl.PExpire(ctx, k, 2*ttl)
		}
		return nil
	})
	if err != nil {
		return unavailable("publish presence", err)
	}
	return nil
}

// Online reports which of users have a connection present now, in one
// round trip.
func (p *Presence) Online(ctx context.Context, users []string) (map[string]bool, error) {
	out := make(map[string]bool, len(users))
	if len(users) == 0 {
		return out, nil
	}
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	cmds := make([]*goredis.IntCmd, len(users))
	_, err := p.x.rdb.Pipelined(ctx, func(pl goredis.Pipeliner) error {
		for i, u := range users {
			cmds[i] = pl.ZCount(ctx, p.key(u), "("+now, "+inf")
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("redis: read presence: %w: %w", waterline.ErrUnavailable, err)
	}
	for i, u := range users {
		out[u] = cmds[i].Val() > 0
	}
	return out, nil
}
