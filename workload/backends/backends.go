package backends

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tetra-messenger/tetra/workload/auth"
	"github.com/tetra-messenger/tetra/workload/config"
	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/nudge"
	"github.com/tetra-messenger/tetra/workload/outbox"
	"github.com/tetra-messenger/tetra/workload/outbox/kafka"
	"github.com/tetra-messenger/tetra/workload/store/postgres"
	"github.com/tetra-messenger/tetra/workload/store/sqlite"
	"github.com/tetra-messenger/tetra/workload/waterline"
	"github.com/tetra-messenger/tetra/workload/waterline/memory"
	redisidx "github.com/tetra-messenger/tetra/workload/waterline/redis"
)

// Config names the backends. The zero value is the embedded default in the
// working directory: SQLite in ./tetra.db, the outbox in it, the
// in-process index, a secret persisted beside it (server.DefaultConfig
// sets DataDir to ./data).
type Config struct {
	// DataDir holds the SQLite database and the persisted JWT secret of the
	// embedded default; server.DefaultConfig sets "./data". Open creates it
	// (mode 0700) when missing.
	DataDir string
	// Store selects history and outbox: "" or "sqlite" for SQLite in
	// DataDir, "sqlite:///abs/path.db" for another file,
	// "postgres://user:pass@host:5432/db" for PostgreSQL.
	Store string
	// Outbox selects where the outbox lives: "" keeps it in the store (one
	// partition, written in the history transaction);
	// "kafka://host:port[,host:port]/topic" puts it in a Kafka topic
	// partitioned by recipient, fed from history by a relay (see
	// docs/kafka.md and package outbox/kafka for the query parameters).
	// The store then writes history only.
	Outbox string
	// Index selects the waterline index: "" or "memory" for in process,
	// "redis://host:6379/0" (or rediss://, with a password in the URL) for
	// Redis, "sentinel" with IndexSentinelAddrs and IndexSentinelMaster.
	Index string
	// IndexPrefix prefixes every Redis key; default "tetra:"
	// (redis.DefaultPrefix).
	IndexPrefix string
	// IndexOwner names this process in the Redis index (its clients, holds
	// and primed flag live under it); default the hostname, which is the
	// pod name in Kubernetes. It must be stable across restarts of the
	// same instance, so a restart wipes what the previous run left, and
	// unique among the processes sharing one Redis.
	IndexOwner string
	// IndexSentinelAddrs and IndexSentinelMaster select a Redis master
	// through Sentinel (Index "sentinel").
	IndexSentinelAddrs  []string
	IndexSentinelMaster string
	// IndexSentinelMasterURL, with Index "sentinel", is a redis:// or
	// rediss:// URL whose user, password, database and scheme (rediss:
	// TLS) apply to the master Sentinel names; its host serves only as the
	// TLS server name. Empty: no credentials, database 0, no TLS. The
	// Sentinels themselves are reached without credentials.
	IndexSentinelMasterURL string
	// JWTSecret signs tokens (TETRA_JWT_SECRET); empty uses the secret
	// persisted in DataDir.
	JWTSecret string
	// WrapStore, when set, wraps the history store after it is opened. It
	// exists for fault injection in tests (for example a store that
	// "accepts" without writing, which the load generator's
	// reconciliation must catch); production leaves it nil.
	WrapStore func(history.Store) history.Store
	// Logger defaults to slog.Default(). package server logs to it too.
	Logger *slog.Logger
}

// validate checks what Open refuses before touching anything:
// IndexSentinelMasterURL without Index "sentinel".
func (c Config) validate() error {
	if c.IndexSentinelMasterURL != "" && c.Index != "sentinel" {
		return errors.New("server: --index-sentinel-master-url applies only with --index sentinel")
	}
	return nil
}

// prefix is the Redis key prefix in effect.
func (c Config) prefix() string {
	if c.IndexPrefix == "" {
		return redisidx.DefaultPrefix
	}
	return c.IndexPrefix
}

