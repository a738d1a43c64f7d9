package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tetra-messenger/tetra/workload/auth"
	"github.com/tetra-messenger/tetra/workload/config"
	"github.com/tetra-messenger/tetra/workload/delivery"
	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/ingest"
	"github.com/tetra-messenger/tetra/workload/metrics"
	"github.com/tetra-messenger/tetra/workload/nudge"
	"github.com/tetra-messenger/tetra/workload/outbox"
	"github.com/tetra-messenger/tetra/workload/outbox/kafka"
	"github.com/tetra-messenger/tetra/workload/protocol"
	"github.com/tetra-messenger/tetra/workload/store/postgres"
	"github.com/tetra-messenger/tetra/workload/store/sqlite"
	"github.com/tetra-messenger/tetra/workload/waterline"
	"github.com/tetra-messenger/tetra/workload/waterline/memory"
	redisidx "github.com/tetra-messenger/tetra/workload/waterline/redis"
)

// Config configures a Server. Start from DefaultConfig.
type Config struct {
	// Addr is the listen address; default ":8080". ":0" picks a free port.
	Addr string
	// MetricsAddr, when set, serves GET /metrics on a listener of its own
	// at this address (for example ":9090") instead of on Addr, where
	// /metrics then answers 404: a NetworkPolicy (layer 4) can then let a
	// scraper reach the metrics without reaching the API, and clients
	// reach the API without reading the metrics. Empty (the default):
	// /metrics is served on Addr.
	MetricsAddr string
	// DataDir holds the SQLite database and the persisted JWT secret of the
	// embedded default; default "./data".
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
	// IndexPrefix prefixes every Redis key; default "tetra:".
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
	// Tuning is the initial live tuning; see SetTuning.
	Tuning config.Tuning
	// TuningDir, when set, is a directory of tuning files (one per key of
	// config.Keys, as a mounted ConfigMap): applied over Tuning at start
	// and reloaded live whenever it changes.
	TuningDir string
	// Nudge configures the offline nudge's webhook (docs/nudge.md); an
	// empty Nudge.URL turns it off (the default).
	Nudge nudge.Config
	// Ingest and Delivery size the pipeline and the engine.
	Ingest   ingest.Config
	Delivery delivery.Config
	// MaxConns caps WebSocket connections in total (default 20000) and
	// MaxConnsPerUser per user (default 32). Over the cap the upgrade gets
	// HTTP 429.
	MaxConns        int
	MaxConnsPerUser int
	// AllowedOrigins are extra host patterns (path.Match syntax, e.g.
	// "*.example.com") whose browser pages may open sockets. By default
	// only same-origin pages and non-browser clients (no Origin header)
	// may.
	AllowedOrigins []string
	// OutboundQueue is each connection's queue of frames waiting for the
	// socket; default 256, at least 128. Message frames fill it up to 64
	// short of capacity (beyond, they are left to re-delivery after the
	// lease); the last 64 slots are for answers and control frames, and a
	// client whose answers would not fit is first slowed down (its frames
	// are not read) and then closed with 1008. Each slot costs 24 bytes per
	// connection, resident: at 5,000 connections 1024 slots cost ~85 MiB
	// more RSS than 256 (measured, docs/benchmarks.md).
	OutboundQueue int
	// WriteTimeout bounds one socket write; default 10 s.
	WriteTimeout time.Duration
	// StoreTimeout is the longest a send waits for its commit, from the
	// moment it is queued; a send not committed by then is answered
	// overloaded (--store-timeout; it sets Ingest.StoreTimeout, which it
	// overrides). Default ingest.DefaultStoreTimeout (5 s).
	StoreTimeout time.Duration
	// ReadyTimeout bounds GET /readyz: the checks run at once, and one
	// that has not answered by then counts as failed, so the probe gets
	// its answer (503) within ReadyTimeout even when a store hangs.
	// Default 800 ms, under the 1 s a readiness probe usually allows.
	ReadyTimeout time.Duration
	// ShutdownGrace bounds Shutdown's drain; default 10 s.
	ShutdownGrace time.Duration
	// PresenceGrace is how long a user stays online after its last
	// connection closed (PROTOCOL.md §7.4); zero means PresenceGrace (10
	// s), the contract's value. Tests shorten it.
	PresenceGrace time.Duration
	// Logger defaults to slog.Default().
	Logger *slog.Logger
	// WrapStore, when set, wraps the history store after it is opened. It
	// exists for fault injection in tests (for example a store that
	// "accepts" without writing, which the load generator's
	// reconciliation must catch); production leaves it nil.
	WrapStore func(history.Store) history.Store
	// Demo turns on the demo endpoints (webui.go): POST /demo/token mints
	// tokens for DemoUsers to anyone. Allowed only on the embedded default
	// without JWTSecret (CheckDemo); off otherwise.
	Demo bool
	// DemoTokenTTL is the lifetime of a demo token; default DemoTokenTTL
	// (24 h). The browser tests shorten it to watch the page refresh.
	DemoTokenTTL time.Duration
}

