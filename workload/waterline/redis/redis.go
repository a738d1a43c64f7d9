package redis

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/tetra-messenger/tetra/internal/redisinfo"
	"github.com/tetra-messenger/tetra/workload/config"
	"github.com/tetra-messenger/tetra/workload/waterline"
	"github.com/tetra-messenger/tetra/workload/waterline/memory"
)

// Defaults for Config's zero fields.
const (
	DefaultPrefix  = "tetra:"
	DefaultTimeout = 5 * time.Second
)

// Limits checked by Config validation.
const (
	minTimeout = time.Millisecond
	maxTimeout = 10 * time.Minute
	maxOwner   = 200 // bytes
)

// Config says how to reach Redis and where the index lives in it. Exactly
// one of URL and SentinelAddrs is set.
type Config struct {
	// URL of a single Redis (or a stable address in front of one, such as a
	// Kubernetes Service): redis://[user:password@]host:port[/db] or
	// rediss:// for TLS. go-redis's query parameters (dial_timeout, ...)
	// are accepted.
	URL string

	// SentinelAddrs are Sentinel host:port addresses; with them the index
	// asks Sentinel for the current master of MasterName and follows its
	// failovers (goredis.NewFailoverClient).
	SentinelAddrs []string
	// MasterName is the Sentinel master name; required with SentinelAddrs.
	MasterName string
	// Username and Password authenticate to the master (Sentinel mode only;
	// with URL, put them in the URL).
	Username, Password string
	// SentinelUsername and SentinelPassword authenticate to the Sentinels.
	SentinelUsername, SentinelPassword string
	// DB is the database number (Sentinel mode only; with URL, use the
	// path).
	DB int
	// TLS, when set, is used for the master and replicas (Sentinel mode
	// only; with URL, use rediss://).
	TLS *tls.Config

	// Prefix starts every key the index writes; default DefaultPrefix.
	// Indexes that share a Redis and a Prefix share the safe-delete line.
	Prefix string
	// Owner names this process: its registrations, lease set, holds and
	// primed flag are kept per owner, so each process of a multi-process
	// deployment rebuilds and resets only its own connections. Default: a
	// random ULID. It must not contain a NUL byte and is at most 200 bytes.
	//
	// Prefer a stable name (the pod name): a restart under the same name
	// wipes its predecessor's state at once. The state of an owner that
	// goes away for good is reaped by the other processes once its
	// heartbeat lapses (waterline.Fleet; package delivery heartbeats), or,
	// for an owner that never heartbeat, kept until the outbox age
	// backstop deletes its rows (see Reset).
	Owner string
	// Timeout bounds every round trip to Redis (each chunk of a large
	// flight of pins has its own); default DefaultTimeout, at least 1ms,
	// at most 10m. The caller's context still applies, except to a flight
	// of pins, which other calls wait for too.
	Timeout time.Duration
}

func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = DefaultPrefix
	}
	if c.Owner == "" {
		c.Owner = ulid.Make().String()
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	return c
}

// validate checks c (with defaults applied) and names the bad field.
func (c Config) validate() error {
	switch {
	case c.URL == "" && len(c.SentinelAddrs) == 0:
		return errors.New("redis: config: URL or SentinelAddrs is required")
	case c.URL != "" && len(c.SentinelAddrs) > 0:
		return errors.New("redis: config: URL and SentinelAddrs are exclusive; set one")
	}
	if c.URL != "" {
		if _, err := goredis.ParseURL(c.URL); err != nil {
			return fmt.Errorf("redis: config: URL %s: %w", config.RedactURL(c.URL), err)
		}
		if c.MasterName != "" || c.Username != "" || c.Password != "" || c.SentinelUsername != "" ||
			c.SentinelPassword != "" || c.DB != 0 || c.TLS != nil {
			return errors.New("redis: config: MasterName, Username, Password, SentinelUsername, SentinelPassword, DB and TLS apply to Sentinel mode only; with URL put credentials, database and TLS (rediss://) in the URL")
		}
	} else {
		if c.MasterName == "" {
			return errors.New("redis: config: MasterName is required with SentinelAddrs")
		}
		for i, a := range c.SentinelAddrs {
			if a == "" || !strings.Contains(a, ":") {
				return fmt.Errorf("redis: config: SentinelAddrs[%d] %q must be host:port", i, a)
			}
		}
		if c.DB < 0 {
			return fmt.Errorf("redis: config: DB must be >= 0, got %d", c.DB)
		}
	}
	if strings.IndexByte(c.Owner, 0) >= 0 || len(c.Owner) > maxOwner {
		return fmt.Errorf("redis: config: Owner must be at most %d bytes without NUL, got %q", maxOwner, c.Owner)
	}
	if c.Timeout < minTimeout || c.Timeout > maxTimeout {
		return fmt.Errorf("redis: config: Timeout must be between %v and %v, got %v", minTimeout, maxTimeout, c.Timeout)
	}
	return nil
}

