package ingest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/tetra-messenger/tetra/workload/history"
)

// ErrOverloaded: the inbound queue is full or the pipeline is stopped; the
// send was not queued.
var ErrOverloaded = errors.New("ingest: overloaded")

// Config sizes the pipeline. Zero fields take the defaults.
type Config struct {
	QueueSize int // inbound queue capacity; default 8000
	// BatchSize is the drafts per transaction; default 72. BatchWait is the
	// longest wait to fill a batch; default 10 ms. The wait is skipped
	// while sends arrive BatchWait or more apart (a lone send commits at
	// once: see arrivalGaps). The paper's 36 / 5 ms fill a pool of
	// connections; the store here commits one transaction at a time, whose
	// fixed cost (BEGIN, the fsync, the pages every commit writes) a larger
	// batch shares: docs/benchmarks.md, "fifth pass".
	BatchSize int
	BatchWait time.Duration
	// MaxBatch caps a batch when a backlog is already queued: after
	// BatchSize (or BatchWait), the committer also takes what is waiting,
	// without waiting further, up to MaxBatch; default 8 x BatchSize. So
	// under load one fsync carries more messages instead of the queue
	// growing. Set it equal to BatchSize to turn this off.
	MaxBatch      int
	ReadQueueSize int           // read receipt queue; default 8000
	ReadBatchSize int           // receipts per transaction; default 64
	ReadBatchWait time.Duration // default 10 ms
	// StoreTimeout is the longest a send waits for its answer, from the
	// moment Submit queued it: a send still queued at its deadline is
	// answered ErrUnavailable without being tried, and each transaction
	// runs until the deadline of its oldest send (so a store that hangs
	// answers every send within StoreTimeout, never after the commits
	// queued before it). It also bounds each SaveReads call. Default
	// DefaultStoreTimeout (5 s); the server's --store-timeout.
	StoreTimeout time.Duration
}

// The group commit's defaults (Config.BatchSize, Config.BatchWait).
const (
	DefaultBatchSize = 72
	DefaultBatchWait = 10 * time.Millisecond
)

// DefaultStoreTimeout is Config.StoreTimeout's default.
const DefaultStoreTimeout = 5 * time.Second

// ErrTimeout is wrapped by the error Done gets when a send reached its
// StoreTimeout deadline before its commit could start; it wraps
// history.ErrUnavailable too (the send was not stored: answer overloaded).
var ErrTimeout = fmt.Errorf("ingest: send waited its whole store timeout in the queue: %w", history.ErrUnavailable)

// Defaults fills zero fields.
func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.QueueSize, 8000)
	def(&c.BatchSize, DefaultBatchSize)
	defD(&c.BatchWait, DefaultBatchWait)
	def(&c.MaxBatch, 8*c.BatchSize)
	c.MaxBatch = max(c.MaxBatch, c.BatchSize)
	def(&c.ReadQueueSize, 8000)
	def(&c.ReadBatchSize, 64)
	defD(&c.ReadBatchWait, 10*time.Millisecond)
	defD(&c.StoreTimeout, DefaultStoreTimeout)
	return c
}

// Request is one send in the pipeline. Done is called exactly once, from the
// committer goroutine, with the commit's result for this draft, or with a
// non-nil error (wrapping history.ErrUnavailable) when the batch failed or
// the send reached its deadline (Config.StoreTimeout) first. Done must not
// block.
type Request struct {
	Draft history.Draft
	Done  func(res history.Result, err error)

	deadline time.Time // set by Submit: queue time + StoreTimeout
}

// ReadRequest is one read receipt in the pipeline. Done, when not nil, is
// called exactly once, from the read batcher, with nil once the receipt is
// saved, or with the error that dropped it: wrapping history.ErrInvalid
// when the store refused this receipt (the others of its batch are saved
// all the same), or history.ErrUnavailable when the store failed. Done must
// not block.
type ReadRequest struct {
	Read history.Read
	Done func(err error)
}

// Hooks observe the pipeline. Any field may be nil.
type Hooks struct {
	// Committed is called after each successful commit with the batch size
	// and the transaction's duration.
	Committed func(n int, took time.Duration)
	// Failed is called after a failed commit.
	Failed func(n int, err error)
	// ReadFailed is called once per read receipt that was dropped, with
	// the error its Done got.
	ReadFailed func(err error)
}

// Pipeline is the accept pipeline. Start it once; Stop drains it.
type Pipeline struct {
	cfg     Config
	store   history.Store
	handoff func([]history.Result)
	reads   func([]history.Read)
	hooks   Hooks
	log     *slog.Logger

	mu      sync.RWMutex // guards closed against Submit racing Stop
	closed  bool
	in      chan Request
	readsIn chan ReadRequest
	wg      sync.WaitGroup
	stopped chan struct{}
}