// Backends is what Open opened. Every field is set (not nil) unless its
// comment says otherwise. Close releases it all.
type Backends struct {
	// Store is the history store, wrapped by Config.WrapStore when set.
	Store history.Store
	// Prober is the unwrapped store's write probe (/readyz while commits
	// fail); nil when the store has none.
	Prober history.WriteProber
	// Sessions reads the PostgreSQL store's counts of sessions the
	// database ended (postgres.DB.SessionStats); nil with SQLite.
	Sessions func() postgres.SessionStats
	// Outbox is the outbox log: the store itself, or the Kafka topic.
	Outbox outbox.Log
	// Feed is the store's history feed, which the Kafka relay follows.
	Feed history.Feed
	// Index is the waterline index.
	Index waterline.Index
	// Presence is the deployment-wide user presence (PROTOCOL.md §7.4):
	// the Redis index's keys, or a map beside the in-process index.
	Presence waterline.UserPresence
	// NudgePresence is the fleet's connected set the offline nudge checks
	// (nudge.Config.Presence): the Redis index's presence keys; nil with
	// the in-process index (the nudge then trusts this process's
	// registry).
	NudgePresence nudge.Presence
	// Signer mints and verifies tokens with Config.JWTSecret or the
	// secret persisted in DataDir.
	Signer *auth.Signer
	// StoreKind ("sqlite", "postgres"), OutboxKind ("sqlite", "postgres",
	// "kafka") and IndexKind ("memory", "redis") label the backends in
	// logs and in the tetra_build_info metric.
	StoreKind, OutboxKind, IndexKind string

	cfg   Config
	log   *slog.Logger
	kafka *kafka.Log // nil unless the outbox is Kafka

	closers  []func() error // resources, closed last-opened first
	releases []func()       // locks, released after every resource, last-taken first
	once     sync.Once
	closeErr error
}