// where names the server for errors, without credentials.
func (c Config) where() string {
	if c.URL != "" {
		return config.RedactURL(c.URL)
	}
	return fmt.Sprintf("master %q via sentinels %s", c.MasterName, strings.Join(c.SentinelAddrs, ","))
}

// Index is a waterline.Index shared through Redis, its clients' pending
// entries kept in the process (pending.go). It is safe for concurrent use;
// every method is at most one round trip (a flight of pins: one per 1,000
// clients) and every write to shared keys is one Lua script, atomic on the
// server.
type Index struct {
	rdb     goredis.UniversalClient
	cfg     Config
	timeout time.Duration

	// Keys that do not depend on a client or a partition.
	kClients, kLease, kPrimed, kHoldParts string

	// token tells this Index value's liveness record from another
	// process's with the same owner name.
	token string

	// local holds this Index value's clients' pending entries (pending.go).
	local *memory.Index
	// pins runs the flights that write the pins (pending.go); pst is what
	// they know of Redis; flights counts their script calls.
	pins    coalescer
	pst     pinState
	flights atomic.Int64
	closed  atomic.Bool
	// seq numbers the pins scripts, from the clock at New on, so that
	// Redis refuses a script older than the last it ran (kPinSeq).
	seq     atomic.Uint64
	kPinSeq string

	closeOnce sync.Once
	closeErr  error
}

var (
	_ waterline.Index      = (*Index)(nil)
	_ waterline.ManySender = (*Index)(nil)
)

// The index fails fast when Redis is gone: a send it cannot record is
// still delivered (package delivery), so every millisecond the client
// spends retrying holds a live push. go-redis' defaults (5 dial attempts
// 100 ms apart inside each of 4 command attempts, with backoff) held the
// pushes sent just after a Redis was killed for about 1.7-3.5 s
// (TestE2ERedisOutageDegradesLiveDeliveryOnly). One dial per attempt and
// one retry, which replaces a pooled connection that a Redis restart broke,
// are enough: GC and the readiness probe try again on their own cadence.
const (
	dialAttempts   = 1
	commandRetries = 1
)

// New connects to Redis, checks that it answers and that its eviction
// policy cannot drop the index's keys, and returns an index. An unreachable
// server is an error naming its address (without password) and wrapping
// waterline.ErrUnavailable. The index starts unprimed only if this Owner
// was never primed on that server (or was Reset).
func New(ctx context.Context, cfg Config) (*Index, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	var rdb goredis.UniversalClient
	if cfg.URL != "" {
		opt, err := goredis.ParseURL(cfg.URL)
		if err != nil {
			return nil, fmt.Errorf("redis: config: URL %s: %w", config.RedactURL(cfg.URL), err)
		}
		opt.ContextTimeoutEnabled = true
		opt.DialerRetries = dialAttempts
		if opt.MaxRetries == 0 { // not set in the URL (max_retries)
			opt.MaxRetries = commandRetries
		}
		rdb = goredis.NewClient(opt)
	} else {
		rdb = goredis.NewFailoverClient(&goredis.FailoverOptions{
			MasterName:            cfg.MasterName,
			SentinelAddrs:         cfg.SentinelAddrs,
			SentinelUsername:      cfg.SentinelUsername,
			SentinelPassword:      cfg.SentinelPassword,
			Username:              cfg.Username,
			Password:              cfg.Password,
			DB:                    cfg.DB,
			TLSConfig:             cfg.TLS,
			ContextTimeoutEnabled: true,
			DialerRetries:         dialAttempts,
			MaxRetries:            commandRetries,
		})
	}
	x := &Index{
		rdb:        rdb,
		cfg:        cfg,
		timeout:    cfg.Timeout,
		kClients:   cfg.Prefix + "clients:" + cfg.Owner,
		kLease:     cfg.Prefix + "lease:" + cfg.Owner,
		kPrimed:    cfg.Prefix + "primed:" + cfg.Owner,
		kHoldParts: cfg.Prefix + "holdparts",
		token:      ulid.Make().String(),
		local:      memory.New(),
		pst:        pinState{written: map[string][]memory.Pin{}, retry: map[string]struct{}{}, unsure: map[string]struct{}{}},
		kPinSeq:    cfg.Prefix + "pinseq:" + cfg.Owner,
	}
	x.seq.Store(uint64(time.Now().UnixMicro()))
	cctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	var memory, server *goredis.StringCmd
	_, err := rdb.Pipelined(cctx, func(p goredis.Pipeliner) error {
		memory = p.Info(cctx, "memory")
		server = p.Info(cctx, "server")
		return nil
	})
	if err != nil {
		rdb.Close()
		return nil, fmt.Errorf("redis: cannot reach %s: %w: %w", cfg.where(), waterline.ErrUnavailable, err)
	}
	if err := errors.Join(checkEviction(memory.Val()), checkVersion(server.Val())); err != nil {
		rdb.Close()
		return nil, fmt.Errorf("redis: %s: %w", cfg.where(), err)
	}
	return x, nil
}