// DefaultConfig returns the embedded default configuration.
func DefaultConfig() Config {
	return Config{
		Addr:            ":8080",
		DataDir:         "./data",
		Tuning:          config.Default(),
		MaxConns:        20000,
		MaxConnsPerUser: 32,
		OutboundQueue:   256,
		WriteTimeout:    10 * time.Second,
		ShutdownGrace:   10 * time.Second,
	}
}

func (c *Config) validate() error {
	if err := c.CheckDemo(); err != nil {
		return err
	}
	if c.MaxConns <= 0 {
		return fmt.Errorf("server: MaxConns must be > 0, got %d", c.MaxConns)
	}
	if c.MaxConnsPerUser <= 0 {
		return fmt.Errorf("server: MaxConnsPerUser must be > 0, got %d", c.MaxConnsPerUser)
	}
	if c.OutboundQueue < 2*answerReserve {
		return fmt.Errorf("server: OutboundQueue must be at least %d, got %d", 2*answerReserve, c.OutboundQueue)
	}
	if c.WriteTimeout <= 0 {
		c.WriteTimeout = 10 * time.Second
	}
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = 10 * time.Second
	}
	if c.StoreTimeout < 0 || c.ReadyTimeout < 0 {
		return fmt.Errorf("server: StoreTimeout (%v) and ReadyTimeout (%v) must be >= 0 (0: the default)", c.StoreTimeout, c.ReadyTimeout)
	}
	if c.StoreTimeout > 0 {
		c.Ingest.StoreTimeout = c.StoreTimeout
	}
	if c.ReadyTimeout == 0 {
		c.ReadyTimeout = DefaultReadyTimeout
	}
	if err := c.Tuning.Validate(); err != nil {
		return fmt.Errorf("server: tuning: %w", err)
	}
	if c.IndexSentinelMasterURL != "" && c.Index != "sentinel" {
		return errors.New("server: --index-sentinel-master-url applies only with --index sentinel")
	}
	return nil
}

// DefaultReadyTimeout is Config.ReadyTimeout's default.
const DefaultReadyTimeout = 800 * time.Millisecond

