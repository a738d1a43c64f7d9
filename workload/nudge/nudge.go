package nudge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetra-messenger/tetra/workload/config"
	"github.com/tetra-messenger/tetra/workload/delivery"
)

// Defaults of Config.
const (
	DefaultBatchSize  = 100
	DefaultMaxDelay   = time.Second
	DefaultQueueSize  = 10000
	DefaultTimeout    = 5 * time.Second
	DefaultMinBackoff = 200 * time.Millisecond
	DefaultMaxBackoff = 30 * time.Second
	// MinSecretBytes is the shortest secret New accepts.
	MinSecretBytes = 16
)

// Config configures a Nudger. Zero fields take the defaults.
type Config struct {
	// URL is the webhook (http or https); required.
	URL string
	// Secret keys the HMAC-SHA256 signature; at least MinSecretBytes.
	Secret []byte
	// BatchSize is the most nudges per request (1..10000).
	BatchSize int
	// MaxDelay is the longest a queued nudge waits for its batch to fill
	// (1 ms..1 min).
	MaxDelay time.Duration
	// QueueSize bounds the nudges waiting to be sent (1..1,000,000): when
	// it is full the oldest queued nudge is dropped (counted).
	QueueSize int
	// Timeout bounds one request (100 ms..5 min).
	Timeout time.Duration
	// MinBackoff and MaxBackoff bound the exponential backoff between
	// attempts of one batch (with jitter: each wait is drawn from
	// [d/2, d) for d = min(MaxBackoff, MinBackoff*2^n)).
	MinBackoff, MaxBackoff time.Duration
	// Presence, when set, is the fleet's presence: an offline nudge is
	// sent only if the recipient has no connection on any process of the
	// fleet, and this process's connections are published to it. Nil: a
	// single process, whose own registry decides.
	Presence Presence
	// PresenceTTL is how long a published connection counts as present
	// without a refresh (a crashed process's connections count this long);
	// it is refreshed every third of it. Default 15 s.
	PresenceTTL time.Duration
	// OnBatch, when set, is called after each batch the receiver accepted
	// with its size and the time from its oldest nudge being queued to
	// the receiver's answer.
	OnBatch func(n int, latency time.Duration)
	// Client sends the requests; default an http.Client with Timeout that
	// follows no redirects.
	Client *http.Client
	Logger *slog.Logger
}

// Conn is a connection in the fleet's presence.
type Conn struct{ User, ID string }

// Presence is the fleet-wide set of connected users (the Redis index's
// presence keys). Methods are called from the Nudger's own goroutines.
type Presence interface {
	// Publish records live as connected until ttl from now and removes
	// gone.
	Publish(ctx context.Context, live, gone []Conn, ttl time.Duration) error
	// Online reports which of users have a connection present.
	Online(ctx context.Context, users []string) (map[string]bool, error)
}

