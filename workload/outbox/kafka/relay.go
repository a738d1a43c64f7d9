package kafka

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/outbox"
)

// RelayConfig configures a Relay. Zero fields take the defaults.
type RelayConfig struct {
	// Handoff, when set, receives the messages of every committed
	// transaction, after the commit, each with the records written for it
	// (recipient, partition, offset): the delivery engine's fast path. It
	// must not block for long.
	Handoff func([]outbox.Committed)
	// Batch is the most messages one transaction relays; default 256.
	Batch int
	// MaxRecords is the most records one transaction writes; default
	// 8192. A message with more members than that goes alone.
	MaxRecords int
	// Interval is how often history is read when nobody calls Wake;
	// default 250 ms. The accept pipeline wakes the relay after every
	// commit, so this only matters for commits of other processes.
	Interval time.Duration
	// TransactionTimeout is the Kafka transaction timeout and bounds one
	// transaction (produce and commit); default 10 s. The broker aborts a
	// transaction its producer left open for that long, which bounds how
	// long a crashed relay's records hold the last stable offset back when
	// no relay restarts to abort them at once. At most the broker's
	// transaction.max.timeout.ms.
	TransactionTimeout time.Duration
	// StoreTimeout bounds one history read; default 5 s.
	StoreTimeout time.Duration
	// RetryMin and RetryMax bound the wait before retrying after a
	// failure (doubling from RetryMin); defaults 100 ms and 5 s.
	RetryMin, RetryMax time.Duration
	// StandbyInterval is how often a fenced relay checks whether the relay
	// that fenced it still makes progress; default 2 s. It takes over when
	// the oldest unrelayed message stayed unrelayed for a whole interval.
	StandbyInterval time.Duration
	// Logger defaults to the log's logger.
	Logger *slog.Logger
}

func (c RelayConfig) withDefaults(l *Log) RelayConfig {
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
	def(&c.Batch, 256)
	def(&c.MaxRecords, 8192)
	defD(&c.Interval, 250*time.Millisecond)
	defD(&c.TransactionTimeout, 10*time.Second)
	defD(&c.StoreTimeout, 5*time.Second)
	defD(&c.RetryMin, 100*time.Millisecond)
	defD(&c.RetryMax, 5*time.Second)
	defD(&c.StandbyInterval, 2*time.Second)
	if c.Logger == nil {
		c.Logger = l.logger
	}
	return c
}

// RelayStats are a relay's counters since it was built.
type RelayStats struct {
	// Active: this process holds the transactional id and relays (false
	// while connecting, retrying or standing by).
	Active bool `json:"active"`
	// Cursor is the last history Seq this relay committed or read as
	// committed (-1 before the first session).
	Cursor       int64 `json:"cursor"`
	Transactions int64 `json:"transactions"`
	Records      int64 `json:"records"`
	Failures     int64 `json:"failures"`
	Fenced       int64 `json:"fenced"`
}

// Relay feeds the outbox topic from history: it reads history in Seq order
// from its durable cursor and, per transaction, writes one record per
// member of each message to the member's partition plus the advanced
// cursor to the cursor topic, and commits. See the package documentation
// for why this is exactly once. Start it once; Stop is idempotent.
type Relay struct {
	log    *Log
	feed   history.Feed
	cfg    RelayConfig
	logger *slog.Logger

	wake      chan struct{}
	stopping  chan struct{}
	done      chan struct{}
	startOnce sync.Once
	stopOnce  sync.Once
	started   atomic.Bool
	killCtx   context.Context
	kill      context.CancelFunc

	cursor atomic.Int64
	active atomic.Bool
	txns   atomic.Int64
	recs   atomic.Int64
	fails  atomic.Int64
	fenced atomic.Int64

	// beforeCommit, when set (tests), runs with the records produced and
	// the transaction open. An error aborts the transaction, except
	// errCrash, which leaves it open and ends the relay the way a killed
	// process would.
	beforeCommit func(ctx context.Context) error
}