// Server is the messenger workload.
type Server struct {
	cfg    Config
	log    *slog.Logger
	tuning atomic.Pointer[config.Tuning]
	signer *auth.Signer

	store      history.Store
	outbox     outbox.Log
	index      waterline.Index
	closer     func() error
	storeKind  string
	indexKind  string
	outboxKind string
	// Kafka mode: the topic log, the history feed the relay follows, and
	// the relay (built in New, started in Start, stopped in stop).
	kafkaLog *kafka.Log
	feed     history.Feed
	relay    *kafka.Relay

	pipeline *ingest.Pipeline
	engine   *delivery.Engine
	nudger   *nudge.Nudger // nil without Config.Nudge.URL
	chats    *chatCache
	typing   typingGate       // PROTOCOL.md §7.4 (typing.go)
	presence *presenceTracker // PROTOCOL.md §7.4 (presence.go)
	metrics  *metrics.Metrics
	seenMu   sync.Mutex
	seen     map[string]struct{} // (user, device) pairs seen connected, for the reconnect count

	httpSrv    *http.Server
	ln         net.Listener
	metricsSrv *http.Server // with Config.MetricsAddr
	metricsLn  net.Listener // with Config.MetricsAddr
	draining   atomic.Bool
	// unready makes /readyz fail while everything else is still served
	// (Drain); draining also refuses new sockets (Shutdown).
	unready atomic.Bool

	connMu   sync.Mutex
	conns    int
	perUser  map[string]int
	fanout   fanoutBudgets // each user's outbox rows per second (fanout.go)
	sessions sync.WaitGroup

	bg       sync.WaitGroup
	bgCancel context.CancelFunc
	series   *seriesRing // the admin page's samples, filled by sampleLoop
	stopOnce sync.Once
	stopErr  error

	tuningReloads atomic.Int64
	tuningUnknown string // the unknown tuning file names last warned about (tuning.go)

	commits commitHealth // recent group-commit outcomes, for /readyz
	// prober is the unwrapped store's write probe (nil if it has none),
	// used by /readyz while commits fail (readiness.go).
	prober history.WriteProber
	health liveHealth // the index's last check (degraded.go)
}

// New opens the stores named by cfg, primes the waterline index and builds
// the server. It does not listen; call Start.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Server{cfg: cfg, log: log, perUser: map[string]int{}}
	t := cfg.Tuning
	s.tuning.Store(&t)
	if cfg.TuningDir != "" {
		if err := s.loadTuningDir(); err != nil {
			return nil, fmt.Errorf("server: tuning directory %s: %w", cfg.TuningDir, err)
		}
	}
	if err := s.openStores(ctx); err != nil {
		return nil, err
	}
	s.chats = newChatCache(s.store, 5*time.Second)
	s.presence = newPresenceTracker(s)
	s.seen = map[string]struct{}{}
	s.metrics = metrics.New(func(ctx context.Context) (metrics.Snapshot, error) {
		st, err := s.Stats(ctx)
		snap := metrics.Snapshot{Delivery: st.Delivery, Outbox: st.Outbox, InboundQueued: st.InboundQueued, TuningReloads: s.tuningReloads.Load()}
		if s.relay != nil {
			rs := s.relay.Stats()
			snap.Relay = &metrics.RelaySnapshot{Active: rs.Active, Cursor: rs.Cursor, Transactions: rs.Transactions,
				Records: rs.Records, Failures: rs.Failures, Fenced: rs.Fenced}
		}
		snap.Nudge = s.nudgeSnapshot()
		return snap, err
	})
	s.metrics.SetBuildInfo(s.storeKind, s.outboxKind, s.indexKind)
	dcfg := cfg.Delivery
	dcfg.OnDelivered = s.metrics.Delivered
	dcfg.OnExcluded = s.chats.forget
	var err error
	if s.nudger, err = s.newNudger(); err != nil {
		s.closer()
		return nil, err
	}
	if s.nudger != nil {
		dcfg.Nudges = s.nudger
	}
	s.engine, err = delivery.New(s.outbox, s.index, s.Tuning, dcfg, log)
	if err != nil {
		s.closer()
		return nil, err
	}
	handoff := func(rs []history.Result) { s.engine.Handoff(outbox.FromResults(rs)) }
	if s.kafkaLog != nil {
		// The relay hands committed records to the fast path; a commit
		// only wakes it (its results name no outbox rows).
		s.relay, err = kafka.NewRelay(s.kafkaLog, s.feed, kafka.RelayConfig{Handoff: s.engine.Handoff, Logger: log})
		if err != nil {
			s.closer()
			return nil, err
		}
		handoff = func([]history.Result) { s.relay.Wake() }
	}
	s.pipeline, err = ingest.New(s.store, cfg.Ingest, handoff, s.broadcastReads, ingest.Hooks{
		Committed: func(n int, took time.Duration) {
			s.metrics.Committed(n, took)
			s.commits.succeeded()
		},
		Failed: func(_ int, err error) {
			s.metrics.CommitFailed()
			s.commits.failed(err)
		},
		ReadFailed: func(err error) {
			reason := metrics.ReasonUnavailable
			if errors.Is(err, history.ErrInvalid) {
				reason = metrics.ReasonInvalid
			}
			s.metrics.ReadReceiptFailed(reason)
		},
	}, log)
	if err != nil {
		s.closer()
		return nil, err
	}
	return s, nil
}