// MinVersion is the oldest Redis the index accepts. Its scripts once
// lowered pins with ZADD ... LT (Redis 6.2); now the newest command it
// needs is SET ... KEEPTTL (6.0, TakeOver), and 6.2 stays the floor so
// that no server refused before is accepted without having been tested.
const MinVersion = "6.2"

// checkVersion refuses a server older than MinVersion (INFO server's
// redis_version; Redis-compatible servers report the Redis version they
// match there).
func checkVersion(info string) error {
	v := redisinfo.Parse(info)["redis_version"]
	major, rest, _ := strings.Cut(v, ".")
	minor, _, _ := strings.Cut(rest, ".")
	ma, err1 := strconv.Atoi(major)
	mi, err2 := strconv.Atoi(minor)
	if err1 != nil || err2 != nil {
		return fmt.Errorf("redis_version %q is not a version; the index needs Redis %s or later", v, MinVersion)
	}
	if ma < 6 || ma == 6 && mi < 2 {
		return fmt.Errorf("redis_version %s is older than %s, the oldest the index accepts; upgrade Redis", v, MinVersion)
	}
	return nil
}

// checkEviction refuses a server that may evict keys without a TTL: an
// evicted pin would lower the safe-delete line and let GC delete rows a
// client has not acknowledged. The index sets TTLs only on its liveness and
// claim keys (see doc.go), so noeviction and the volatile-* policies are
// safe for the pins.
func checkEviction(info string) error {
	f := redisinfo.Parse(info)
	policy := f["maxmemory_policy"]
	if maxmem, _ := strconv.ParseInt(f["maxmemory"], 10, 64); maxmem > 0 && strings.HasPrefix(policy, "allkeys-") {
		return fmt.Errorf("maxmemory-policy %s may evict the index's keys and make GC over-delete; use noeviction or a volatile-* policy (or a dedicated Redis)", policy)
	}
	return nil
}

// Deployment names the Redis deployment this index uses, stably across
// failovers and restarts and without credentials: "host:port db N" for a
// URL (with " tls" for rediss://), "sentinel master NAME db N" with
// Sentinel (the Sentinel addresses are left out: a fleet may list them in
// any order, and the master they name changes on failover). Two processes
// that print the same Deployment and use the same Config.Prefix share one
// index; the server records it as part of the fleet's identity (issue 24,
// point 1). Names are compared as written: "localhost:6379" and
// "127.0.0.1:6379" differ.
func (x *Index) Deployment() string {
	if x.cfg.URL != "" {
		opt, err := goredis.ParseURL(x.cfg.URL) // validated in New
		if err != nil {
			return config.RedactURL(x.cfg.URL)
		}
		d := fmt.Sprintf("%s db %d", opt.Addr, opt.DB)
		if opt.TLSConfig != nil {
			d += " tls"
		}
		return d
	}
	return fmt.Sprintf("sentinel master %s db %d", x.cfg.MasterName, x.cfg.DB)
}

// Owner returns the owner name this index writes under.
func (x *Index) Owner() string { return x.cfg.Owner }

// Close closes the connections. Idempotent; the index is unusable after.
func (x *Index) Close() error {
	x.closeOnce.Do(func() {
		x.closed.Store(true)
		x.closeErr = x.rdb.Close()
	})
	return x.closeErr
}

// call returns a context bounded by the per-call timeout.
func (x *Index) call(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, x.timeout)
}

// unavailable wraps a Redis failure so that errors.Is finds both
// waterline.ErrUnavailable and the cause.
func unavailable(op string, err error) error {
	return fmt.Errorf("redis: %s: %w: %w", op, waterline.ErrUnavailable, err)
}

func unknown(op, clientID string) error {
	return fmt.Errorf("redis: %s %q: %w", op, clientID, waterline.ErrUnknownClient)
}

// Key builders; doc.go has the layout.
func (x *Index) kParts(cid string) string   { return x.cfg.Prefix + "parts:" + cid }
func (x *Index) kPins(part int32) string    { return x.cfg.Prefix + "pins:" + itoa32(part) }
func (x *Index) kHolds(part int32) string   { return x.cfg.Prefix + "holds:" + itoa32(part) }
func (x *Index) kHoldExp(part int32) string { return x.cfg.Prefix + "holdexp:" + itoa32(part) }
func (x *Index) kOwners() string            { return x.cfg.Prefix + "owners" }

func itoa32(p int32) string { return strconv.FormatInt(int64(p), 10) }