// errCrash makes a test hook end the relay without aborting its open
// transaction.
var errCrash = errors.New("kafka: relay crashed (test)")

// NewRelay builds a relay that feeds log from feed.
func NewRelay(log *Log, feed history.Feed, cfg RelayConfig) (*Relay, error) {
	if log == nil {
		return nil, errors.New("kafka: NewRelay: nil log (open one with kafka.Open)")
	}
	if feed == nil {
		return nil, errors.New("kafka: NewRelay: nil history feed (the SQLite and PostgreSQL stores implement history.Feed)")
	}
	cfg = cfg.withDefaults(log)
	r := &Relay{
		log: log, feed: feed, cfg: cfg, logger: cfg.Logger,
		wake:     make(chan struct{}, 1),
		stopping: make(chan struct{}),
		done:     make(chan struct{}),
	}
	r.killCtx, r.kill = context.WithCancel(context.Background())
	r.cursor.Store(-1)
	return r, nil
}

// Start starts relaying in the background. Later calls do nothing.
func (r *Relay) Start() {
	r.startOnce.Do(func() {
		r.started.Store(true)
		go r.run()
	})
}

// Stop stops the relay: it lets a transaction in flight finish, bounded
// by ctx, then aborts it. Idempotent.
func (r *Relay) Stop(ctx context.Context) error {
	r.stopOnce.Do(func() { close(r.stopping) })
	if !r.started.Load() {
		return nil
	}
	select {
	case <-r.done:
		return nil
	case <-ctx.Done():
		r.kill()
		<-r.done
		return fmt.Errorf("kafka: relay stop: %w", ctx.Err())
	}
}

// Wake makes the relay read history now. It never blocks.
func (r *Relay) Wake() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Stats returns the relay's counters.
func (r *Relay) Stats() RelayStats {
	return RelayStats{
		Active: r.active.Load(), Cursor: r.cursor.Load(), Transactions: r.txns.Load(),
		Records: r.recs.Load(), Failures: r.fails.Load(), Fenced: r.fenced.Load(),
	}
}

func (r *Relay) stopped() bool {
	select {
	case <-r.stopping:
		return true
	default:
		return false
	}
}

// wait waits for d, a Wake or Stop; false on Stop.
func (r *Relay) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-r.stopping:
		return false
	case <-r.wake:
	case <-t.C:
	}
	return true
}

func (r *Relay) run() {
	defer close(r.done)
	backoff := r.cfg.RetryMin
	for !r.stopped() {
		progressed, err := r.session()
		if r.stopped() || errors.Is(err, errCrash) {
			return
		}
		if progressed {
			backoff = r.cfg.RetryMin
		}
		r.fails.Add(1)
		if isFenced(err) {
			r.fenced.Add(1)
			r.logger.Warn("outbox relay fenced: another process relays with the same transactional id; standing by",
				"transactionalID", r.log.cfg.TransactionalID, "err", err)
			r.standby()
			backoff = r.cfg.RetryMin
			continue
		}
		r.logger.Warn("outbox relay failed; history keeps every message, retrying", "in", backoff, "err", err)
		select {
		case <-r.stopping:
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, r.cfg.RetryMax)
	}
}

// ErrCursorAhead: the relay's committed cursor is beyond the highest
// history Seq; the topic was fed from another history store. The relay
// retries (and says so loudly) until an operator resets the cursor or
// points the server at a new topic.
var ErrCursorAhead = errors.New("kafka: relay cursor ahead of history")

func isFenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) || errors.Is(err, kerr.InvalidProducerEpoch)
}