func (s *Server) openStores(ctx context.Context) error {
	store := s.cfg.Store
	kafkaMode := s.cfg.Outbox != ""
	if kafkaMode && !strings.HasPrefix(s.cfg.Outbox, "kafka://") {
		return fmt.Errorf("server: --outbox %q: supported: \"\" (in the store, default) or kafka://host:port[,host:port]/topic", config.RedactURL(s.cfg.Outbox))
	}
	var kcfg kafka.Config
	if kafkaMode {
		var err error
		if kcfg, err = kafka.ParseURL(s.cfg.Outbox); err != nil {
			return fmt.Errorf("server: --outbox: %w", err)
		}
		kcfg.Logger = s.log
	}
	switch {
	case store == "" || store == "sqlite" || strings.HasPrefix(store, "sqlite://"):
		path := filepath.Join(s.cfg.DataDir, "tetra.db")
		if strings.HasPrefix(store, "sqlite://") {
			path = strings.TrimPrefix(store, "sqlite://")
		}
		unlock, err := lockDataDir(filepath.Dir(path))
		if err != nil {
			return err
		}
		scfg := sqlite.DefaultConfig(path)
		scfg.Outbox = !kafkaMode
		db, err := sqlite.Open(ctx, scfg)
		if err != nil {
			unlock()
			return fmt.Errorf("server: open the SQLite store at %s: %w", path, err)
		}
		s.store, s.outbox, s.storeKind, s.feed = db, db, "sqlite", db
		s.closer = func() error { return errors.Join(db.Close(), unlock()) }
	case strings.HasPrefix(store, "postgres://") || strings.HasPrefix(store, "postgresql://"):
		pcfg := postgres.DefaultConfig(store)
		pcfg.Outbox = !kafkaMode
		db, err := postgres.Open(ctx, pcfg)
		if err != nil {
			return fmt.Errorf("server: PostgreSQL store unreachable or unusable at %s: %w", config.RedactURL(store), err)
		}
		s.store, s.outbox, s.closer, s.storeKind, s.feed = db, db, db.Close, "postgres", db
	default:
		return fmt.Errorf("server: --store %q: supported: sqlite (default, in --data), sqlite:///path.db, postgres://user@host:5432/db", config.RedactURL(store))
	}
	s.outboxKind = s.storeKind
	// The secret is read (or created) only now that the embedded default's
	// data directory is locked (issue 24, point 6).
	secret, err := auth.LoadSecret(s.cfg.JWTSecret, s.cfg.DataDir)
	if err == nil {
		s.signer, err = auth.NewSigner(secret)
	}
	if err != nil {
		s.closer()
		return err
	}
	if kafkaMode {
		klog, err := kafka.Open(ctx, kcfg)
		if err != nil {
			s.closer()
			return fmt.Errorf("server: Kafka outbox unreachable or unusable at %s: %w", kcfg.URL(), err)
		}
		closeDB := s.closer
		s.outbox, s.kafkaLog, s.outboxKind = klog, klog, "kafka"
		s.closer = func() error { return errors.Join(klog.Close(), closeDB()) }
	}
	closeStore := s.closer
	switch idx := s.cfg.Index; {
	case idx == "" || idx == "memory":
		s.index, s.indexKind = memory.New(), "memory"
	case strings.HasPrefix(idx, "redis://") || strings.HasPrefix(idx, "rediss://") || (idx == "sentinel" && len(s.cfg.IndexSentinelAddrs) > 0):
		owner := s.cfg.IndexOwner
		if owner == "" {
			owner, _ = os.Hostname()
		}
		rcfg := redisidx.Config{URL: idx, Prefix: s.cfg.IndexPrefix, Owner: owner}
		if idx == "sentinel" {
			rcfg.URL, rcfg.SentinelAddrs, rcfg.MasterName = "", s.cfg.IndexSentinelAddrs, s.cfg.IndexSentinelMaster
			if u := s.cfg.IndexSentinelMasterURL; u != "" {
				opt, err := goredis.ParseURL(u)
				if err != nil {
					closeStore()
					return fmt.Errorf("server: --index-sentinel-master-url %s: want redis://[user:password@]host[:port][/db] or rediss://...: %w", config.RedactURL(u), err)
				}
				rcfg.Username, rcfg.Password, rcfg.DB, rcfg.TLS = opt.Username, opt.Password, opt.DB, opt.TLSConfig
			}
		}
		ri, err := redisidx.New(ctx, rcfg)
		if err != nil {
			closeStore()
			return fmt.Errorf("server: Redis index unreachable or unusable at %s: %w", config.RedactURL(idx), err)
		}
		s.index, s.indexKind = ri, "redis"
		s.closer = func() error { return errors.Join(ri.Close(), closeStore()) }
	default:
		closeStore()
		return fmt.Errorf("server: --index %q: supported: memory (default), redis://host:6379/0, rediss://..., sentinel (with --index-sentinel-addrs and --index-sentinel-master)", config.RedactURL(idx))
	}
	fleet := s.fleetIdentity()
	if db, ok := s.store.(*postgres.DB); ok {
		if err := s.lockInstance(ctx, db, fleet); err != nil {
			s.closer()
			return err
		}
		if err := s.lockOwner(ctx, db); err != nil {
			s.closer()
			return err
		}
	}
	// Recorded once no running process disagrees (lockInstance), for the
	// next process's refusal to name what differs (issue 24, point 1).
	if err := s.recordFleet(ctx, fleet); err != nil {
		s.closer()
		return err
	}
	s.prober, _ = s.store.(history.WriteProber)
	if s.cfg.WrapStore != nil {
		s.store = s.cfg.WrapStore(s.store)
	}
	return nil
}

