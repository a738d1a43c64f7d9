package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/tetra-messenger/tetra/workload/config"
	"github.com/tetra-messenger/tetra/workload/history"
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
	FastQueue    int           // fast-path queue, split evenly over the workers; default 8000
	Concurrency  int           // fast-path workers; default 32
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
}

func (c Config) withDefaults() Config {
	if c.FastQueue <= 0 {
		c.FastQueue = 8000
	}
	if c.Concurrency <= 0 {
		c.Concurrency = 32
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
	Acks            int64            `json:"acks"`            // message ids acknowledged
	Withdrawals     map[string]int64 `json:"withdrawals"`     // by reaper (and "superseded", "shutdown")
	GCDeleted       int64            `json:"gcDeleted"`       // outbox rows deleted by GC
	GCPasses        int64            `json:"gcPasses"`        // GC passes run
	Rebuilds        map[string]int64 `json:"rebuilds"`        // index rebuilds by reason
	SafeLine        map[int32]int64  `json:"safeLine"`        // last safe-delete line per partition
	EnqueueFailures int64            `json:"enqueueFailures"` // frames not queued: a connection's queue was full
	Deferred        int64            `json:"deferred"`        // sends left in the outbox because the push window was full
	OwnersReaped    int64            `json:"ownersReaped"`    // dead processes whose index state this one reaped
}

// maxPos marks a horizon not yet known: nothing is delivered to it.
const maxPos = math.MaxInt64

type pkey struct {
	p   int32
	pos int64
}

// Member is a registered connection. The server keeps it to ack and touch.
type Member struct {
	conn        Conn
	client      waterline.Client
	connectedAt time.Time
	epoch       int64        // the device claim's epoch in a shared index; 0 without one
	lastSeen    atomic.Int64 // unix nanos

	mu      sync.Mutex
	horizon map[int32]int64 // rows at or below were examined by the poller (or precede the connection)
	ahead   map[pkey]struct{}
	// shed is the lowest position the fast path left to the poller for
	// this member (per partition), or absent. While set, later fast-path
	// items are left to the poller too, so the member still receives
	// commit order; the poller clears it once its horizon passes.
	shed map[int32]int64
	// behind holds the partitions where rows for this member wait above
	// its horizon because its push window was full when the poller came
	// to them, each with the acceptance time of the oldest message
	// waiting; the poller's catch-up delivers them in order as
	// acknowledgements free the window (see catchUp). While a partition is
	// behind, the poller's hold stays at or below horizon+1, so GC keeps
	// those rows.
	behind map[int32]time.Time
	// progressAt is when the window last moved while the member was
	// behind: an acknowledgement freed a slot, or the member fell behind.
	// The overload reaper judges a member that stopped making progress.
	progressAt time.Time
	shard      int
	// out is the push window: every message frame sent to this connection
	// (or about to be) and not acknowledged, by message id. It never holds
	// more than max-pending entries. It is this process's own record of
	// what its connection holds: the index mirrors it (Sent, Ack), and a
	// rebuild restores the index from it.
	out map[string]*outstanding
}

// outstanding is one message in a member's push window.
type outstanding struct {
	entry      waterline.Entry
	frame      []byte
	attempts   int       // sends so far; 0 while the first send is on its way
	leaseUntil time.Time // when it is due again; zero before the first send
}

// ID is the member's connection id.
func (m *Member) ID() string { return m.client.ID }

// slot is the outcome of asking a member's window for room.
type slot int

const (
	slotTaken   slot = iota // reserved: send it
	slotHeld                // already outstanding: sent before, nothing to do
	slotRefused             // the window is full
)

// reserveLocked takes a window slot for it, recording its frame; the caller
// holds m.mu. window is max-pending.
func (m *Member) reserveLocked(it item, window int) slot {
	if _, ok := m.out[it.entry.MessageID]; ok {
		return slotHeld
	}
	if len(m.out) >= window {
		return slotRefused
	}
	m.out[it.entry.MessageID] = &outstanding{entry: it.entry, frame: it.frame}
	return slotTaken
}

// isBehind reports whether rows of partition p wait for m's window; the
// caller holds m.mu.
func (m *Member) isBehind(p int32) bool {
	_, ok := m.behind[p]
	return ok
}

// fallBehindLocked records that the message accepted at oldest, and what
// follows it in partition p, wait for m's window; the caller holds m.mu.
func (m *Member) fallBehindLocked(p int32, oldest, now time.Time) {
	if len(m.behind) == 0 {
		m.progressAt = now
	}
	m.behind[p] = oldest
}

// catchUpLocked clears partition p's behind mark; the caller holds m.mu.
func (m *Member) catchUpLocked(p int32) {
	delete(m.behind, p)
}

type item struct {
	entry  waterline.Entry
	frame  []byte
	sentAt time.Time // the message's acceptance time; zero for re-deliveries
}

type fastItem struct {
	m *Member
	item
}

// Engine is the live delivery engine.
type Engine struct {
	cfg    Config
	tuning func() config.Tuning
	log    outbox.Log
	idx    waterline.Index
	logger *slog.Logger
	now    func() time.Time

	mu     sync.RWMutex
	byID   map[string]*Member
	byUser map[string]map[string]*Member // user -> device -> member

	// idxMu: sends, acks and withdrawals hold it shared; a rebuild holds it
	// exclusively so it sees a still index.
	idxMu sync.RWMutex

	partitions []int32
	scanPos    map[int32]*atomic.Int64
	samples    map[int32][]headSample // GC goroutine only
	deleted    map[int32]int64        // GC goroutine only

	// lagging holds the members behind in some partition (Member.behind),
	// so the poller's catch-up and hold need not visit every connection.
	lagMu   sync.Mutex
	lagging map[*Member]struct{}

	// fastQ has one queue per worker; a connection's items always go to
	// the same worker, so each connection sees commit order.
	fastQ    []chan fastItem
	pollWake chan struct{}

	nextShard atomic.Uint64

	// The fleet (see fleet.go); nil fleet for an in-process index.
	fleet   waterline.Fleet
	wakeOut chan struct{}
	castOut chan fleetCast
	beatNow chan struct{}

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
	// outbox statistics, before the safe line is read.
	beforeSafeLine func()
}

type headSample struct {
	at   time.Time
	head int64
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
	return &Engine{
		cfg: cfg, tuning: tuning, log: log, idx: idx, logger: logger, now: time.Now,
		byID:     map[string]*Member{},
		byUser:   map[string]map[string]*Member{},
		lagging:  map[*Member]struct{}{},
		scanPos:  map[int32]*atomic.Int64{},
		samples:  map[int32][]headSample{},
		deleted:  map[int32]int64{},
		fastQ:    makeQueues(cfg.Concurrency, cfg.FastQueue),
		pollWake: make(chan struct{}, 1),
		wakeOut:  make(chan struct{}, 1),
		castOut:  make(chan fleetCast, 1024),
		beatNow:  make(chan struct{}, 1),
		stats:    Stats{Withdrawals: map[string]int64{}, Rebuilds: map[string]int64{}, SafeLine: map[int32]int64{}},
	}, nil
}

// Start pins the unscanned outbox with the poller's hold, rebuilds this
// process's part of the index from the outbox (a cold start: state a
// crashed predecessor with the same owner left behind is wiped), and starts
// the fast-path workers, the poller, the GC and the idle reaper.
func (e *Engine) Start(ctx context.Context) error {
	parts, err := e.log.Partitions(ctx)
	if err != nil {
		return fmt.Errorf("delivery: list outbox partitions: %w", err)
	}
	e.partitions = parts
	if err := e.startFleet(ctx); err != nil {
		return fmt.Errorf("delivery: heartbeat in the shared index: %w", err)
	}
	rctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	fail := func(err error) error {
		cancel()
		e.wg.Wait()
		return err
	}
	if e.fleet != nil {
		// Heartbeat from now on: a long rebuild must not make this process
		// look dead to the others.
		e.wg.Add(1)
		go e.heartbeatLoop(rctx)
	}
	for _, p := range parts {
		v := &atomic.Int64{}
		v.Store(-1)
		e.scanPos[p] = v
		if err := e.idx.Hold(ctx, e.cfg.Holder, p, 0, e.cfg.HoldTTL); err != nil {
			return fail(fmt.Errorf("delivery: hold the outbox for the poller: %w", err))
		}
	}
	// The cold-state wipe: whatever this process's owner left in the index
	// (a previous run that crashed) is reset, and the index is rebuilt from
	// the outbox before the first delete.
	if err := e.Rebuild(ctx, RebuildColdStart); err != nil {
		return fail(err)
	}
	if err := e.runFleet(rctx); err != nil {
		return fail(fmt.Errorf("delivery: subscribe to the fleet channel: %w", err))
	}
	for i := 0; i < e.cfg.Concurrency; i++ {
		e.wg.Add(1)
		go e.fastWorker(rctx, e.fastQ[i])
	}
	e.wg.Add(3)
	go e.pollLoop(rctx)
	go e.gcLoop(rctx)
	go e.idleLoop(rctx)
	return nil
}

// Stop stops the background workers and releases the poller's hold. It
// does not close connections (see CloseAll). Idempotent.
func (e *Engine) Stop(ctx context.Context) {
	if !e.stopped.CompareAndSwap(false, true) {
		return
	}
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
	e.stopFleet(ctx)
}

// CloseAll closes every registered connection with code and withdraws it.
func (e *Engine) CloseAll(code int, reason string) {
	ms := e.members()
	for _, m := range ms {
		e.withdraw(m, code, reason, "shutdown")
	}
}

func (e *Engine) ctx() (context.Context, context.CancelFunc) {
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
	if e.fleet != nil {
		cl, err := e.fleet.Claim(ctx, c.User(), c.Device(), c.ID())
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
		ahead:       map[pkey]struct{}{},
		shed:        map[int32]int64{},
		behind:      map[int32]time.Time{},
		out:         map[string]*outstanding{},
		shard:       int(e.nextShard.Add(1) % uint64(len(e.fastQ))),
	}
	m.lastSeen.Store(now.UnixNano())
	for _, p := range e.partitions {
		m.horizon[p] = maxPos // nothing is delivered until Start is known
	}
	e.mu.Lock()
	if e.stopped.Load() {
		e.mu.Unlock()
		return nil, errors.New("delivery: engine stopped")
	}
	devs := e.byUser[c.User()]
	if devs == nil {
		devs = map[string]*Member{}
		e.byUser[c.User()] = devs
	}
	old := devs[c.Device()]
	if old != nil && old.epoch > epoch {
		// A later claim of this device registered first (a race between
		// two connections of one device): this one lost.
		e.mu.Unlock()
		return nil, ErrSuperseded
	}
	if old != nil {
		delete(e.byID, old.client.ID)
	}
	devs[c.Device()] = m
	e.byID[m.client.ID] = m
	e.mu.Unlock()
	if old != nil {
		e.dropFromIndex(old)
		old.conn.Close(protocol.CloseSuperseded, "superseded by a newer connection of the same device")
		e.countWithdrawal(ReasonSuperseded)
	}

	start := make(map[int32]int64, len(e.partitions))
	for _, p := range e.partitions {
		head, err := e.log.Head(ctx, p)
		if err != nil {
			e.unregister(m)
			return nil, fmt.Errorf("delivery: read outbox head: %w", err)
		}
		start[p] = head
	}
	m.mu.Lock()
	m.client.Start = start
	client := m.client
	m.mu.Unlock()
	e.idxMu.RLock()
	err := e.idx.Connect(ctx, client)
	e.idxMu.RUnlock()
	if err != nil {
		e.unregister(m)
		return nil, fmt.Errorf("delivery: register in the waterline index: %w", err)
	}
	m.mu.Lock()
	for p, h := range start {
		m.horizon[p] = h
	}
	m.mu.Unlock()
	if e.fleet != nil {
		// A claim by another process that was announced before this member
		// was in the registry found nothing to close; the stored epoch
		// tells. A claim announced later finds the member (onClaim).
		latest, err := e.fleet.LatestEpoch(ctx, client.User, client.Device)
		if err == nil && latest > epoch {
			e.withdraw(m, protocol.CloseSuperseded, "superseded by a newer connection of the same device", ReasonSuperseded)
		}
	}
	return m, nil
}

// Unregister removes a connection that closed on its own (the client went
// away). It is a no-op when the member was already withdrawn or superseded.
func (e *Engine) Unregister(m *Member) {
	if e.unregister(m) {
		e.dropFromIndex(m)
	}
}

func (e *Engine) unregister(m *Member) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.byID[m.client.ID] != m {
		return false
	}
	delete(e.byID, m.client.ID)
	if devs := e.byUser[m.client.User]; devs != nil && devs[m.client.Device] == m {
		delete(devs, m.client.Device)
		if len(devs) == 0 {
			delete(e.byUser, m.client.User)
		}
	}
	e.setLagging(m, false)
	return true
}

