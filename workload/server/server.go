package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetra-messenger/tetra/internal/slogx"
	"github.com/tetra-messenger/tetra/workload/auth"
	"github.com/tetra-messenger/tetra/workload/backends"
	"github.com/tetra-messenger/tetra/workload/config"
	"github.com/tetra-messenger/tetra/workload/delivery"
	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/ingest"
	"github.com/tetra-messenger/tetra/workload/metrics"
	"github.com/tetra-messenger/tetra/workload/nudge"
	"github.com/tetra-messenger/tetra/workload/outbox"
	"github.com/tetra-messenger/tetra/workload/outbox/kafka"
	"github.com/tetra-messenger/tetra/workload/protocol"
	"github.com/tetra-messenger/tetra/workload/waterline"
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
	// Config names the backends (store, outbox, index, token secret,
	// logger): DataDir, Store, Outbox, Index and its settings, JWTSecret,
	// WrapStore and Logger, promoted; package backends opens them.
	backends.Config
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
	// "*.example.com") whose browser pages may open sockets and call the
	// HTTP API (CORS on /api/..., cors.go). By default only same-origin
	// pages and non-browser clients (no Origin header) may.
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
		Config:          backends.Config{DataDir: "./data"},
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
	return nil // the backends' settings: backends.Open checks them
}

// DefaultReadyTimeout is Config.ReadyTimeout's default.
const DefaultReadyTimeout = 800 * time.Millisecond

// Server is the messenger workload.
type Server struct {
	cfg    Config
	log    *slog.Logger
	tuning atomic.Pointer[config.Tuning]
	signer *auth.Signer

	backends *backends.Backends // closed by stop, or by New and Start when they fail
	store    history.Store      // backends.Store
	outbox   outbox.Log         // backends.Outbox
	index    waterline.Index    // backends.Index
	// relay feeds the Kafka outbox (built in New, started in Start,
	// stopped in stop); nil when the outbox is the store's.
	relay *kafka.Relay

	pipeline *ingest.Pipeline
	engine   *delivery.Engine
	nudger   *nudge.Nudger // nil without Config.Nudge.URL
	chats    *chatCache
	typing   typingGate // PROTOCOL.md §7.4 (typing.go)
	// typingOut gathers forwarded typing frames for typingWindow (typing.go).
	typingOut *typingBatch
	presence  *presenceTracker // PROTOCOL.md §7.4 (presence.go)
	metrics   *metrics.Metrics
	seenMu    sync.Mutex
	seen      map[string]struct{} // (user, device) pairs seen connected, for the reconnect count

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
	creates  createBudgets // each user's chat creations per minute (createrate.go)
	sessions sync.WaitGroup

	bg       sync.WaitGroup
	bgCancel context.CancelFunc
	series   *seriesRing // the admin page's samples, filled by sampleLoop
	stopOnce sync.Once
	stopErr  error

	tuningReloads atomic.Int64
	// Warnings that repeat per connection or per frame while the index is
	// away, logged at most every slogx.Interval with a count.
	warnRefused, warnAck *slogx.Sampled
	// warnStore: HTTP requests answered 503 because the store failed.
	warnStore     *slogx.Sampled
	tuningUnknown string // the unknown tuning file names last warned about (tuning.go)

	commits commitHealth // recent group-commit outcomes, for /readyz
	health  liveHealth   // the index's last check (degraded.go)
}

// New opens the backends cfg names (backends.Open) and builds the server
// over them: the delivery engine, the accept pipeline, the Kafka relay
// when the outbox is Kafka, the offline nudge. It does not listen; call
// Start. On an error it has closed what it opened.
func New(ctx context.Context, cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Server{cfg: cfg, log: log, perUser: map[string]int{},
		warnRefused: slogx.NewSampled(slogx.Interval), warnAck: slogx.NewSampled(slogx.Interval),
		warnStore: slogx.NewSampled(slogx.Interval)}
	t := cfg.Tuning
	s.tuning.Store(&t)
	if cfg.TuningDir != "" {
		if err := s.loadTuningDir(); err != nil {
			return nil, fmt.Errorf("server: tuning directory %s: %w", cfg.TuningDir, err)
		}
	}
	b, err := backends.Open(ctx, cfg.Config)
	if err != nil {
		return nil, err
	}
	s.backends, s.store, s.outbox, s.index, s.signer = b, b.Store, b.Outbox, b.Index, b.Signer
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
		if b.Sessions != nil {
			ss := b.Sessions()
			snap.Sessions = &metrics.SessionSnapshot{Ended: ss.Ended, CommitRetries: ss.CommitRetries, ReadRetries: ss.ReadRetries}
		}
		return snap, err
	})
	s.metrics.SetBuildInfo(b.StoreKind, b.OutboxKind, b.IndexKind)
	dcfg := cfg.Delivery
	dcfg.OnDelivered = s.metrics.Delivered
	dcfg.OnExcluded = s.chats.forget
	if s.nudger, err = s.newNudger(); err != nil {
		b.Close()
		return nil, err
	}
	if s.nudger != nil {
		dcfg.Nudges = s.nudger
	}
	s.engine, err = delivery.New(s.outbox, s.index, s.Tuning, dcfg, log)
	if err != nil {
		b.Close()
		return nil, err
	}
	s.typingOut = newTypingBatch(typingWindow, func(users []string, frame []byte) { s.engine.Broadcast(users, frame, nil) })
	handoff := func(rs []history.Result) { s.engine.Handoff(outbox.FromResults(rs)) }
	if s.relay, err = b.NewRelay(s.engine.Handoff); err != nil {
		b.Close()
		return nil, err
	}
	if s.relay != nil {
		// The relay hands committed records to the fast path; a commit
		// only wakes it (its results name no outbox rows).
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
		b.Close()
		return nil, err
	}
	return s, nil
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
		s.backends.Close()
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
	s.log.Info("tetra serving", "addr", ln.Addr().String(), "metricsAddr", s.MetricsAddr(), "store", s.backends.StoreKind, "outbox", s.backends.OutboxKind, "index", s.backends.IndexKind)
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
	if err := s.backends.Close(); err != nil {
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
	// member: a "member" history group (PROTOCOL.md §7.6), fixed at
	// creation; known once a chat was read (noteMembers sees members only).
	member, known bool
	at            time.Time
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
	c.m[chat.ID] = cachedChat{members: chat.Members, member: chat.History == history.HistoryMember, known: true, at: time.Now()}
}

// memberHistory reports whether chatID is a group whose members read only
// what was committed while they were members (PROTOCOL.md §7.6): from the
// cache when a read of the chat put it there (the setting never changes),
// else from the store.
func (c *chatCache) memberHistory(ctx context.Context, chatID string) (bool, error) {
	c.mu.Lock()
	e, ok := c.m[chatID]
	c.mu.Unlock()
	if ok && e.known {
		return e.member, nil
	}
	chat, err := c.store.Chat(ctx, chatID)
	if err != nil {
		return false, err
	}
	c.put(chat)
	return chat.History == history.HistoryMember, nil
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