// lockInstance refuses to run an in-process index next to another process
// on the same PostgreSQL database (its GC would delete rows the other's
// clients have not acknowledged, and theirs its own), and refuses a shared
// index next to an in-process one; processes on a shared (Redis) index may
// be many, as long as they are one fleet: the same Redis deployment, key
// prefix and token secret (fleetIdentity; a process of another identity
// than a running one's is refused). The lock is released when the store
// closes.
func (s *Server) lockInstance(ctx context.Context, db *postgres.DB, fleet fleetIdentity) error {
	exclusive := s.indexKind == "memory"
	prefix := s.cfg.IndexPrefix
	if prefix == "" {
		prefix = redisidx.DefaultPrefix
	}
	release, err := db.LockInstance(ctx, exclusive, prefix, fleet.lockName())
	switch {
	case errors.Is(err, postgres.ErrOtherFleet):
		recorded, rerr := db.Fleet(ctx)
		if rerr != nil {
			recorded = ""
		}
		return s.otherFleetError(fleet, recorded)
	case errors.Is(err, postgres.ErrOtherNamespace):
		return fmt.Errorf("server: another tetra process uses the PostgreSQL database at %s with a different --index-prefix; every process on one database must share one Redis and one --index-prefix (%q here), or their GCs delete rows each other's clients have not acknowledged", config.RedactURL(s.cfg.Store), prefix)
	case errors.Is(err, postgres.ErrInstanceLocked) && exclusive:
		return fmt.Errorf("server: another tetra process already uses the PostgreSQL database at %s; with the in-process index (--index memory) a database serves one process only: stop the other one, or run every process with a shared --index redis://host:6379/0", config.RedactURL(s.cfg.Store))
	case errors.Is(err, postgres.ErrInstanceLocked):
		return fmt.Errorf("server: a tetra process with the in-process index (--index memory) already uses the PostgreSQL database at %s and must be the only one; stop it, or give it --index redis:// too", config.RedactURL(s.cfg.Store))
	case err != nil:
		return fmt.Errorf("server: PostgreSQL store at %s: %w", config.RedactURL(s.cfg.Store), err)
	}
	closeRest := s.closer
	s.closer = func() error { err := closeRest(); release(); return err }
	return nil
}

