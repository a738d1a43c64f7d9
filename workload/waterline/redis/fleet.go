package redis

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tetra-messenger/tetra/workload/waterline"
)

// Fleet timings.
const (
	// ClaimTTL is how long a device's newest epoch is remembered after its
	// last connection; a claim after that starts again from the server's
	// clock, which still orders it after any claim of the last day.
	ClaimTTL = 24 * time.Hour
	// tombstoneTTL is how long a reaped owner's tombstone waits for the
	// owner's next heartbeat.
	tombstoneTTL = time.Hour
)

var _ waterline.Fleet = (*Index)(nil)

// kDevice is the key of a device's newest claim epoch. User and device
// are query-escaped (":" included), so the key name is printable, has no
// NUL byte, and no two (user, device) pairs share it.
func (x *Index) kDevice(user, device string) string {
	return x.cfg.Prefix + "dev:" + url.QueryEscape(user) + ":" + url.QueryEscape(device)
}
func (x *Index) kChannel() string { return x.cfg.Prefix + "fleet" }

// Claim implements waterline.Fleet: one script stores the device's new
// epoch and publishes the claim on the fleet channel.
func (x *Index) Claim(ctx context.Context, user, device, connID string) (waterline.Claim, error) {
	cctx, cancel := x.call(ctx)
	defer cancel()
	res, err := claimScript.Run(cctx, x.rdb, []string{x.kDevice(user, device)},
		ClaimTTL.Milliseconds(), x.kChannel(), user, device, connID, x.cfg.Owner).Text()
	if err != nil {
		return waterline.Claim{}, unavailable("claim", err)
	}
	epoch, err := strconv.ParseInt(res, 10, 64)
	if err != nil {
		return waterline.Claim{}, fmt.Errorf("redis: claim: epoch %q: %w", res, err)
	}
	return waterline.Claim{User: user, Device: device, ConnID: connID, Owner: x.cfg.Owner, Epoch: epoch}, nil
}

// LatestEpoch implements waterline.Fleet.
func (x *Index) LatestEpoch(ctx context.Context, user, device string) (int64, error) {
	cctx, cancel := x.call(ctx)
	defer cancel()
	v, err := x.rdb.Get(cctx, x.kDevice(user, device)).Int64()
	if err == goredis.Nil {
		return 0, nil
	}
	if err != nil {
		return 0, unavailable("latest epoch", err)
	}
	return v, nil
}

// Wake implements waterline.Fleet with one PUBLISH naming this owner.
func (x *Index) Wake(ctx context.Context) error {
	cctx, cancel := x.call(ctx)
	defer cancel()
	if err := x.rdb.Publish(cctx, x.kChannel(), "w"+x.cfg.Owner).Err(); err != nil {
		return unavailable("wake", err)
	}
	return nil
}

type claimMsg struct {
	U, D, C, O, E string
}

type broadcastMsg struct {
	O string   `json:"o"`
	U []string `json:"u"`
	F string   `json:"f"`
}

// Broadcast implements waterline.Fleet with one PUBLISH.
func (x *Index) Broadcast(ctx context.Context, users []string, frame []byte) error {
	b, err := json.Marshal(broadcastMsg{O: x.cfg.Owner, U: users, F: string(frame)})
	if err != nil {
		return fmt.Errorf("redis: broadcast: %w", err)
	}
	cctx, cancel := x.call(ctx)
	defer cancel()
	if err := x.rdb.Publish(cctx, x.kChannel(), "b"+string(b)).Err(); err != nil {
		return unavailable("broadcast", err)
	}
	return nil
}