// setLagging adds m to, or removes it from, the members behind.
func (e *Engine) setLagging(m *Member, lagging bool) {
	e.lagMu.Lock()
	defer e.lagMu.Unlock()
	if lagging {
		e.lagging[m] = struct{}{}
	} else {
		delete(e.lagging, m)
	}
}

// laggingMembers is a snapshot of the members behind.
func (e *Engine) laggingMembers() []*Member {
	e.lagMu.Lock()
	defer e.lagMu.Unlock()
	out := make([]*Member, 0, len(e.lagging))
	for m := range e.lagging {
		out = append(out, m)
	}
	return out
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
	if !e.unregister(m) {
		return false
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
func (e *Engine) Registered(m *Member) bool {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.byID[m.client.ID] == m
}

// Touch records that m showed life (a frame or a pong).
func (e *Engine) Touch(m *Member) { m.lastSeen.Store(e.now().UnixNano()) }

// Ack removes acknowledged message ids from m's push window and from its
// pending set in the index. Freeing room in the window of a member that has
// messages waiting wakes the poller, which sends them (catchUp). Ids that
// are not outstanding are ignored.
func (e *Engine) Ack(ctx context.Context, m *Member, ids []string) error {
	e.Touch(m)
	m.mu.Lock()
	freed := false
	for _, id := range ids {
		if _, ok := m.out[id]; ok {
			delete(m.out, id)
			freed = true
		}
	}
	waiting := len(m.behind) > 0 || len(m.shed) > 0
	if freed && len(m.behind) > 0 {
		m.progressAt = e.now()
	}
	m.mu.Unlock()
	if freed && waiting {
		e.wakePoller()
	}
	e.acks.Add(int64(len(ids)))
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

// Handoff takes committed results from the accept pipeline and queues them
// on the fast path. It never blocks: when the queue is full the rest is shed
// to the poller.
func (e *Engine) Handoff(results []history.Result) {
	shed := false
	for i := range results {
		r := &results[i]
		if r.Err != nil || r.Duplicate || len(r.Deliveries) == 0 {
			continue
		}
		frame := MessageFrame(r.Message)
		for _, d := range r.Deliveries {
			e.mu.RLock()
			devs := e.byUser[d.Recipient]
			var targets []*Member
			for dev, m := range devs {
				if d.Recipient == r.Message.SenderID && dev == r.Message.SenderDevice {
					continue
				}
				targets = append(targets, m)
			}
			e.mu.RUnlock()
			for _, m := range targets {
				it := fastItem{m: m, item: item{entry: waterline.Entry{MessageID: r.Message.ID, Partition: d.Partition, Pos: d.Pos}, frame: frame, sentAt: r.Message.SentAt}}
				select {
				case e.fastQ[m.shard] <- it:
				default:
					m.mu.Lock()
					if cur, ok := m.shed[d.Partition]; !ok || d.Pos < cur {
						m.shed[d.Partition] = d.Pos
					}
					m.mu.Unlock()
					e.shed.Add(1)
					shed = true
				}
			}
		}
	}
	if shed {
		e.wakePoller()
	}
	for i := range results {
		if r := &results[i]; r.Err == nil && !r.Duplicate && len(r.Deliveries) > 0 {
			e.publishWake()
			break
		}
	}
}

// MessageFrame encodes the message frame for m (PROTOCOL.md §3).
func MessageFrame(m history.Message) []byte {
	return protocol.Encode(protocol.Message{
		Type: protocol.TypeMessage, MessageID: m.ID, CorrelationID: m.CorrelationID,
		ChatID: m.ChatID, SenderID: m.SenderID, Body: m.Body, SentAt: m.SentAt.UTC(),
	})
}

func (e *Engine) wakePoller() {
	select {
	case e.pollWake <- struct{}{}:
	default:
	}
}

func makeQueues(n, total int) []chan fastItem {
	qs := make([]chan fastItem, n)
	per := max(1, total/n)
	for i := range qs {
		qs[i] = make(chan fastItem, per)
	}
	return qs
}

func (e *Engine) fastWorker(ctx context.Context, q chan fastItem) {
	defer e.wg.Done()
	batch := make([]fastItem, 0, 64)
	for {
		select {
		case <-ctx.Done():
			return
		case it := <-q:
			batch = append(batch[:0], it)
		drain:
			for len(batch) < cap(batch) {
				select {
				case it := <-q:
					batch = append(batch, it)
				default:
					break drain
				}
			}
			e.deliverFast(batch)
		}
	}
}

func (e *Engine) deliverFast(batch []fastItem) {
	window := e.tuning().MaxPending
	byMember := map[*Member][]item{}
	for _, it := range batch {
		m := it.m
		k := pkey{it.entry.Partition, it.entry.Pos}
		m.mu.Lock()
		if k.pos <= m.horizon[k.p] || m.isBehind(k.p) {
			m.mu.Unlock() // examined already, or the catch-up delivers it in order
			continue
		}
		if _, shedding := m.shed[k.p]; shedding {
			m.mu.Unlock() // the poller delivers it, in order
			continue
		}
		if _, dup := m.ahead[k]; dup {
			m.mu.Unlock()
			continue
		}
		switch m.reserveLocked(it.item, window) {
		case slotRefused:
			// The window is full: the row waits in the outbox and the
			// poller sends it as acknowledgements free the window.
			m.shed[k.p] = k.pos
			m.mu.Unlock()
			e.deferred.Add(1)
			continue
		case slotHeld:
			m.ahead[k] = struct{}{}
			m.mu.Unlock()
			continue
		}
		m.ahead[k] = struct{}{}
		m.mu.Unlock()
		byMember[m] = append(byMember[m], it.item)
	}
	for m, items := range byMember {
		n := e.send(m, items)
		e.fast.Add(int64(n))
		e.observe("fast", items)
	}
}

// send sends items, whose window slots the caller reserved (or which are
// outstanding already, for a re-delivery), to m: it records them in the
// index with a lease (Sent), counts an attempt and queues their frames on
// the socket. It returns how many were queued.
//
// The connection's own record (Member.out) is what re-delivery and a
// rebuild go by, so a send the index refused is still delivered: when the
// index lost the registration (a flush, a failover) the next rebuild puts
// the entries back; when Redis is unreachable GC deletes nothing until it
// is back.
func (e *Engine) send(m *Member, items []item) int {
	if len(items) == 0 {
		return 0
	}
	t := e.tuning()
	lease := e.now().Add(t.Lease)
	entries := make([]waterline.Entry, len(items))
	for i, it := range items {
		entries[i] = it.entry
	}
	ctx, cancel := e.ctx()
	e.idxMu.RLock()
	_, err := e.idx.Sent(ctx, m.client.ID, entries, lease)
	e.idxMu.RUnlock()
	cancel()
	switch {
	case errors.Is(err, waterline.ErrUnknownClient):
		if !e.Registered(m) {
			return 0 // withdrawn meanwhile
		}
		// The index lost this registration: a flush or a failover that
		// the next GC pass rebuilds from, or, in a shared index, another
		// process reaped this one (the heartbeat tells).
		if e.fleet != nil {
			e.checkReaped()
		}
	case err != nil:
		e.logger.Warn("waterline index refused a send; delivering (the connection's window keeps it for re-delivery)", "conn", m.client.ID, "err", err)
	}
	frames := make([][]byte, 0, len(items))
	m.mu.Lock()
	for _, it := range items {
		o := m.out[it.entry.MessageID]
		if o == nil {
			continue // acknowledged meanwhile (a re-send crossing an ack)
		}
		o.attempts++
		o.leaseUntil = lease
		frames = append(frames, o.frame)
	}
	m.mu.Unlock()
	n := 0
	for _, f := range frames {
		if m.conn.Enqueue(f) {
			n++
		} else {
			e.enqF.Add(1)
		}
	}
	return n
}

func (e *Engine) observe(path string, items []item) {
	if e.cfg.OnDelivered == nil {
		return
	}
	now := e.now()
	for _, it := range items {
		if !it.sentAt.IsZero() {
			e.cfg.OnDelivered(path, now.Sub(it.sentAt))
		}
	}
}

// Broadcast queues frame to every connection of users, except skip, on
// this process and, with a shared index, on the other processes of the
// fleet (best effort).
func (e *Engine) Broadcast(users []string, frame []byte, skip *Member) {
	e.publishBroadcast(users, frame)
	e.broadcastHere(users, frame, skip)
}

// onBroadcast queues frame to this process's connections of users (a
// broadcast from another process).
func (e *Engine) onBroadcast(users []string, frame []byte) { e.broadcastHere(users, frame, nil) }

func (e *Engine) broadcastHere(users []string, frame []byte, skip *Member) {
	e.mu.RLock()
	var targets []*Member
	for _, u := range users {
		for _, m := range e.byUser[u] {
			if m != skip {
				targets = append(targets, m)
			}
		}
	}
	e.mu.RUnlock()
	for _, m := range targets {
		m.conn.Enqueue(frame)
	}
}

func (e *Engine) membersOf(user string) []*Member {
	e.mu.RLock()
	defer e.mu.RUnlock()
	devs := e.byUser[user]
	if len(devs) == 0 {
		return nil
	}
	out := make([]*Member, 0, len(devs))
	for _, m := range devs {
		out = append(out, m)
	}
	return out
}

// members is a snapshot of the registered connections.
func (e *Engine) members() []*Member {
	e.mu.RLock()
	defer e.mu.RUnlock()
	ms := make([]*Member, 0, len(e.byID))
	for _, m := range e.byID {
		ms = append(ms, m)
	}
	return ms
}

func (e *Engine) member(id string) *Member {
	e.mu.RLock()
	defer e.mu.RUnlock()
	return e.byID[id]
}

// Stats returns a snapshot of the counters.
func (e *Engine) Stats() Stats {
	e.mu.RLock()
	connected := len(e.byID)
	e.mu.RUnlock()
	e.statMu.Lock()
	defer e.statMu.Unlock()
	s := e.stats
	s.Withdrawals = cloneMap(e.stats.Withdrawals)
	s.Rebuilds = cloneMap(e.stats.Rebuilds)
	s.SafeLine = cloneMap(e.stats.SafeLine)
	s.Connected = connected
	s.FastDeliveries = e.fast.Load()
	s.PollDeliveries = e.polled.Load()
	s.Redeliveries = e.redel.Load()
	s.FastShed = e.shed.Load()
	s.Acks = e.acks.Load()
	s.EnqueueFailures = e.enqF.Load()
	s.Deferred = e.deferred.Load()
	e.lagMu.Lock()
	s.Behind = len(e.lagging)
	e.lagMu.Unlock()
	return s
}

func cloneMap[K comparable, V any](m map[K]V) map[K]V {
	out := make(map[K]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}
