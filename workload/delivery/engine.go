package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/tetra-messenger/tetra/internal/slogx"
	"github.com/tetra-messenger/tetra/workload/config"
	"github.com/tetra-messenger/tetra/workload/outbox"
	"github.com/tetra-messenger/tetra/workload/protocol"
	"github.com/tetra-messenger/tetra/workload/waterline"
)

// Conn is the engine's view of one WebSocket connection. The server's
// session implements it.
type Conn interface {
	// ID is the connection id, unique per connection (the epoch).
	ID() string
	User() string
	Device() string
	// Enqueue puts an encoded frame on the connection's bounded outbound
	// queue without blocking; false when the queue is full or closed.
	Enqueue(frame []byte) bool
	// Close closes the socket with code (PROTOCOL.md §3) once; later calls
	// are no-ops. It must not block.
	Close(code int, reason string)
}

// Config sizes the engine. Zero fields take the defaults.
type Config struct {
	FastQueue int // fast-path queue, split evenly over the workers; default 8000
	// Concurrency is the number of fast-path workers; default 32 for a
	// remote index (its sends wait on round trips), GOMAXPROCS for an
	// in-process one (waterline.InProcess: a send never waits, so more
	// workers than cores only add wake-ups, one per connection's item).
	Concurrency  int
	HoldTTL      time.Duration // lifetime of the poller's hold without refresh; default 30 s
	StoreTimeout time.Duration // per outbox or index call; default 5 s
	// Holder names this process's poller hold in the index; default a
	// random "poller-<ulid>".
	Holder string
	// OwnerTTL is how long this process stays alive in a shared index
	// (waterline.Fleet) without a heartbeat; it heartbeats every third of
	// it, and other processes reap its state once it lapses. GC also waits
	// until an index identity was first seen OwnerTTL/2 ago (by any
	// process) before deleting.
	// Default 30 s; ignored by an in-process index.
	OwnerTTL time.Duration
	// OnDelivered, when set, is called for every first delivery of a
	// message to a connection with the path ("fast" or "poll") and the
	// time since the message was accepted. It must be cheap.
	OnDelivered func(path string, sinceAccept time.Duration)
	// OnExcluded, when set, is called with the chat after every Exclude,
	// this process's and (with a shared index) every other process's, so
	// the server drops what it caches about the chat's members. It must
	// not block.
	OnExcluded func(chatID string)
	// AckWait is how long acknowledgements gather before they are recorded
	// in an index that can record many clients' at once
	// (waterline.ManyAcker: Redis), in one round trip (see ackBatcher).
	// Default 2 ms; negative records each ack frame on its own, on the
	// connection's goroutine. An in-process index records each at once.
	AckWait time.Duration
	// Nudges, when set, receives the offline nudges (the committed
	// messages' recipients with no connection here, and the messages a
	// reaper's withdrawal left unacknowledged) and this process's
	// connections (see NudgeSink). Nil: no nudges.
	Nudges NudgeSink
}

// remoteWorkers is the default Config.Concurrency with a remote index.
const remoteWorkers = 32

func (c Config) withDefaults() Config {
	if c.FastQueue <= 0 {
		c.FastQueue = 8000
	}
	if c.HoldTTL <= 0 {
		c.HoldTTL = 30 * time.Second
	}
	if c.StoreTimeout <= 0 {
		c.StoreTimeout = 5 * time.Second
	}
	if c.OwnerTTL <= 0 {
		c.OwnerTTL = 30 * time.Second
	}
	if c.AckWait == 0 {
		c.AckWait = 2 * time.Millisecond
	}
	if c.Holder == "" {
		c.Holder = "poller-" + ulid.Make().String()
	}
	return c
}