func (c Config) withDefaults() Config {
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.MaxDelay == 0 {
		c.MaxDelay = DefaultMaxDelay
	}
	if c.QueueSize == 0 {
		c.QueueSize = DefaultQueueSize
	}
	if c.Timeout == 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MinBackoff == 0 {
		c.MinBackoff = DefaultMinBackoff
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.PresenceTTL == 0 {
		c.PresenceTTL = 15 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// Validate checks the settings (after defaults), naming the bad one.
func (c Config) Validate() error {
	c = c.withDefaults()
	if err := config.ValidateWebhookURL(c.URL); err != nil {
		return fmt.Errorf("nudge: --nudge-url: %w", err)
	}
	if len(c.Secret) < MinSecretBytes {
		return fmt.Errorf("nudge: the secret (--nudge-secret-file or TETRA_NUDGE_SECRET) must be at least %d bytes, got %d", MinSecretBytes, len(c.Secret))
	}
	switch {
	case c.BatchSize < 1 || c.BatchSize > 10000:
		return fmt.Errorf("nudge: --nudge-batch-size must be in [1, 10000], got %d", c.BatchSize)
	case c.MaxDelay < time.Millisecond || c.MaxDelay > time.Minute:
		return fmt.Errorf("nudge: --nudge-max-delay must be in [1ms, 1m], got %v", c.MaxDelay)
	case c.QueueSize < 1 || c.QueueSize > 1000000:
		return fmt.Errorf("nudge: --nudge-queue must be in [1, 1000000], got %d", c.QueueSize)
	case c.Timeout < 100*time.Millisecond || c.Timeout > 5*time.Minute:
		return fmt.Errorf("nudge: --nudge-timeout must be in [100ms, 5m], got %v", c.Timeout)
	case c.MinBackoff <= 0 || c.MaxBackoff < c.MinBackoff:
		return fmt.Errorf("nudge: backoff must satisfy 0 < min (%v) <= max (%v)", c.MinBackoff, c.MaxBackoff)
	}
	return nil
}

// Item is one nudge as the receiver gets it (docs/nudge.md).
type Item struct {
	// ID is stable per (messageId, recipient): ID(messageId, recipient).
	ID        string    `json:"id"`
	MessageID string    `json:"messageId"`
	ChatID    string    `json:"chatId"`
	SenderID  string    `json:"senderId"`
	Recipient string    `json:"recipient"`
	Reason    string    `json:"reason"`
	CloseCode int       `json:"closeCode,omitempty"`
	SentAt    time.Time `json:"sentAt"`
}

// Batch is a request body.
type Batch struct {
	Nudges []Item `json:"nudges"`
}

// Drop reasons (Stats.Dropped).
const (
	DropQueueFull = "queue_full"
	DropShutdown  = "shutdown"
	DropRejected  = "rejected" // the receiver answered 4xx (not 429): not retried
)

// Stats are the Nudger's counters since start (Depth is a gauge).
type Stats struct {
	Queued   int64            // nudges accepted into the queue
	Sent     int64            // nudges in batches the receiver answered 2xx
	Failed   int64            // nudges in attempts that failed and were retried (5xx, 429, network)
	Dropped  map[string]int64 // nudges given up, by reason
	Online   int64            // offline candidates skipped: connected on another process
	Requests int64            // requests made
	Depth    int              // nudges queued now
}

type entry struct {
	it       Item
	queuedAt time.Time
}

// Nudger sends the engine's nudges to the webhook. It implements
// delivery.NudgeSink: Nudge, Connected and Disconnected never block.
type Nudger struct {
	cfg    Config
	client *http.Client
	log    *slog.Logger

	mu      sync.Mutex
	ring    []entry // a ring of QueueSize
	head, n int
	wake    chan struct{}
	closing bool

	presMu   sync.Mutex
	conns    map[string]string // connID -> user, this process's
	added    []Conn
	gone     []Conn
	presWake chan struct{}

	cancel context.CancelFunc
	wg     sync.WaitGroup
	done   chan struct{}
	once   sync.Once

	queued, sent, failed, online, requests atomic.Int64
	dropMu                                 sync.Mutex
	dropped                                map[string]int64
}

var _ delivery.NudgeSink = (*Nudger)(nil)

// New validates cfg and returns a Nudger; call Start.
func New(cfg Config) (*Nudger, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	client := cfg.Client
	if client == nil {
		client = &http.Client{Timeout: cfg.Timeout, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
	return &Nudger{cfg: cfg, client: client, log: cfg.Logger, ring: make([]entry, cfg.QueueSize),
		wake: make(chan struct{}, 1), presWake: make(chan struct{}, 1), conns: map[string]string{},
		dropped: map[string]int64{}, done: make(chan struct{})}, nil
}

// Start starts the sender (and, with a Presence, the presence publisher).
func (x *Nudger) Start() {
	ctx, cancel := context.WithCancel(context.Background())
	x.cancel = cancel
	x.wg.Add(1)
	go x.sendLoop(ctx)
	if x.cfg.Presence != nil {
		x.wg.Add(1)
		go x.presenceLoop(ctx)
	}
}

// Stop sends what is queued, without waiting for batches to fill, until
// ctx ends or Config.Timeout passes (a receiver that is down must not hold
// a shutdown); then it drops the rest (counted as shutdown) and returns.
// Idempotent.
func (x *Nudger) Stop(ctx context.Context) {
	x.once.Do(func() {
		x.mu.Lock()
		x.closing = true
		x.mu.Unlock()
		x.signal()
		if x.cancel == nil {
			return
		}
		grace := time.NewTimer(x.cfg.Timeout)
		defer grace.Stop()
		select {
		case <-x.done:
		case <-ctx.Done():
		case <-grace.C:
		}
		x.cancel()
		x.wg.Wait()
		x.mu.Lock()
		n := x.n
		x.n = 0
		x.mu.Unlock()
		x.drop(DropShutdown, n)
	})
}

// Nudge queues ns; when the queue is full the oldest queued nudges are
// dropped (a push about a newer message is worth more than one about an
// older message of the same conversation). It never blocks.
func (x *Nudger) Nudge(ns []delivery.Nudge) {
	now := time.Now()
	dropped := 0
	x.mu.Lock()
	if x.closing {
		x.mu.Unlock()
		x.drop(DropShutdown, len(ns))
		return
	}
	for _, n := range ns {
		e := entry{it: Item{ID: ID(n.MessageID, n.Recipient), MessageID: n.MessageID, ChatID: n.ChatID, SenderID: n.SenderID,
			Recipient: n.Recipient, Reason: n.Reason, CloseCode: n.CloseCode, SentAt: n.SentAt.UTC()}, queuedAt: now}
		if x.n == len(x.ring) {
			x.head = (x.head + 1) % len(x.ring)
			x.n--
			dropped++
		}
		x.ring[(x.head+x.n)%len(x.ring)] = e
		x.n++
	}
	x.mu.Unlock()
	x.queued.Add(int64(len(ns)))
	x.drop(DropQueueFull, dropped)
	x.signal()
}

func (x *Nudger) signal() {
	select {
	case x.wake <- struct{}{}:
	default:
	}
}

func (x *Nudger) drop(reason string, n int) {
	if n <= 0 {
		return
	}
	x.dropMu.Lock()
	x.dropped[reason] += int64(n)
	x.dropMu.Unlock()
}

// Connected records a connection of this process for the fleet's presence.
func (x *Nudger) Connected(user, connID string) {
	if x.cfg.Presence == nil {
		return
	}
	x.presMu.Lock()
	x.conns[connID] = user
	x.added = append(x.added, Conn{User: user, ID: connID})
	x.presMu.Unlock()
	x.presSignal()
}

// Disconnected removes a connection of this process from the presence.
func (x *Nudger) Disconnected(user, connID string) {
	if x.cfg.Presence == nil {
		return
	}
	x.presMu.Lock()
	if _, ok := x.conns[connID]; ok {
		delete(x.conns, connID)
		x.gone = append(x.gone, Conn{User: user, ID: connID})
	}
	x.presMu.Unlock()
	x.presSignal()
}

func (x *Nudger) presSignal() {
	select {
	case x.presWake <- struct{}{}:
	default:
	}
}

// Stats returns a snapshot of the counters.
func (x *Nudger) Stats() Stats {
	x.mu.Lock()
	depth := x.n
	x.mu.Unlock()
	x.dropMu.Lock()
	d := make(map[string]int64, len(x.dropped))
	for k, v := range x.dropped {
		d[k] = v
	}
	x.dropMu.Unlock()
	return Stats{Queued: x.queued.Load(), Sent: x.sent.Load(), Failed: x.failed.Load(), Dropped: d,
		Online: x.online.Load(), Requests: x.requests.Load(), Depth: depth}
}

// take waits for a batch: BatchSize nudges, or the oldest queued nudge
// MaxDelay old, or (closing) whatever is queued. ok is false when ctx
// ended, or when closing and the queue is empty.
func (x *Nudger) take(ctx context.Context) (batch []entry, ok bool) {
	for {
		x.mu.Lock()
		n, closing := x.n, x.closing
		var wait time.Duration
		if n > 0 && n < x.cfg.BatchSize && !closing {
			wait = time.Until(x.ring[x.head].queuedAt.Add(x.cfg.MaxDelay))
		}
		if n > 0 && wait <= 0 {
			k := min(n, x.cfg.BatchSize)
			batch = make([]entry, k)
			for i := range k {
				batch[i] = x.ring[(x.head+i)%len(x.ring)]
				x.ring[(x.head+i)%len(x.ring)] = entry{}
			}
			x.head = (x.head + k) % len(x.ring)
			x.n -= k
			x.mu.Unlock()
			return batch, true
		}
		x.mu.Unlock()
		if n == 0 && closing {
			return nil, false
		}
		var t *time.Timer
		var timer <-chan time.Time
		if wait > 0 {
			t = time.NewTimer(wait)
			timer = t.C
		}
		select {
		case <-ctx.Done():
		case <-x.wake:
		case <-timer:
		}
		if t != nil {
			t.Stop()
		}
		if ctx.Err() != nil {
			return nil, false
		}
	}
}

func (x *Nudger) sendLoop(ctx context.Context) {
	defer x.wg.Done()
	defer close(x.done)
	for {
		batch, ok := x.take(ctx)
		if !ok {
			return
		}
		batch = x.filterOnline(ctx, batch)
		if len(batch) == 0 {
			continue
		}
		if !x.deliver(ctx, batch) {
			return
		}
	}
}

// filterOnline drops the offline nudges whose recipient is connected to a
// process of the fleet (never withdrawn ones). When the presence cannot be
// read the nudges are sent: a redundant push beats a missing one.
func (x *Nudger) filterOnline(ctx context.Context, batch []entry) []entry {
	if x.cfg.Presence == nil {
		return batch
	}
	var users []string
	seen := map[string]bool{}
	for _, e := range batch {
		if e.it.Reason == delivery.NudgeOffline && !seen[e.it.Recipient] {
			seen[e.it.Recipient] = true
			users = append(users, e.it.Recipient)
		}
	}
	if len(users) == 0 {
		return batch
	}
	cctx, cancel := context.WithTimeout(ctx, x.cfg.Timeout)
	online, err := x.cfg.Presence.Online(cctx, users)
	cancel()
	if err != nil {
		x.log.Warn("nudge: fleet presence unreadable; sending the offline nudges unfiltered", "err", err)
		return batch
	}
	out := batch[:0]
	for _, e := range batch {
		if e.it.Reason == delivery.NudgeOffline && online[e.it.Recipient] {
			x.online.Add(1)
			continue
		}
		out = append(out, e)
	}
	return out
}

// deliver posts batch until the receiver accepts it (2xx) or refuses it
// (4xx other than 429), retrying 5xx, 429 and network errors with backoff
// and jitter. It returns false when ctx ended first (the batch is dropped,
// counted as shutdown).
func (x *Nudger) deliver(ctx context.Context, batch []entry) bool {
	items := make([]Item, len(batch))
	oldest := batch[0].queuedAt
	for i, e := range batch {
		items[i] = e.it
		if e.queuedAt.Before(oldest) {
			oldest = e.queuedAt
		}
	}
	body, err := json.Marshal(Batch{Nudges: items})
	if err != nil {
		x.drop(DropRejected, len(batch))
		return true
	}
	for attempt := 0; ; attempt++ {
		status, err := x.post(ctx, body)
		switch {
		case err == nil && status >= 200 && status < 300:
			x.sent.Add(int64(len(batch)))
			if x.cfg.OnBatch != nil {
				x.cfg.OnBatch(len(batch), time.Since(oldest))
			}
			return true
		case err == nil && status != http.StatusTooManyRequests && status < 500:
			x.log.Warn("nudge: the receiver refused a batch; not retried", "status", status, "nudges", len(batch))
			x.drop(DropRejected, len(batch))
			return true
		}
		if ctx.Err() != nil {
			x.drop(DropShutdown, len(batch))
			return false
		}
		x.failed.Add(int64(len(batch)))
		wait := backoff(x.cfg.MinBackoff, x.cfg.MaxBackoff, attempt)
		x.log.Debug("nudge: batch failed; retrying", "status", status, "err", err, "attempt", attempt+1, "in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			x.drop(DropShutdown, len(batch))
			return false
		case <-t.C:
		}
	}
}

// backoff is the wait before attempt+2 of a batch: d = min(max,
// min*2^attempt), drawn from [d/2, d).
func backoff(lo, hi time.Duration, attempt int) time.Duration {
	d := hi
	if attempt < 30 {
		d = min(hi, lo<<attempt)
	}
	half := d / 2
	return half + rand.N(d-half+1)
}

func (x *Nudger) post(ctx context.Context, body []byte) (int, error) {
	x.requests.Add(1)
	cctx, cancel := context.WithTimeout(ctx, x.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(cctx, http.MethodPost, x.cfg.URL, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	ts := time.Now().Unix()
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "tetra-nudge/1")
	req.Header.Set(HeaderTimestamp, strconv.FormatInt(ts, 10))
	req.Header.Set(HeaderSignature, Sign(x.cfg.Secret, ts, body))
	resp, err := x.client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	resp.Body.Close()
	return resp.StatusCode, nil
}

func (x *Nudger) presenceLoop(ctx context.Context) {
	defer x.wg.Done()
	ticker := time.NewTicker(x.cfg.PresenceTTL / 3)
	defer ticker.Stop()
	for {
		full := false
		select {
		case <-ctx.Done():
			x.publish(context.Background(), true, true)
			return
		case <-x.presWake:
		case <-ticker.C:
			full = true
		}
		x.publish(ctx, full, false)
	}
}

// publish writes the presence changes (full: every connection of this
// process, refreshing its TTL; final: remove every connection).
func (x *Nudger) publish(ctx context.Context, full, final bool) {
	x.presMu.Lock()
	live, gone := x.added, x.gone
	x.added, x.gone = nil, nil
	if full {
		live = live[:0:0]
		for id, u := range x.conns {
			live = append(live, Conn{User: u, ID: id})
		}
	}
	if final {
		gone = append(gone, live...)
		live = nil
	}
	x.presMu.Unlock()
	if len(live) == 0 && len(gone) == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, x.cfg.Timeout)
	defer cancel()
	if err := x.cfg.Presence.Publish(cctx, live, gone, x.cfg.PresenceTTL); err != nil {
		if errors.Is(err, context.Canceled) {
			return
		}
		x.log.Warn("nudge: publish the fleet presence; retried at the next refresh", "err", err)
		if !full {
			x.presMu.Lock()
			x.gone = append(x.gone, gone...)
			x.presMu.Unlock()
		}
	}
}