// session runs one producer session: a new transactional client, whose
// producer id initialization fences any earlier holder of the
// transactional id and completes (aborts) what it left open; then the
// committed cursor, read with read_committed; then transactions until an
// error or Stop. progressed reports that it committed at least one.
func (r *Relay) session() (progressed bool, err error) {
	lc := r.log.cfg
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(lc.Brokers...),
		kgo.ClientID(lc.ClientID+"-relay"),
		kgo.TransactionalID(lc.TransactionalID),
		kgo.TransactionTimeout(r.cfg.TransactionTimeout),
		kgo.RecordDeliveryTimeout(r.cfg.TransactionTimeout),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
	)
	if err != nil {
		return false, fmt.Errorf("kafka: relay client: %w", err)
	}
	closeClient := sync.OnceFunc(cl.Close)
	defer closeClient()

	ctx, cancel := context.WithTimeout(r.killCtx, r.cfg.TransactionTimeout)
	_, _, err = cl.ProducerID(ctx)
	if err != nil {
		cancel()
		return false, fmt.Errorf("kafka: relay: initialize the transactional producer: %w", err)
	}
	cursor, found, err := r.log.readCursor(ctx, lc.TransactionalID)
	cancel()
	if err != nil {
		return false, fmt.Errorf("kafka: relay: read the committed cursor from %s: %w", lc.CursorTopic, err)
	}
	if fh, ok := r.feed.(history.FeedHead); ok && found {
		hctx, hcancel := context.WithTimeout(r.killCtx, r.cfg.TransactionTimeout)
		head, herr := fh.HistoryHead(hctx)
		hcancel()
		if herr != nil {
			return false, fmt.Errorf("kafka: relay: read the history head: %w", herr)
		}
		if cursor > head {
			r.logger.Error("outbox relay refuses to run: its cursor is ahead of history, so it would skip every new message; this topic was fed from another history store (a restored backup, or a new database on an old topic). Use a new topic, or reset the cursor (docs/kafka.md)",
				"topic", lc.Topic, "cursor", cursor, "historyHead", head)
			return false, fmt.Errorf("%w: cursor %d is ahead of the history head %d", ErrCursorAhead, cursor, head)
		}
	}
	r.cursor.Store(cursor)
	r.active.Store(true)
	defer r.active.Store(false)
	if found {
		r.logger.Info("outbox relay active", "topic", lc.Topic, "cursor", cursor)
	} else {
		r.logger.Info("outbox relay active; no cursor committed yet, relaying history from the beginning", "topic", lc.Topic, "cursorTopic", lc.CursorTopic)
	}
	for {
		n, more, err := r.pass(cl, closeClient)
		if err != nil {
			return progressed, err
		}
		if n > 0 {
			progressed = true
		}
		if more {
			if r.stopped() {
				return progressed, nil
			}
			continue // more is waiting
		}
		if !r.wait(r.cfg.Interval) {
			return progressed, nil
		}
	}
}