// Stats are the engine's counters since start. All fields are totals except
// the gauges Connected, Behind and SafeLine.
type Stats struct {
	Connected       int              `json:"connected"`
	Behind          int              `json:"behind"`          // connections with messages waiting behind a full push window
	FastDeliveries  int64            `json:"fastDeliveries"`  // frames sent by the fast path
	PollDeliveries  int64            `json:"pollDeliveries"`  // first sends by the poller
	Redeliveries    int64            `json:"redeliveries"`    // re-sends after a lease expired
	FastShed        int64            `json:"fastShed"`        // fast-path items dropped to the poller
	Acks            int64            `json:"acks"`            // message ids acknowledged that were outstanding on their connection
	Withdrawals     map[string]int64 `json:"withdrawals"`     // by reaper (and "superseded", "shutdown")
	GCDeleted       int64            `json:"gcDeleted"`       // outbox rows deleted by GC
	GCPasses        int64            `json:"gcPasses"`        // GC passes run
	Rebuilds        map[string]int64 `json:"rebuilds"`        // index rebuilds by reason
	SafeLine        map[int32]int64  `json:"safeLine"`        // last safe-delete line per partition
	EnqueueFailures int64            `json:"enqueueFailures"` // frames not queued: a connection's queue was full
	Deferred        int64            `json:"deferred"`        // sends left in the outbox because the push window was full
	ScanSkipped     int64            `json:"scanSkipped"`     // outbox rows the poller passed without reading: the fast path delivered them all (cover.go)
	OwnersReaped    int64            `json:"ownersReaped"`    // dead processes whose index state this one reaped
}

// Engine is the live delivery engine. It keeps the registered connections,
// the waterline index and its lock, and the counters; the fast path, the
// poller, the GC, the ack batcher and the fleet link are its parts, each a
// type with its own state (doc.go lists where each lives).
type Engine struct {
	cfg    Config
	tuning func() config.Tuning
	outbox outbox.Log
	idx    waterline.Index
	logger *slog.Logger
	now    func() time.Time

	// reg holds the registered connections (registry.go).
	reg *registry

	// idxMu: sends, acks and withdrawals hold it shared; a rebuild holds it
	// exclusively so it sees a still index.
	idxMu sync.RWMutex

	partitions []int32
	gc         *collector  // the waterline GC (gc.go)
	ackQ       *ackBatcher // nil: each Ack records itself (ackbatch.go)
	// local: the index never waits on I/O (waterline.InProcess), so its
	// calls get no deadline (ctx).
	local    bool
	fastPath *fastPath // the hand-off after commit (fastpath.go)
	poller   *poller   // re-delivery, catch-up and the forward scan (poller.go)
	// warnSend logs the index's refusals of sends at most every
	// slogx.Interval: while Redis is away every send fails.
	warnSend *slogx.Sampled
	// warnHold and warnGC do the same for the poller's hold refreshes and
	// the GC passes that fail while the index is away (every 100 ms and
	// every second otherwise).
	warnHold, warnGC *slogx.Sampled
	// primedOnce is set after the first rebuild (the cold start): a later
	// unprimed index lost its state (a flush, a restart without
	// persistence), which ensurePrimed says at Warn.
	primedOnce atomic.Bool

	// link is the link to the other processes sharing the index
	// (fleet.go), set by Start; nil for an index that is not shared.
	link *fleetLink

	cancel  context.CancelFunc
	wg      sync.WaitGroup
	stopped atomic.Bool

	hooks testHooks

	statMu   sync.Mutex
	stats    Stats
	fast     atomic.Int64
	polled   atomic.Int64
	redel    atomic.Int64
	shed     atomic.Int64
	acks     atomic.Int64
	enqF     atomic.Int64
	deferred atomic.Int64
}

// testHooks are set only by this package's tests, to land an event
// between two steps of a pass.
type testHooks struct {
	// beforeSafeLine runs in every GC pass after the priming check and the
	// read of the outbox's head, before the safe line is read.
	beforeSafeLine func()
	// afterReset runs in every rebuild right after the index was reset
	// (its primed flag cleared), with the rebuild's lock held.
	afterReset func(reason string)
	// beforePrimingRebuild runs in the GC's priming check once it read an
	// unprimed (or changed) index, before it takes the rebuild's lock.
	beforePrimingRebuild func()
}