// ownerLockWait is how long lockOwner waits for the owner lock: long
// enough for PostgreSQL to end a killed predecessor's session.
const ownerLockWait = 3 * time.Second

// lockOwner lets a process restarted in place take over at once (issue 13,
// point 6). With a Redis index, a process's liveness record under its
// owner name keeps a successor of the same name waiting until it lapses
// (--owner-ttl), because a live duplicate must be refused. Every such
// process also holds a PostgreSQL session lock on its owner name for its
// life (postgres.DB.LockOwner): taking it proves the previous holder's
// session is gone, so its record is taken over (redis.Index.TakeOver) and
// the engine's start does not wait. When the lock is held (a live
// duplicate, or a dead process whose session PostgreSQL has not ended
// yet) nothing changes: the start waits for the record to lapse and
// refuses a live duplicate, as before. The lock is released when the
// store closes.
func (s *Server) lockOwner(ctx context.Context, db *postgres.DB) error {
	ri, ok := s.index.(*redisidx.Index)
	if !ok {
		return nil
	}
	prefix := s.cfg.IndexPrefix
	if prefix == "" {
		prefix = redisidx.DefaultPrefix
	}
	taken, release, err := db.LockOwner(ctx, prefix, ri.Owner(), ownerLockWait)
	if err != nil {
		return fmt.Errorf("server: PostgreSQL store at %s: %w", config.RedactURL(s.cfg.Store), err)
	}
	closeRest := s.closer
	s.closer = func() error { err := closeRest(); release(); return err }
	if !taken {
		s.log.Info("fleet: another session holds this owner name's lock; the start waits for its liveness record to lapse", "owner", ri.Owner())
		return nil
	}
	took, err := ri.TakeOver(ctx)
	switch {
	case err != nil:
		s.log.Warn("fleet: could not take over the dead predecessor's owner record; the start waits for it to lapse", "owner", ri.Owner(), "err", err)
	case took:
		s.log.Info("fleet: the previous process of this owner name is gone (its database session ended); took its owner record over", "owner", ri.Owner())
	}
	return nil
}

// Tuning returns the live tuning.
func (s *Server) Tuning() config.Tuning { return *s.tuning.Load() }

// SetTuning validates t and applies it to every connection at once; running
// connections are kept.
func (s *Server) SetTuning(t config.Tuning) error {
	if err := t.Validate(); err != nil {
		return err
	}
	s.tuning.Store(&t)
	return nil
}

// TuningReloads counts live tuning changes applied from TuningDir.
func (s *Server) TuningReloads() int64 { return s.tuningReloads.Load() }

// Signer mints and verifies the server's tokens.
func (s *Server) Signer() *auth.Signer { return s.signer }

// Engine exposes live delivery (for tests and the load generator).
func (s *Server) Engine() *delivery.Engine { return s.engine }

// Outbox exposes the outbox log (for tests and the load generator).
func (s *Server) Outbox() outbox.Log { return s.outbox }

// Relay exposes the Kafka relay; nil unless the outbox is Kafka.
func (s *Server) Relay() *kafka.Relay { return s.relay }

// Store exposes the history store.
func (s *Server) Store() history.Store { return s.store }