// New builds a pipeline over store. handoff receives every committed batch's
// results (after the Done callbacks ran) and hands them to live delivery;
// reads receives every saved batch of read receipts. Both must not block for
// long; either may be nil.
func New(store history.Store, cfg Config, handoff func([]history.Result), reads func([]history.Read), hooks Hooks, log *slog.Logger) (*Pipeline, error) {
	if store == nil {
		return nil, errors.New("ingest: nil history store")
	}
	if log == nil {
		log = slog.Default()
	}
	cfg = cfg.withDefaults()
	return &Pipeline{
		cfg: cfg, store: store, handoff: handoff, reads: reads, hooks: hooks, log: log,
		in:      make(chan Request, cfg.QueueSize),
		readsIn: make(chan ReadRequest, cfg.ReadQueueSize),
		stopped: make(chan struct{}),
	}, nil
}

// Start launches the committer and the read batcher.
func (p *Pipeline) Start() {
	p.wg.Add(2)
	go p.commitLoop()
	go p.readLoop()
}

// Submit queues a send without blocking. It returns ErrOverloaded when the
// queue is full or the pipeline is stopped; Done is then never called.
func (p *Pipeline) Submit(r Request) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return ErrOverloaded
	}
	r.deadline = time.Now().Add(p.cfg.StoreTimeout)
	select {
	case p.in <- r:
		return nil
	default:
		return ErrOverloaded
	}
}

// SubmitRead queues a read receipt without blocking. It returns
// ErrOverloaded when the queue is full or the pipeline is stopped; Done is
// then never called. Receipts are saved in batches (ReadBatchSize,
// ReadBatchWait); a receipt the store refuses fails alone (see ReadRequest).
func (p *Pipeline) SubmitRead(r ReadRequest) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.closed {
		return ErrOverloaded
	}
	select {
	case p.readsIn <- r:
		return nil
	default:
		return ErrOverloaded
	}
}

// Depth is the number of sends waiting in the inbound queue.
func (p *Pipeline) Depth() int { return len(p.in) }

// Stop refuses new sends, commits everything already queued, and returns
// when the committer has finished or ctx ends. Idempotent.
func (p *Pipeline) Stop(ctx context.Context) error {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.in)
		close(p.readsIn)
	}
	p.mu.Unlock()
	done := make(chan struct{})
	go func() { p.wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("ingest: stop: %w", ctx.Err())
	}
}

func (p *Pipeline) commitLoop() {
	defer p.wg.Done()
	batch := make([]Request, 0, p.cfg.MaxBatch)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	var gaps arrivalGaps
	for {
		first, ok := <-p.in
		if !ok {
			return
		}
		gaps.observe(first.deadline, p.cfg.BatchWait)
		batch = append(batch[:0], first)
		open := true
		if !gaps.sparse(p.cfg.BatchWait) {
			timer.Reset(p.cfg.BatchWait)
		fill:
			for len(batch) < p.cfg.BatchSize {
				select {
				case r, ok := <-p.in:
					if !ok {
						open = false
						break fill
					}
					gaps.observe(r.deadline, p.cfg.BatchWait)
					batch = append(batch, r)
				case <-timer.C:
					break fill
				}
			}
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
		}
	backlog:
		for open && len(batch) < p.cfg.MaxBatch {
			select {
			case r, ok := <-p.in:
				if !ok {
					open = false
					break backlog
				}
				gaps.observe(r.deadline, p.cfg.BatchWait)
				batch = append(batch, r)
			default:
				break backlog
			}
		}
		p.commit(batch)
		if !open {
			return
		}
	}
}

// arrivalGaps estimates the time between consecutive sends, to tell the
// committer whether waiting BatchWait would gather company for a batch's
// first send. It is a moving average (weight 1/8 per send) of the gaps
// between the sends' queue times (deadline - StoreTimeout, so the
// difference of their deadlines), each gap counted as at most 2 x
// BatchWait: one long idle spell then weighs like a few quiet sends, and a
// burst after it is recognised within about five sends. It starts at zero
// (busy), so a fresh pipeline waits as it always did.
type arrivalGaps struct {
	last time.Time     // the deadline of the previous send; zero before the first
	avg  time.Duration // the moving average of the gaps
}

// observe counts a send whose deadline is d.
func (g *arrivalGaps) observe(d time.Time, wait time.Duration) {
	if !g.last.IsZero() {
		gap := min(max(d.Sub(g.last), 0), 2*wait)
		g.avg += (gap - g.avg) / 8
	}
	g.last = d
}