// pass relays the next batch of history in one transaction and returns
// how many messages it relayed and whether more may be waiting (a full
// batch). closeClient ends the session's client.
func (r *Relay) pass(cl *kgo.Client, closeClient func()) (n int, more bool, err error) {
	lc := r.log.cfg
	hctx, cancel := context.WithTimeout(r.killCtx, r.cfg.StoreTimeout)
	items, err := r.feed.HistoryAfter(hctx, r.cursor.Load(), r.cfg.Batch)
	cancel()
	if err != nil {
		return 0, false, fmt.Errorf("kafka: relay: read history: %w", err)
	}
	if len(items) == 0 {
		return 0, false, nil
	}
	more = len(items) == r.cfg.Batch
	total, k := 0, 0
	for k < len(items) {
		n := len(items[k].Members)
		if k > 0 && total+n > r.cfg.MaxRecords {
			break
		}
		total += n
		k++
	}
	more = more || k < len(items)
	items = items[:k]
	recs := make([]*kgo.Record, 0, total+1)
	for _, it := range items {
		for _, m := range it.Members {
			recs = append(recs, &kgo.Record{Topic: lc.Topic, Partition: r.log.PartitionOf(m), Key: []byte(m), Value: encodeRecord(m, it.Message)})
		}
	}
	next := items[len(items)-1].Message.Seq
	recs = append(recs, &kgo.Record{Topic: lc.CursorTopic, Partition: 0, Key: []byte(lc.TransactionalID), Value: encodeCursor(next)})

	ctx, cancel := context.WithTimeout(r.killCtx, r.cfg.TransactionTimeout)
	defer cancel()
	if err := cl.BeginTransaction(); err != nil {
		return 0, false, fmt.Errorf("kafka: relay: begin transaction: %w", err)
	}
	if err := produce(ctx, cl, closeClient, recs); err != nil {
		return 0, false, r.abort(cl, fmt.Errorf("kafka: relay: produce %d records: %w", len(recs), err))
	}
	if r.beforeCommit != nil {
		if err := r.beforeCommit(ctx); err != nil {
			if errors.Is(err, errCrash) {
				return 0, false, err
			}
			return 0, false, r.abort(cl, err)
		}
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		// The outcome may be unknown; the next session reads the cursor
		// as committed, so either way nothing is doubled or lost.
		return 0, false, r.abort(cl, fmt.Errorf("kafka: relay: commit: %w", err))
	}
	r.cursor.Store(next)
	r.txns.Add(1)
	r.recs.Add(int64(total))
	if r.cfg.Handoff != nil {
		batch := make([]outbox.Committed, len(items))
		i := 0
		for j, it := range items {
			rows := make([]history.Delivery, len(it.Members))
			for d, m := range it.Members {
				rows[d] = history.Delivery{Recipient: m, Partition: recs[i].Partition, Pos: recs[i].Offset}
				i++
			}
			batch[j] = outbox.Committed{Message: it.Message, Rows: rows}
		}
		r.cfg.Handoff(batch)
	}
	return len(items), more, nil
}

// produce writes recs and waits for every acknowledgement. An idempotent
// producer does not give up on records it may have sent, so with the
// brokers unreachable ProduceSync can wait past any deadline; when ctx
// ends first, produce closes the client (failing every buffered record)
// and the session ends. The next session's producer id initialization
// fences this producer and aborts what it left open.
func produce(ctx context.Context, cl *kgo.Client, closeClient func(), recs []*kgo.Record) error {
	done := make(chan error, 1)
	go func() { done <- cl.ProduceSync(ctx, recs...).FirstErr() }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		closeClient()
		<-done
		return fmt.Errorf("no acknowledgement in time; closed the producer: %w", ctx.Err())
	}
}

// abort tries to abort the open transaction and returns err, joined with
// the abort's error. The session ends after it either way: the next one
// fences this producer and aborts what is still open.
func (r *Relay) abort(cl *kgo.Client, err error) error {
	ctx, cancel := context.WithTimeout(r.killCtx, 2*time.Second)
	defer cancel()
	if aerr := cl.EndTransaction(ctx, kgo.TryAbort); aerr != nil {
		return errors.Join(err, fmt.Errorf("abort: %w", aerr))
	}
	return err
}

// standby waits until the relay that fenced this one stops making
// progress: until the oldest message after the committed cursor stayed
// there for a whole StandbyInterval. It returns early on Stop.
func (r *Relay) standby() {
	lastCursor, lastPending := int64(-1), int64(-1)
	for r.wait(r.cfg.StandbyInterval) {
		ctx, cancel := context.WithTimeout(r.killCtx, r.cfg.StoreTimeout)
		cursor, _, err := r.log.readCursor(ctx, r.log.cfg.TransactionalID)
		var items []history.Committed
		if err == nil {
			items, err = r.feed.HistoryAfter(ctx, cursor, 1)
		}
		cancel()
		if err != nil {
			continue
		}
		if len(items) == 0 {
			lastCursor, lastPending = cursor, -1
			continue
		}
		pending := items[0].Message.Seq
		if cursor == lastCursor && pending == lastPending {
			r.logger.Info("outbox relay taking over: the active relay made no progress", "cursor", cursor)
			return
		}
		lastCursor, lastPending = cursor, pending
	}
}