// New builds an engine over log and idx. tuning returns the current live
// tuning (read on every decision, so reloads apply at once).
func New(log outbox.Log, idx waterline.Index, tuning func() config.Tuning, cfg Config, logger *slog.Logger) (*Engine, error) {
	if log == nil {
		return nil, errors.New("delivery: nil outbox log")
	}
	if idx == nil {
		return nil, errors.New("delivery: nil waterline index")
	}
	if tuning == nil {
		return nil, errors.New("delivery: nil tuning source")
	}
	if logger == nil {
		logger = slog.Default()
	}
	cfg = cfg.withDefaults()
	ip, ok := idx.(waterline.InProcess)
	local := ok && ip.InProcess()
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = remoteWorkers
		if local {
			cfg.Concurrency = runtime.GOMAXPROCS(0)
		}
	}
	e := &Engine{
		cfg: cfg, tuning: tuning, outbox: log, idx: idx, logger: logger, now: time.Now, local: local,
		reg:   newRegistry(),
		stats: Stats{Withdrawals: map[string]int64{}, Rebuilds: map[string]int64{}, SafeLine: map[int32]int64{}},
	}
	e.gc = newCollector(e)
	e.fastPath = newFastPath(e, cfg.Concurrency, cfg.FastQueue)
	e.poller = newPoller(e, e.fastPath.cover)
	e.warnSend = slogx.NewSampled(slogx.Interval)
	e.warnHold = slogx.NewSampled(slogx.Interval)
	e.warnGC = slogx.NewSampled(slogx.Interval)
	if many, ok := idx.(waterline.ManyAcker); ok && e.cfg.AckWait > 0 {
		e.ackQ = newAckBatcher(e, many, e.cfg.AckWait)
	}
	return e, nil
}