// Subscribe implements waterline.Fleet over Redis pub/sub. go-redis
// resubscribes after a lost connection; messages published meanwhile are
// lost (pub/sub keeps nothing), which costs a poll interval of latency for
// a wake-up, a read receipt for a broadcast, and leaves a superseded socket
// open until its idle or pending reaper closes it (or its client goes
// away).
func (x *Index) Subscribe(ctx context.Context, h waterline.FleetHandlers) (<-chan struct{}, error) {
	ps := x.rdb.Subscribe(ctx, x.kChannel())
	cctx, cancel := x.call(ctx)
	_, err := ps.Receive(cctx) // the subscription confirmation
	cancel()
	if err != nil {
		ps.Close()
		return nil, unavailable("subscribe", err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer ps.Close()
		ch := ps.Channel(goredis.WithChannelSize(1024))
		for {
			select {
			case <-ctx.Done():
				return
			case m, ok := <-ch:
				if !ok {
					return
				}
				x.dispatch(m.Payload, h)
			}
		}
	}()
	return done, nil
}

func (x *Index) dispatch(payload string, h waterline.FleetHandlers) {
	if payload == "" {
		return
	}
	switch payload[0] {
	case 'w':
		if payload[1:] != x.cfg.Owner && h.OnWake != nil {
			h.OnWake()
		}
	case 'c':
		var m claimMsg
		if err := json.Unmarshal([]byte(payload[1:]), &m); err != nil || m.O == x.cfg.Owner {
			return
		}
		e, err := strconv.ParseInt(m.E, 10, 64)
		if err != nil || h.OnClaim == nil {
			return
		}
		h.OnClaim(waterline.Claim{User: m.U, Device: m.D, ConnID: m.C, Owner: m.O, Epoch: e})
	case 'b':
		var m broadcastMsg
		if err := json.Unmarshal([]byte(payload[1:]), &m); err != nil || m.O == x.cfg.Owner || h.OnBroadcast == nil {
			return
		}
		h.OnBroadcast(m.U, []byte(m.F))
	}
}

func (x *Index) aliveKeys() []string {
	return []string{x.cfg.Prefix + "alive:" + x.cfg.Owner, x.cfg.Prefix + "reaped:" + x.cfg.Owner, x.kOwners()}
}

// Acquire implements waterline.Fleet.
func (x *Index) Acquire(ctx context.Context, ttl time.Duration) (bool, error) {
	if ttl < time.Millisecond {
		return false, fmt.Errorf("redis: acquire: ttl %v: want at least 1ms", ttl)
	}
	cctx, cancel := x.call(ctx)
	defer cancel()
	n, err := acquireScript.Run(cctx, x.rdb, x.aliveKeys(), x.cfg.Owner, ttl.Milliseconds(), x.token).Int64()
	if err != nil {
		return false, unavailable("acquire", err)
	}
	return n == 1, nil
}

// Release implements waterline.Fleet.
func (x *Index) Release(ctx context.Context) error {
	cctx, cancel := x.call(ctx)
	defer cancel()
	if err := releaseScript.Run(cctx, x.rdb, x.aliveKeys()[:1], x.token).Err(); err != nil {
		return unavailable("release", err)
	}
	return nil
}

// Heartbeat implements waterline.Fleet.
func (x *Index) Heartbeat(ctx context.Context, ttl time.Duration) (bool, error) {
	if ttl < time.Millisecond {
		return false, fmt.Errorf("redis: heartbeat: ttl %v: want at least 1ms", ttl)
	}
	cctx, cancel := x.call(ctx)
	defer cancel()
	n, err := heartbeatScript.Run(cctx, x.rdb, x.aliveKeys(), x.cfg.Owner, ttl.Milliseconds(), x.token).Int64()
	if err != nil {
		return false, unavailable("heartbeat", err)
	}
	if n < 0 {
		return false, fmt.Errorf("redis: heartbeat of owner %q: %w", x.cfg.Owner, waterline.ErrOwnerTaken)
	}
	return n == 1, nil
}

// ReapDead implements waterline.Fleet in one script over every listed owner.
func (x *Index) ReapDead(ctx context.Context) ([]string, error) {
	cctx, cancel := x.call(ctx)
	defer cancel()
	res, err := reapScript.Run(cctx, x.rdb, []string{x.kOwners()},
		x.cfg.Prefix, tombstoneTTL.Milliseconds()).StringSlice()
	if err != nil {
		return nil, unavailable("reap dead owners", err)
	}
	return res, nil
}

// Laggards implements waterline.Fleet in one script.
func (x *Index) Laggards(ctx context.Context, identity string) ([]string, error) {
	cctx, cancel := x.call(ctx)
	defer cancel()
	res, err := laggardsScript.Run(cctx, x.rdb, []string{x.kOwners()}, x.cfg.Prefix, identity).StringSlice()
	if err != nil {
		return nil, unavailable("laggards", err)
	}
	return res, nil
}

// identitySeenTTL is how long an identity's first sighting is remembered
// after the last IdentityAge call.
const identitySeenTTL = 7 * 24 * time.Hour

// IdentitySeenKey is where IdentityAge records the first sighting of a
// server identity: the one key the index writes outside Config.Prefix,
// because the identity belongs to the server, not to a deployment (every
// deployment on the server shares it, and a new prefix on a long-running
// server does not start the clock again).
func IdentitySeenKey(identity string) string { return "tetra-identity-seen:" + identity }

// IdentityAge implements waterline.Fleet.
func (x *Index) IdentityAge(ctx context.Context, identity string) (time.Duration, error) {
	cctx, cancel := x.call(ctx)
	defer cancel()
	ms, err := identityAgeScript.Run(cctx, x.rdb, []string{IdentitySeenKey(identity)}, identitySeenTTL.Milliseconds()).Int64()
	if err != nil {
		return 0, unavailable("identity age", err)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// BindOutbox implements waterline.Fleet: one script records outboxID under
// the prefix ("outbox") unless another outbox is recorded and another
// owner is alive.
func (x *Index) BindOutbox(ctx context.Context, outboxID string) error {
	cctx, cancel := x.call(ctx)
	defer cancel()
	res, err := bindScript.Run(cctx, x.rdb, []string{x.cfg.Prefix + "outbox", x.kOwners()},
		x.cfg.Prefix, outboxID, x.cfg.Owner).StringSlice()
	if err != nil {
		return unavailable("bind outbox", err)
	}
	if len(res) == 2 {
		return fmt.Errorf("redis: key prefix %q already indexes outbox %s, and its process %q is alive (this one's is %s): give each deployment its own --index-prefix: %w",
			x.cfg.Prefix, res[0], res[1], outboxID, waterline.ErrPrefixTaken)
	}
	return nil
}