// Open opens the backends cfg names, in the steps doc.go lists, and
// returns them; on any error it has closed what it opened. Errors name the
// backend and its redacted URL; a locked data directory wraps
// ErrAlreadyRunning.
func Open(ctx context.Context, cfg Config) (*Backends, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	b := &Backends{cfg: cfg, log: cfg.Logger}
	if b.log == nil {
		b.log = slog.Default()
	}
	if err := b.open(ctx); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

func (b *Backends) open(ctx context.Context) error {
	kcfg, kafkaMode, err := b.kafkaConfig()
	if err != nil {
		return err
	}
	if err := b.openStore(ctx, !kafkaMode); err != nil {
		return err
	}
	// The secret is read (or created) only now that the embedded default's
	// data directory is locked (issue 24, point 6).
	secret, err := auth.LoadSecret(b.cfg.JWTSecret, b.cfg.DataDir)
	if err != nil {
		return err
	}
	if b.Signer, err = auth.NewSigner(secret); err != nil {
		return err
	}
	if kafkaMode {
		klog, err := kafka.Open(ctx, kcfg)
		if err != nil {
			return fmt.Errorf("server: Kafka outbox unreachable or unusable at %s: %w", kcfg.URL(), err)
		}
		b.closers = append(b.closers, klog.Close)
		b.Outbox, b.kafka, b.OutboxKind = klog, klog, "kafka"
	}
	if err := b.openIndex(ctx); err != nil {
		return err
	}
	fleet := b.fleetIdentity()
	if db, ok := b.Store.(*postgres.DB); ok {
		if err := b.lockInstance(ctx, db, fleet); err != nil {
			return err
		}
		if err := b.lockOwner(ctx, db); err != nil {
			return err
		}
	}
	// Recorded once no running process disagrees (lockInstance), for the
	// next process's refusal to name what differs (issue 24, point 1).
	if err := b.recordFleet(ctx, fleet); err != nil {
		return err
	}
	b.Prober, _ = b.Store.(history.WriteProber)
	if db, ok := b.Store.(*postgres.DB); ok {
		b.Sessions = db.SessionStats
	}
	if b.cfg.WrapStore != nil {
		b.Store = b.cfg.WrapStore(b.Store)
	}
	return nil
}

// kafkaConfig parses Config.Outbox: kafkaMode is false for "".
func (b *Backends) kafkaConfig() (kcfg kafka.Config, kafkaMode bool, err error) {
	if b.cfg.Outbox == "" {
		return kafka.Config{}, false, nil
	}
	if !strings.HasPrefix(b.cfg.Outbox, "kafka://") {
		return kafka.Config{}, false, fmt.Errorf("server: --outbox %q: supported: \"\" (in the store, default) or kafka://host:port[,host:port]/topic", config.RedactURL(b.cfg.Outbox))
	}
	if kcfg, err = kafka.ParseURL(b.cfg.Outbox); err != nil {
		return kafka.Config{}, false, fmt.Errorf("server: --outbox: %w", err)
	}
	kcfg.Logger = b.log
	return kcfg, true, nil
}

// openStore opens Config.Store; withOutbox makes it write the outbox in
// its history transactions (no Kafka outbox).
func (b *Backends) openStore(ctx context.Context, withOutbox bool) error {
	switch store := b.cfg.Store; {
	case store == "" || store == "sqlite" || strings.HasPrefix(store, "sqlite://"):
		path := filepath.Join(b.cfg.DataDir, "tetra.db")
		if strings.HasPrefix(store, "sqlite://") {
			path = strings.TrimPrefix(store, "sqlite://")
		}
		unlock, err := lockDataDir(filepath.Dir(path))
		if err != nil {
			return err
		}
		b.closers = append(b.closers, unlock)
		scfg := sqlite.DefaultConfig(path)
		scfg.Outbox = withOutbox
		db, err := sqlite.Open(ctx, scfg)
		if err != nil {
			return fmt.Errorf("server: open the SQLite store at %s: %w", path, err)
		}
		b.closers = append(b.closers, db.Close)
		b.Store, b.Outbox, b.Feed, b.StoreKind = db, db, db, "sqlite"
	case strings.HasPrefix(store, "postgres://") || strings.HasPrefix(store, "postgresql://"):
		pcfg := postgres.DefaultConfig(store)
		pcfg.Outbox = withOutbox
		db, err := postgres.Open(ctx, pcfg)
		if err != nil {
			return fmt.Errorf("server: PostgreSQL store unreachable or unusable at %s: %w", config.RedactURL(store), err)
		}
		b.closers = append(b.closers, db.Close)
		b.Store, b.Outbox, b.Feed, b.StoreKind = db, db, db, "postgres"
	default:
		return fmt.Errorf("server: --store %q: supported: sqlite (default, in --data), sqlite:///path.db, postgres://user@host:5432/db", config.RedactURL(store))
	}
	b.OutboxKind = b.StoreKind
	return nil
}

// openIndex opens Config.Index and the presence kept beside it.
func (b *Backends) openIndex(ctx context.Context) error {
	switch idx := b.cfg.Index; {
	case idx == "" || idx == "memory":
		b.Index, b.Presence, b.IndexKind = memory.New(), memory.NewPresence(), "memory"
		return nil
	case strings.HasPrefix(idx, "redis://") || strings.HasPrefix(idx, "rediss://") || (idx == "sentinel" && len(b.cfg.IndexSentinelAddrs) > 0):
		owner := b.cfg.IndexOwner
		if owner == "" {
			owner, _ = os.Hostname()
		}
		rcfg := redisidx.Config{URL: idx, Prefix: b.cfg.IndexPrefix, Owner: owner}
		if idx == "sentinel" {
			rcfg.URL, rcfg.SentinelAddrs, rcfg.MasterName = "", b.cfg.IndexSentinelAddrs, b.cfg.IndexSentinelMaster
			if u := b.cfg.IndexSentinelMasterURL; u != "" {
				opt, err := goredis.ParseURL(u)
				if err != nil {
					return fmt.Errorf("server: --index-sentinel-master-url %s: want redis://[user:password@]host[:port][/db] or rediss://...: %w", config.RedactURL(u), err)
				}
				rcfg.Username, rcfg.Password, rcfg.DB, rcfg.TLS = opt.Username, opt.Password, opt.DB, opt.TLSConfig
			}
		}
		ri, err := redisidx.New(ctx, rcfg)
		if err != nil {
			return fmt.Errorf("server: Redis index unreachable or unusable at %s: %w", config.RedactURL(idx), err)
		}
		b.closers = append(b.closers, ri.Close)
		b.Index, b.Presence, b.NudgePresence, b.IndexKind = ri, ri.Users(), redisPresence{ri.Presence()}, "redis"
		return nil
	default:
		return fmt.Errorf("server: --index %q: supported: memory (default), redis://host:6379/0, rediss://..., sentinel (with --index-sentinel-addrs and --index-sentinel-master)", config.RedactURL(idx))
	}
}

// NewRelay builds the relay that feeds the Kafka outbox from the store's
// history (package outbox/kafka), handing every relayed transaction's
// messages to handoff; nil, nil when the outbox is the store's own. The
// caller starts it and stops it before Close.
func (b *Backends) NewRelay(handoff func([]outbox.Committed)) (*kafka.Relay, error) {
	if b.kafka == nil {
		return nil, nil
	}
	return kafka.NewRelay(b.kafka, b.Feed, kafka.RelayConfig{Handoff: handoff, Logger: b.log})
}

// Close closes the index, the Kafka log and the store, in that order
// (last opened first), then releases the locks Open took, last taken
// first, and returns the errors joined. Safe to call more than once: later
// calls return the first call's result.
func (b *Backends) Close() error {
	b.once.Do(func() {
		var errs []error
		for i := len(b.closers) - 1; i >= 0; i-- {
			errs = append(errs, b.closers[i]())
		}
		for i := len(b.releases) - 1; i >= 0; i-- {
			b.releases[i]()
		}
		b.closeErr = errors.Join(errs...)
	})
	return b.closeErr
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