// Start primes live delivery, starts the background work and listens on
// cfg.Addr. It returns once the listener is open; Addr tells where.
func (s *Server) Start(ctx context.Context) error {
	if s.nudger != nil {
		s.nudger.Start()
	}
	if err := s.engine.Start(ctx); err != nil {
		if s.nudger != nil {
			s.nudger.Stop(ctx)
		}
		s.closer()
		return err
	}
	s.pipeline.Start()
	if s.relay != nil {
		s.relay.Start()
	}
	bgctx, cancel := context.WithCancel(context.Background())
	s.bgCancel = cancel
	s.bg.Add(4)
	go s.presence.run(bgctx)
	go s.retentionLoop(bgctx)
	go s.healthLoop(bgctx)
	s.series = &seriesRing{}
	go s.sampleLoop(bgctx, s.series)
	if s.cfg.TuningDir != "" {
		s.startTuningWatch(bgctx)
	}

	ln, err := net.Listen("tcp", s.cfg.Addr)
	if err != nil {
		s.stop(context.Background())
		return fmt.Errorf("server: listen on %s: %w", s.cfg.Addr, err)
	}
	s.ln = ln
	if s.cfg.MetricsAddr != "" {
		mln, err := net.Listen("tcp", s.cfg.MetricsAddr)
		if err != nil {
			ln.Close()
			s.stop(context.Background())
			return fmt.Errorf("server: listen on %s (metrics): %w", s.cfg.MetricsAddr, err)
		}
		s.metricsLn = mln
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", s.metrics.Handler())
		s.metricsSrv = &http.Server{
			Handler:           mux,
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       30 * time.Second,
			IdleTimeout:       120 * time.Second,
			MaxHeaderBytes:    64 << 10,
			ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		}
		go func() {
			if err := s.metricsSrv.Serve(mln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				s.log.Error("metrics server stopped", "err", err)
			}
		}()
	}
	s.httpSrv = &http.Server{
		Handler:           s.routes(),
		ConnContext:       connContext, // cork.go
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		IdleTimeout:       120 * time.Second,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	go func() {
		if err := s.httpSrv.Serve(corkListener{ln}); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.log.Error("http server stopped", "err", err)
		}
	}()
	s.log.Info("tetra serving", "addr", ln.Addr().String(), "metricsAddr", s.MetricsAddr(), "store", s.storeKind, "outbox", s.outboxKind, "index", s.indexKind)
	return nil
}

// Addr is the address the server listens on (after Start).
func (s *Server) Addr() string {
	if s.ln == nil {
		return ""
	}
	return s.ln.Addr().String()
}

// MetricsAddr is the address of the separate metrics listener (after
// Start), or "" when /metrics is served on Addr.
func (s *Server) MetricsAddr() string {
	if s.metricsLn == nil {
		return ""
	}
	return s.metricsLn.Addr().String()
}

// URL is the base http URL of the server (after Start), with 127.0.0.1 for
// an unspecified host.
func (s *Server) URL() string {
	host, port, _ := net.SplitHostPort(s.Addr())
	if host == "" || host == "::" || host == "0.0.0.0" {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, port)
}

