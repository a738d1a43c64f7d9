package redis

import (
	"context"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tetra-messenger/tetra/workload/waterline"
)

// UserPresence is waterline.UserPresence for a fleet (PROTOCOL.md §7.4),
// in two keys per user under the index's prefix: "<prefix>upres:c:<user>",
// a sorted set of the user's open connections on every process scored by
// the Unix time in milliseconds until which each counts (a crashed
// process's stop counting then), and "<prefix>upres:s:<user>", a hash
// with st ("on", "leaving": no connection since seen, inside the grace;
// "off") and seen (the Unix ms its last connection closed). Each method
// is one script or one pipeline: one round trip per change, whatever the
// number of users who watch the user. Not part of the waterline (the
// offline nudge's presence keys are separate: package nudge).
type UserPresence struct{ x *Index }

var _ waterline.UserPresence = (*UserPresence)(nil)

// Users returns the index's user presence.
func (x *Index) Users() *UserPresence { return &UserPresence{x: x} }

func (p *UserPresence) keys(user string) []string {
	return []string{p.x.cfg.Prefix + "upres:c:" + user, p.x.cfg.Prefix + "upres:s:" + user}
}

// presenceKeyTTL is how long a user's keys outlive its last write.
const presenceKeyTTL = 7 * 24 * time.Hour

var upScript = goredis.NewScript(`
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
local st = redis.call('HGET', KEYS[2], 'st')
redis.call('HSET', KEYS[2], 'st', 'on')
redis.call('PEXPIRE', KEYS[2], ARGV[4])
if st == 'on' or st == 'leaving' then return 0 end
return 1`)

var downScript = goredis.NewScript(`
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[2])
if redis.call('ZCARD', KEYS[1]) > 0 then return 0 end
if redis.call('HGET', KEYS[2], 'st') ~= 'on' then return 0 end
redis.call('HSET', KEYS[2], 'st', 'leaving', 'seen', ARGV[2])
return 1`)

var settleScript = goredis.NewScript(`
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) > 0 then return -1 end
if redis.call('HGET', KEYS[2], 'st') ~= 'leaving' then return -1 end
local seen = tonumber(redis.call('HGET', KEYS[2], 'seen'))
if tonumber(ARGV[1]) - seen < tonumber(ARGV[2]) then return -1 end
redis.call('HSET', KEYS[2], 'st', 'off')
return seen`)

func ms(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

// Up implements waterline.UserPresence: one script.
func (p *UserPresence) Up(ctx context.Context, user, conn string, ttl time.Duration) (bool, error) {
	n, err := upScript.Run(ctx, p.x.rdb, p.keys(user), conn, ms(time.Now().Add(ttl)), ms(time.Now()),
		presenceKeyTTL.Milliseconds()).Int()
	if err != nil {
		return false, unavailable("presence up", err)
	}
	return n == 1, nil
}

// Down implements waterline.UserPresence: one script.
func (p *UserPresence) Down(ctx context.Context, user, conn string) (bool, error) {
	n, err := downScript.Run(ctx, p.x.rdb, p.keys(user), conn, ms(time.Now())).Int()
	if err != nil {
		return false, unavailable("presence down", err)
	}
	return n == 1, nil
}

// Settle implements waterline.UserPresence: one script.
func (p *UserPresence) Settle(ctx context.Context, user string, grace time.Duration) (bool, time.Time, error) {
	seen, err := settleScript.Run(ctx, p.x.rdb, p.keys(user), ms(time.Now()), grace.Milliseconds()).Int64()
	if err != nil {
		return false, time.Time{}, unavailable("presence settle", err)
	}
	if seen < 0 {
		return false, time.Time{}, nil
	}
	return true, time.UnixMilli(seen).UTC(), nil
}

// Refresh implements waterline.UserPresence: one pipeline (ZADD XX, so a
// connection closed meanwhile is not brought back).
func (p *UserPresence) Refresh(ctx context.Context, conns []waterline.PresenceConn, ttl time.Duration) error {
	if len(conns) == 0 {
		return nil
	}
	until := float64(time.Now().Add(ttl).UnixMilli())
	_, err := p.x.rdb.Pipelined(ctx, func(pl goredis.Pipeliner) error {
		for _, c := range conns {
			pl.ZAddXX(ctx, p.keys(c.User)[0], goredis.Z{Score: until, Member: c.ID})
		}
		return nil
	})
	if err != nil {
		return unavailable("presence refresh", err)
	}
	return nil
}

// Status implements waterline.UserPresence: one pipeline.
func (p *UserPresence) Status(ctx context.Context, users []string, grace time.Duration) (map[string]waterline.PresenceStatus, error) {
	out := make(map[string]waterline.PresenceStatus, len(users))
	if len(users) == 0 {
		return out, nil
	}
	now := time.Now()
	counts := make([]*goredis.IntCmd, len(users))
	states := make([]*goredis.SliceCmd, len(users))
	_, err := p.x.rdb.Pipelined(ctx, func(pl goredis.Pipeliner) error {
		for i, u := range users {
			k := p.keys(u)
			counts[i] = pl.ZCount(ctx, k[0], "("+ms(now), "+inf")
			states[i] = pl.HMGet(ctx, k[1], "st", "seen")
		}
		return nil
	})
	if err != nil && err != goredis.Nil {
		return nil, unavailable("presence status", err)
	}
	for i, u := range users {
		v := states[i].Val()
		st, _ := v[0].(string)
		seenS, _ := v[1].(string)
		seenMs, _ := strconv.ParseInt(seenS, 10, 64)
		var seen time.Time
		if seenMs > 0 {
			seen = time.UnixMilli(seenMs).UTC()
		}
		switch {
		case counts[i].Val() > 0 || (st == "leaving" && now.Sub(seen) < grace):
			out[u] = waterline.PresenceStatus{Online: true}
		default:
			out[u] = waterline.PresenceStatus{LastSeen: seen}
		}
	}
	return out, nil
}