// Start pins the unscanned outbox with the poller's hold, rebuilds this
// process's part of the index (Rebuild; at a cold start no connection is
// registered yet, so this wipes what a crashed predecessor with the same
// owner left behind and marks the index primed), and starts the fast-path
// workers, the poller, the GC and the idle reaper.
func (e *Engine) Start(ctx context.Context) error {
	parts, err := e.outbox.Partitions(ctx)
	if err != nil {
		return fmt.Errorf("delivery: list outbox partitions: %w", err)
	}
	e.partitions = parts
	if e.link, err = startFleetLink(ctx, e); err != nil {
		return fmt.Errorf("delivery: heartbeat in the shared index: %w", err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	fail := func(err error) error {
		cancel()
		e.wg.Wait()
		return err
	}
	if e.link != nil {
		// Heartbeat from now on: a long rebuild must not make this process
		// look dead to the others.
		e.wg.Add(1)
		go e.link.heartbeatLoop(rctx)
	}
	if err := e.poller.holdAll(ctx, parts); err != nil {
		return fail(fmt.Errorf("delivery: hold the outbox for the poller: %w", err))
	}
	// The cold-state wipe: whatever this process's owner left in the index
	// (a previous run that crashed) is reset before the first delete; the
	// hold above keeps every row until the poller has scanned it.
	if err := e.Rebuild(ctx, RebuildColdStart); err != nil {
		return fail(err)
	}
	if e.link != nil {
		if err := e.link.run(rctx); err != nil {
			return fail(fmt.Errorf("delivery: subscribe to the fleet channel: %w", err))
		}
	}
	e.fastPath.start(rctx)
	if e.ackQ != nil {
		e.wg.Add(1)
		go e.ackQ.loop(rctx)
	}
	e.wg.Add(3)
	go e.poller.loop(rctx)
	go e.gc.loop(rctx)
	go e.idleLoop(rctx)
	return nil
}

// Stop stops the background workers and releases the poller's hold. It
// does not close connections (see CloseAll). Idempotent.
func (e *Engine) Stop(ctx context.Context) {
	if !e.stopped.CompareAndSwap(false, true) {
		return
	}
	e.reg.close()
	if e.cancel != nil {
		e.cancel()
	}
	done := make(chan struct{})
	go func() { e.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	for _, p := range e.partitions {
		_ = e.idx.Hold(ctx, e.cfg.Holder, p, -1, e.cfg.HoldTTL)
	}
	e.link.stop(ctx)
}

// CloseAll closes every registered connection with code and withdraws it.
func (e *Engine) CloseAll(code int, reason string) {
	ms := e.reg.all()
	for _, m := range ms {
		e.withdraw(m, code, reason, "shutdown")
	}
}

// ctx is the context of one index call: bounded by Config.StoreTimeout,
// or, for an in-process index, which never waits, without a deadline (a
// timer per call saved).
func (e *Engine) ctx() (context.Context, context.CancelFunc) {
	if e.local {
		return context.Background(), func() {}
	}
	return context.WithTimeout(context.Background(), e.cfg.StoreTimeout)
}

// Register adds a connection for live delivery. A registered connection of
// the same (user, device) is superseded: withdrawn and closed with 4001
// before the new one is registered. Rows already in the outbox when the
// connection registers are left to the client's history sync (PROTOCOL.md
// §4); everything committed later is pushed. The caller must have queued
// the hello frame before calling Register.
func (e *Engine) Register(ctx context.Context, c Conn) (*Member, error) {
	var epoch int64
	if e.link != nil {
		cl, err := e.link.fleet.Claim(ctx, c.User(), c.Device(), c.ID())
		if err != nil {
			return nil, fmt.Errorf("delivery: claim the device in the shared index: %w", err)
		}
		epoch = cl.Epoch
	}
	now := e.now()
	m := &Member{
		conn:        c,
		client:      waterline.Client{ID: c.ID(), User: c.User(), Device: c.Device()},
		connectedAt: now,
		epoch:       epoch,
		horizon:     map[int32]int64{},
		since:       map[int32]int64{},
		ahead:       map[pkey]struct{}{},
		shed:        map[int32]int64{},
		behind:      map[int32]time.Time{},
		out:         map[string]*outstanding{},
		shard:       e.fastPath.shard(),
	}
	m.lastSeen.Store(now.UnixNano())
	for _, p := range e.partitions {
		m.horizon[p] = maxPos // nothing is delivered until Start is known
	}
	old, err := e.reg.add(m)
	if err != nil {
		return nil, err
	}
	if old != nil {
		e.dropFromIndex(old)
		old.conn.Close(protocol.CloseSuperseded, "superseded by a newer connection of the same device")
		e.countWithdrawal(ReasonSuperseded)
		e.presence(old, false)
	}
	e.presence(m, true)

	start := make(map[int32]int64, len(e.partitions))
	for _, p := range e.partitions {
		head, err := e.outbox.Head(ctx, p)
		if err != nil {
			e.reg.remove(m)
			e.presence(m, false)
			return nil, fmt.Errorf("delivery: read outbox head: %w", err)
		}
		start[p] = head
	}
	m.mu.Lock()
	m.client.Start = start
	client := m.client
	m.mu.Unlock()
	e.idxMu.RLock()
	err = e.idx.Connect(ctx, client)
	e.idxMu.RUnlock()
	if err != nil {
		e.reg.remove(m)
		e.presence(m, false)
		return nil, fmt.Errorf("delivery: register in the waterline index: %w", err)
	}
	m.mu.Lock()
	for p, h := range start {
		m.horizon[p] = h
		m.followLocked(p, e.poller.floorOf(p))
	}
	m.mu.Unlock()
	if e.link != nil {
		// A claim by another process that was announced before this member
		// was in the registry found nothing to close; the stored epoch
		// tells. A claim announced later finds the member (onClaim).
		latest, err := e.link.fleet.LatestEpoch(ctx, client.User, client.Device)
		if err == nil && latest > epoch {
			e.withdraw(m, protocol.CloseSuperseded, "superseded by a newer connection of the same device", ReasonSuperseded)
		}
	}
	return m, nil
}

// Unregister removes a connection that closed on its own (the client went
// away). It is a no-op when the member was already withdrawn or superseded.
func (e *Engine) Unregister(m *Member) {
	if e.reg.remove(m) {
		e.dropFromIndex(m)
		e.presence(m, false)
	}
}

// presence tells the nudge sink that m was registered (up) or removed.
func (e *Engine) presence(m *Member, up bool) {
	if e.cfg.Nudges == nil {
		return
	}
	if up {
		e.cfg.Nudges.Connected(m.client.User, m.client.ID)
	} else {
		e.cfg.Nudges.Disconnected(m.client.User, m.client.ID)
	}
}

func (e *Engine) dropFromIndex(m *Member) {
	ctx, cancel := e.ctx()
	defer cancel()
	e.idxMu.RLock()
	_, err := e.idx.Withdraw(ctx, m.client.ID)
	e.idxMu.RUnlock()
	if err != nil {
		e.logger.Warn("withdraw from the waterline index failed; the next rebuild drops it", "conn", m.client.ID, "err", err)
	}
}

// Withdraw removes m from live delivery and closes its socket with code,
// if m is still the registered connection; otherwise it does nothing and
// returns false (a verdict about a superseded connection is a no-op).
func (e *Engine) Withdraw(m *Member, code int, reason string) bool {
	return e.withdraw(m, code, reason, reason)
}

func (e *Engine) withdraw(m *Member, code int, why, reason string) bool {
	if !e.reg.remove(m) {
		return false
	}
	e.presence(m, false)
	if e.cfg.Nudges != nil && nudgesWithdrawal(reason) {
		if ns := withdrawnNudges(m, code); len(ns) > 0 {
			e.cfg.Nudges.Nudge(ns)
		}
	}
	e.dropFromIndex(m)
	m.conn.Close(code, why)
	e.countWithdrawal(reason)
	e.logger.Debug("withdrawn from live delivery", "conn", m.client.ID, "user", m.client.User, "reason", reason)
	return true
}

func (e *Engine) countWithdrawal(reason string) {
	e.statMu.Lock()
	e.stats.Withdrawals[reason]++
	e.statMu.Unlock()
}

// Registered reports whether m is the current connection of its device.
func (e *Engine) Registered(m *Member) bool { return e.reg.has(m) }

// Touch records that m showed life (a frame or a pong).
func (e *Engine) Touch(m *Member) { m.lastSeen.Store(e.now().UnixNano()) }

// Ack removes acknowledged message ids from m's push window and from its
// pending set in the index: at once with an in-process index, within
// Config.AckWait with one that records many clients' at once (Redis; see
// ackBatcher), when it always returns nil. Freeing room in the window of a
// member that has messages waiting wakes the poller, which sends them
// (catchUp). Ids that are not outstanding are ignored. A remote index
// recorded without the batcher gets ctx bounded by Config.StoreTimeout
// when ctx has no deadline of its own.
func (e *Engine) Ack(ctx context.Context, m *Member, ids []string) error {
	e.Touch(m)
	m.mu.Lock()
	matched := 0
	for _, id := range ids {
		if _, ok := m.out[id]; ok {
			delete(m.out, id)
			matched++
		}
	}
	freed := matched > 0
	waiting := m.waitingLocked(e.poller.floorOf)
	if freed {
		m.noteWindowLocked(e.now(), e.tuning().MaxPending)
	}
	m.mu.Unlock()
	if freed && waiting {
		e.poller.wakeUp()
	}
	e.acks.Add(int64(matched)) // ids that were outstanding, not every id a client sent
	if e.ackQ != nil {
		e.ackQ.add(m.client.ID, ids)
		return nil
	}
	if !e.local {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, e.cfg.StoreTimeout)
			defer cancel()
		}
	}
	e.idxMu.RLock()
	_, err := e.idx.Ack(ctx, m.client.ID, ids)
	e.idxMu.RUnlock()
	if err != nil && !errors.Is(err, waterline.ErrUnknownClient) {
		// The connection's window is already free; the index keeps the
		// entries until their lease, when the poller finds them
		// acknowledged and drops them (redeliver).
		return err
	}
	return nil
}

// Broadcast queues frame to every connection of users, except skip, on
// this process and, with a shared index, on the other processes of the
// fleet (best effort).
func (e *Engine) Broadcast(users []string, frame []byte, skip *Member) {
	e.link.publishBroadcast(users, frame)
	e.broadcastHere(users, frame, skip)
}

// onBroadcast queues frame to this process's connections of users (a
// broadcast from another process), or applies it when it is a control
// message between engines (exclude.go).
func (e *Engine) onBroadcast(users []string, frame []byte) {
	if e.onControl(frame) {
		return
	}
	e.broadcastHere(users, frame, nil)
}

func (e *Engine) broadcastHere(users []string, frame []byte, skip *Member) {
	for _, m := range e.reg.ofUsers(users, skip) {
		m.conn.Enqueue(frame)
	}
}

// Stats returns a snapshot of the counters.
func (e *Engine) Stats() Stats {
	connected := e.reg.count()
	e.statMu.Lock()
	defer e.statMu.Unlock()
	s := e.stats
	s.Withdrawals = maps.Clone(e.stats.Withdrawals)
	s.Rebuilds = maps.Clone(e.stats.Rebuilds)
	s.SafeLine = maps.Clone(e.stats.SafeLine)
	s.Connected = connected
	s.FastDeliveries = e.fast.Load()
	s.PollDeliveries = e.polled.Load()
	s.Redeliveries = e.redel.Load()
	s.FastShed = e.shed.Load()
	s.Acks = e.acks.Load()
	s.EnqueueFailures = e.enqF.Load()
	s.Deferred = e.deferred.Load()
	s.ScanSkipped = e.fastPath.cover.skipped.Load()
	s.Behind = e.reg.laggingCount()
	return s
}