// Drain makes /readyz answer 503 {"status":"draining"} and returns after
// d (or when ctx ends), while the server keeps serving every request and
// socket as before, new ones included: a load balancer that still routes
// here while it notices is served, not refused. Call it on SIGTERM before
// Shutdown, which then closes the sockets with 1001. d <= 0 returns at
// once (the server still reports not ready). Safe to call more than once.
func (s *Server) Drain(ctx context.Context, d time.Duration) {
	s.unready.Store(true)
	if d <= 0 {
		return
	}
	s.log.Info("draining: /readyz fails, still serving", "for", d.String())
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// Shutdown stops accepting, commits what is in flight, closes every socket
// with 1001 and releases the stores. Idempotent; bounded by ctx and
// cfg.ShutdownGrace.
func (s *Server) Shutdown(ctx context.Context) error {
	s.stopOnce.Do(func() { s.stopErr = s.stop(ctx) })
	return s.stopErr
}

func (s *Server) stop(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.ShutdownGrace)
	defer cancel()
	s.draining.Store(true)
	var errs []error
	if s.httpSrv != nil {
		// Stops new upgrades and HTTP requests; hijacked sockets stay.
		if err := s.httpSrv.Shutdown(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if s.metricsSrv != nil {
		if err := s.metricsSrv.Shutdown(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	if err := s.pipeline.Stop(ctx); err != nil {
		errs = append(errs, err)
	}
	if s.relay != nil {
		// After the pipeline. What it has not relayed yet stays in
		// history; the next start relays it from the committed cursor.
		if err := s.relay.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	s.engine.CloseAll(protocol.CloseGoingAway, "server shutting down")
	done := make(chan struct{})
	go func() { s.sessions.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	s.engine.Stop(ctx)
	if s.nudger != nil {
		// After the engine: what it queued is sent while ctx allows.
		s.nudger.Stop(ctx)
	}
	if s.bgCancel != nil {
		s.bgCancel()
	}
	s.bg.Wait()
	if err := s.closer(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func (s *Server) retentionLoop(ctx context.Context) {
	defer s.bg.Done()
	ticker := time.NewTicker(time.Minute)
	defer ticker.Stop()
	for {
		if _, err := s.PurgeHistory(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("history retention pass failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

// PurgeHistory runs one history retention pass: it deletes history older
// than the tuning's HistoryRetention, in batches, and returns how many rows
// went.
func (s *Server) PurgeHistory(ctx context.Context) (int64, error) {
	cutoff := time.Now().Add(-s.Tuning().HistoryRetention)
	var total int64
	for {
		n, err := s.store.PurgeHistory(ctx, cutoff, 5000)
		total += n
		if err != nil || n < 5000 {
			return total, err
		}
	}
}

// Metrics exposes the Prometheus metrics.
func (s *Server) Metrics() *metrics.Metrics { return s.metrics }

// noteConnection counts a connection for the reconnect metric.
func (s *Server) noteConnection(user, device string) {
	key := user + "\x00" + device
	s.seenMu.Lock()
	_, again := s.seen[key]
	if !again {
		if len(s.seen) > 200000 {
			s.seen = map[string]struct{}{}
		}
		s.seen[key] = struct{}{}
	}
	s.seenMu.Unlock()
	s.metrics.Connection(again)
}

// broadcastReads forwards saved read receipts to the chats' members: the
// other members and the reader's other devices.
func (s *Server) broadcastReads(reads []history.Read) {
	s.metrics.ReadReceipts(len(reads))
	for _, r := range reads {
		members, err := s.chats.members(context.Background(), r.ChatID)
		if err != nil {
			continue
		}
		frame := protocol.Encode(protocol.Read{Type: protocol.TypeRead, ChatID: r.ChatID, UserID: r.UserID, MessageID: r.MessageID})
		// The reader's other devices too (PROTOCOL.md §3), not the reading
		// connection.
		s.engine.BroadcastFrom(members, frame, r.UserID, r.Device)
	}
}

// chatCache caches chat membership for a short TTL, for the hot paths
// (the fan-out budget, read receipts and their broadcast). A member added
// since is found by isMember's re-check; a member removed is dropped at
// once on every process (forget, called by the removal here and by
// delivery's Config.OnExcluded for removals elsewhere). History access
// does not use it: it asks the store (handleMessages).
type chatCache struct {
	store     history.Store
	ttl       time.Duration
	mu        sync.Mutex
	m         map[string]cachedChat
	downUntil time.Time // a member lookup failed: size fails at once until then (fanout.go)
}

type cachedChat struct {
	members []string
	at      time.Time
}

func newChatCache(store history.Store, ttl time.Duration) *chatCache {
	return &chatCache{store: store, ttl: ttl, m: map[string]cachedChat{}}
}

func (c *chatCache) members(ctx context.Context, chatID string) ([]string, error) {
	c.mu.Lock()
	if e, ok := c.m[chatID]; ok && time.Since(e.at) < c.ttl {
		c.mu.Unlock()
		return e.members, nil
	}
	c.mu.Unlock()
	chat, err := c.store.Chat(ctx, chatID)
	if err != nil {
		return nil, err
	}
	c.put(chat)
	return chat.Members, nil
}

func (c *chatCache) put(chat history.Chat) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) > 100000 {
		c.m = map[string]cachedChat{}
	}
	c.m[chat.ID] = cachedChat{members: chat.Members, at: time.Now()}
}

// forget drops chatID's entry (its members changed).
func (c *chatCache) forget(chatID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, chatID)
}

// isMember reports whether user belongs to chatID; a cached negative is
// re-checked against the store.
func (c *chatCache) isMember(ctx context.Context, chatID, user string) (bool, error) {
	members, err := c.members(ctx, chatID)
	if err != nil {
		return false, err
	}
	for _, m := range members {
		if m == user {
			return true, nil
		}
	}
	chat, err := c.store.Chat(ctx, chatID)
	if err != nil {
		return false, err
	}
	c.put(chat)
	return chat.HasMember(user), nil
}
