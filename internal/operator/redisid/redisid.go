// Package redisid reads the identity of the Redis master that holds a
// Messenger's waterline index, so the operator can tell a failover from a
// quiet period.
//
// The identity is redisinfo.Identity, the pair (run_id, master_replid) from
// INFO, read by the same parser as the pods' waterline index: a restart of
// the process changes run_id, the promotion of a replica changes
// master_replid. The address is reported but never compared: behind a stable
// Service name or a floating IP it does not change at all. With Sentinel the
// master is the one that two Sentinels (or the only one configured) agree
// on; Sentinels naming different masters, or a server that reports itself a
// replica, is ErrAmbiguous, and the caller must not act on it.
package redisid

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tetra-messenger/tetra/internal/redisinfo"
)

// Sentinel errors of Probe.
var (
	// ErrUnreachable: no server (or no Sentinel) answered.
	ErrUnreachable = errors.New("redisid: redis unreachable")
	// ErrNoMaster: the server answered but is not a master (a replica with
	// no promoted peer in sight), or the Sentinels know no master.
	ErrNoMaster = errors.New("redisid: no master")
	// ErrSeveralMasters: Sentinels disagree about the master.
	ErrSeveralMasters = errors.New("redisid: several masters")
)

// DiscardClientLogs silences go-redis' own logger, which is global and
// prints every failed dial; a probe's failure reaches the Messenger's status
// and the operator's log instead. Call it once from main (and test mains).
func DiscardClientLogs() { redis.SetLogger(discard{}) }

type discard struct{}

func (discard) Printf(context.Context, string, ...any) {}

// Target says how to reach the master.
type Target struct {
	// URL is redis://[user:pass@]host:port[/db] or rediss://. With
	// Sentinel its host is ignored; its credentials, database and TLS apply
	// to the master.
	URL string
	// SentinelAddrs and MasterName, when set, find the master through
	// Sentinel.
	SentinelAddrs []string
	MasterName    string
}

// Prober reads identities. The zero value uses a 2 s timeout per call.
type Prober struct {
	// Timeout bounds each dial and each command.
	Timeout time.Duration
}

func (p Prober) timeout() time.Duration {
	if p.Timeout <= 0 {
		return 2 * time.Second
	}
	return p.Timeout
}

// Probe returns the identity of the master of t. Errors wrap ErrUnreachable,
// ErrNoMaster or ErrSeveralMasters, or report a malformed URL.
func (p Prober) Probe(ctx context.Context, t Target) (redisinfo.Identity, error) {
	opt, err := redis.ParseURL(t.URL)
	if err != nil {
		return redisinfo.Identity{}, fmt.Errorf("redisid: redis URL: %w", err)
	}
	p.apply(opt)
	if len(t.SentinelAddrs) > 0 {
		addr, err := p.sentinelMaster(ctx, t.SentinelAddrs, t.MasterName)
		if err != nil {
			return redisinfo.Identity{}, err
		}
		opt.Addr = addr
	}
	return p.info(ctx, opt)
}

func (p Prober) apply(opt *redis.Options) {
	opt.DialTimeout, opt.ReadTimeout, opt.WriteTimeout = p.timeout(), p.timeout(), p.timeout()
	opt.MaxRetries = -1
	opt.DialerRetries = 1
	opt.PoolSize = 1
	opt.DisableIdentity = true // no CLIENT SETINFO noise on old servers
}

func (p Prober) info(ctx context.Context, opt *redis.Options) (redisinfo.Identity, error) {
	c := redis.NewClient(opt)
	defer c.Close()
	ctx, cancel := context.WithTimeout(ctx, 2*p.timeout())
	defer cancel()
	text, err := c.Info(ctx, "server", "replication").Result()
	if err != nil {
		return redisinfo.Identity{}, fmt.Errorf("%w: INFO at %s: %v", ErrUnreachable, opt.Addr, err)
	}
	f := redisinfo.Parse(text)
	id := f.Identity()
	id.Addr = opt.Addr
	if role := f.Role(); role != "master" {
		return id, fmt.Errorf("%w: %s reports role %q", ErrNoMaster, opt.Addr, role)
	}
	if id.RunID == "" || id.MasterReplID == "" {
		return id, fmt.Errorf("%w: INFO at %s lacks run_id or master_replid", ErrUnreachable, opt.Addr)
	}
	return id, nil
}

// sentinelMaster asks every Sentinel for the master's address and returns
// the one a quorum (two, or one when only one is configured) agrees on.
func (p Prober) sentinelMaster(ctx context.Context, addrs []string, name string) (string, error) {
	quorum := min(2, len(addrs))
	votes := map[string]int{}
	noMaster := 0
	var errs []error
	for _, a := range addrs {
		sc := redis.NewSentinelClient(&redis.Options{
			Addr: a, DialTimeout: p.timeout(), ReadTimeout: p.timeout(), WriteTimeout: p.timeout(),
			MaxRetries: -1, DialerRetries: 1, PoolSize: 1, DisableIdentity: true,
		})
		cctx, cancel := context.WithTimeout(ctx, 2*p.timeout())
		hp, err := sc.GetMasterAddrByName(cctx, name).Result()
		cancel()
		sc.Close()
		if errors.Is(err, redis.Nil) {
			noMaster++
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("sentinel %s: %v", a, err))
			continue
		}
		if len(hp) != 2 {
			errs = append(errs, fmt.Errorf("sentinel %s: unexpected answer %q", a, hp))
			continue
		}
		votes[net.JoinHostPort(hp[0], hp[1])]++
	}
	switch {
	case len(votes) == 0 && noMaster == 0:
		return "", fmt.Errorf("%w: no sentinel answered for master %q: %v", ErrUnreachable, name, errors.Join(errs...))
	case len(votes) > 1:
		seen := make([]string, 0, len(votes))
		for a := range votes {
			seen = append(seen, a)
		}
		sort.Strings(seen)
		return "", fmt.Errorf("%w: sentinels name %s for %q", ErrSeveralMasters, strings.Join(seen, " and "), name)
	}
	for a, n := range votes {
		if n >= quorum {
			return a, nil
		}
		return "", fmt.Errorf("%w: only %d of %d sentinels answered for %q (need %d to agree)", ErrNoMaster, n, len(addrs), name, quorum)
	}
	return "", fmt.Errorf("%w: sentinels know no master %q", ErrNoMaster, name)
}