// sparse reports whether sends have been arriving BatchWait or more apart:
// on average no other send would arrive within the wait, so the batch's
// first send is committed at once instead of waiting alone (a lone send at
// a low rate costs its fsync either way).
func (g *arrivalGaps) sparse(wait time.Duration) bool { return g.avg >= wait }

func (p *Pipeline) commit(batch []Request) {
	// Sends past their deadline are answered without a try: the store is
	// slow or hangs, and their senders were promised an answer by now.
	now := time.Now()
	live := batch[:0:0]
	for _, r := range batch {
		if now.Before(r.deadline) {
			live = append(live, r)
			continue
		}
		r.Done(history.Result{}, ErrTimeout)
	}
	if expired := len(batch) - len(live); expired > 0 {
		p.log.Warn("sends reached their store timeout in the queue; answered overloaded", "sends", expired, "timeout", p.cfg.StoreTimeout)
	}
	if batch = live; len(batch) == 0 {
		return
	}
	drafts := make([]history.Draft, len(batch))
	deadline := batch[0].deadline
	for i, r := range batch {
		drafts[i] = r.Draft
		if r.deadline.Before(deadline) {
			deadline = r.deadline
		}
	}
	// The transaction may run until its oldest send's deadline.
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	start := time.Now()
	results, err := p.store.Commit(ctx, drafts)
	cancel()
	if err == nil && len(results) != len(batch) {
		err = fmt.Errorf("%w: store returned %d results for %d drafts", history.ErrUnavailable, len(results), len(batch))
	}
	if err != nil {
		p.log.Warn("group commit failed; senders get overloaded and may resend", "messages", len(batch), "err", err)
		if p.hooks.Failed != nil {
			p.hooks.Failed(len(batch), err)
		}
		for _, r := range batch {
			r.Done(history.Result{}, err)
		}
		return
	}
	if p.hooks.Committed != nil {
		p.hooks.Committed(len(batch), time.Since(start))
	}
	// persist -> ack -> hand-off (paper, "G1").
	for i, r := range batch {
		r.Done(results[i], nil)
	}
	if p.handoff != nil {
		p.handoff(results)
	}
}

func (p *Pipeline) readLoop() {
	defer p.wg.Done()
	batch := make([]ReadRequest, 0, p.cfg.ReadBatchSize)
	for {
		first, ok := <-p.readsIn
		if !ok {
			return
		}
		batch = append(batch[:0], first)
		deadline := time.NewTimer(p.cfg.ReadBatchWait)
		open := true
	fill:
		for len(batch) < p.cfg.ReadBatchSize {
			select {
			case r, ok := <-p.readsIn:
				if !ok {
					open = false
					break fill
				}
				batch = append(batch, r)
			case <-deadline.C:
				break fill
			}
		}
		deadline.Stop()
		if saved := p.saveReads(batch); len(saved) > 0 && p.reads != nil {
			p.reads(saved)
		}
		if !open {
			return
		}
	}
}

// saveReads saves batch and returns the receipts saved, in batch order.
// When the store refuses the batch with history.ErrInvalid (one receipt
// breaks a rule, and SaveReads saves nothing then), the batch is split in
// halves and each half saved on its own, down to the receipt at fault: one
// bad receipt among n costs about 2·log2(n) more calls, and nobody else's
// receipt is lost to it (PROTOCOL.md §3: nothing a client sends affects
// other clients). Any other error (the store is failing) drops the whole
// batch without more calls.
func (p *Pipeline) saveReads(batch []ReadRequest) []history.Read {
	reads := make([]history.Read, len(batch))
	for i, r := range batch {
		reads[i] = r.Read
	}
	ctx, cancel := context.WithTimeout(context.Background(), p.cfg.StoreTimeout)
	err := p.store.SaveReads(ctx, reads)
	cancel()
	switch {
	case err == nil:
		for _, r := range batch {
			if r.Done != nil {
				r.Done(nil)
			}
		}
		return reads
	case errors.Is(err, history.ErrInvalid) && len(batch) > 1:
		half := len(batch) / 2
		return append(p.saveReads(batch[:half]), p.saveReads(batch[half:])...)
	}
	if errors.Is(err, history.ErrInvalid) {
		p.log.Info("read receipt refused", "chat", reads[0].ChatID, "user", reads[0].UserID, "err", err)
	} else {
		p.log.Warn("read receipts not saved", "receipts", len(batch), "err", err)
	}
	for _, r := range batch {
		if p.hooks.ReadFailed != nil {
			p.hooks.ReadFailed(err)
		}
		if r.Done != nil {
			r.Done(err)
		}
	}
	return nil
}
