package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"
	"golang.org/x/time/rate"

	"github.com/tetra-messenger/tetra/workload/protocol"
)

// State is the connection state reported to Config.OnState.
type State int

// Connection states, in the order a client normally goes through them.
const (
	// StateConnecting: no connection yet (initial attempts, retried with
	// backoff).
	StateConnecting State = iota
	// StateConnected: hello received; the history sync is running.
	StateConnected
	// StateSynced: the history sync that follows the (re)connect completed:
	// every message accepted before it started has been reported.
	StateSynced
	// StateReconnecting: the connection ended; the client waits out the
	// backoff and connects again.
	StateReconnecting
	// StateClosed: the client stopped for good (Close, the end of Run's
	// context, close 4001 without ReconnectOnSuperseded, or HTTP 401 on the
	// upgrade). Err says which.
	StateClosed
)

func (s State) String() string {
	switch s {
	case StateConnecting:
		return "connecting"
	case StateConnected:
		return "connected"
	case StateSynced:
		return "synced"
	case StateReconnecting:
		return "reconnecting"
	case StateClosed:
		return "closed"
	}
	return fmt.Sprintf("State(%d)", int(s))
}

// StateChange is one transition reported to Config.OnState.
type StateChange struct {
	State State
	// CloseCode is the WebSocket close code of the connection that ended
	// (for StateReconnecting and StateClosed): 4001..4004, 1001..., or -1
	// when it ended without a close frame (network error, write timeout).
	// 0 when no connection ended.
	CloseCode int
	// Err is the cause: the connection's error for StateReconnecting, the
	// terminal error for StateClosed (ErrClosed, ErrSuperseded, an *Error
	// with Status 401, or a context error).
	Err error
	// Hello is the server's hello, for StateConnected.
	Hello protocol.Hello
}

// Stats are cumulative counters since New, for the load generator. They
// are read atomically one by one, not as one snapshot.
type Stats struct {
	MessageFrames   int64 // message frames received, duplicates included
	Delivered       int64 // OnMessage calls: new messageIds, live or from history
	FromHistory     int64 // of Delivered, those first found by a history sync
	DuplicateFrames int64 // message frames dropped as already seen (still acked)
	HistoryOverlap  int64 // history messages dropped as already seen (live or own sends)
	Connects        int64 // connections that reached hello
	Reconnects      int64 // of Connects, those after the first
	ConnectFailures int64 // connection attempts that failed (retried)
	Syncs           int64 // complete post-connect history syncs
	HistoryPages    int64 // history requests made by syncs
	SendsAccepted   int64 // sends answered accepted
	SendsRetried    int64 // send frames written again with the same correlationId
	SendErrors      int64 // sends that returned an *Error
	AckFrames       int64 // ack frames handed to the socket
	AckedIDs        int64 // message ids in those frames
	InFlight        int   // sends holding a maxInFlightSends slot now
	DedupeRecent    int   // ids held in the recent ring (<= DedupeWindow)
	DedupeUnsynced  int   // ids held beyond the per-chat cursors
}

type counters struct {
	messageFrames, delivered, fromHistory, duplicateFrames, historyOverlap atomic.Int64
	connects, reconnects, connectFailures, syncs, historyPages             atomic.Int64
	sendsAccepted, sendsRetried, sendErrors, ackFrames, ackedIDs           atomic.Int64
}

// Client is a connection to a tetra server that survives disconnections:
// it reconnects with backoff, resends unanswered sends with their original
// correlationId, pages history after every (re)connect and reports each
// message once. All methods are safe for concurrent use.
//
// A Client is started either by Dial, or by New followed by Run.
type Client struct {
	cfg     Config
	base    string // http(s) base URL, no trailing slash
	wsURL   string // without the token (see dialURL)
	tok     tokenState
	dd      *dedupe
	sem     semaphore
	limiter *rate.Limiter // nil when Config.DisableRateLimit

	cbMu       sync.Mutex   // serialises user callbacks
	inCallback atomic.Int32 // callbacks running (Close does not wait then)

	mu        sync.Mutex
	cur       *conn         // live connection (hello received), or nil
	ready     chan struct{} // closed when cur is set; replaced when it is lost
	hello     protocol.Hello
	state     State
	lastErr   error // last connection failure, for WaitConnected
	term      error // set once the client stopped for good
	started   bool
	byClose   bool // stopped by Close
	cancelRun context.CancelFunc

	stop     chan struct{} // closed once term is set
	stopOnce sync.Once
	runDone  chan struct{} // closed when Run returns
	syncKick chan struct{} // a chat needs a catch-up sync

	st counters
}

// New validates cfg, applies the defaults and returns a Client that does
// nothing until Run is called. Errors name the bad Config field.
func New(cfg Config) (*Client, error) {
	cfg, base, wsURL, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	c := &Client{
		cfg:      cfg,
		base:     base.String(),
		wsURL:    wsURL,
		dd:       newDedupe(cfg.DedupeWindow, cfg.MaxUnsyncedPerChat, cfg.InitialCursors),
		ready:    make(chan struct{}),
		stop:     make(chan struct{}),
		runDone:  make(chan struct{}),
		syncKick: make(chan struct{}, 1),
	}
	if !cfg.DisableRateLimit {
		c.limiter = rate.NewLimiter(rate.Inf, 1)
	}
	c.tok.set(cfg.Token)
	return c, nil
}

// Dial creates a client, starts it in the background and waits until its
// first connection is up (hello received). ctx bounds only that wait: the
// client then runs until Close. Dial retries failed connection attempts
// with backoff until ctx ends, except HTTP 401, which it returns at once as
// an *Error. On failure the client is closed.
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	c, err := New(cfg)
	if err != nil {
		return nil, err
	}
	go func() { _ = c.Run(context.Background()) }() // the outcome is kept as the terminal error
	if err := c.WaitConnected(ctx); err != nil {
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// Run connects and keeps the client connected until ctx ends, Close is
// called or the client stops for good; it returns nil after Close,
// ctx.Err() when ctx ended, ErrSuperseded after close 4001 (unless
// Config.ReconnectOnSuperseded), or an *Error with Status 401 when the
// server refuses the token. Run may be called once.
func (c *Client) Run(ctx context.Context) error {
	c.mu.Lock()
	if c.started {
		c.mu.Unlock()
		return errors.New("client: Run called twice")
	}
	c.started = true
	if c.term != nil { // closed before Run
		c.mu.Unlock()
		close(c.runDone)
		return nil
	}
	runCtx, cancel := context.WithCancel(ctx)
	c.cancelRun = cancel
	c.mu.Unlock()
	defer close(c.runDone)
	defer cancel()

	code, err := c.loop(runCtx)
	if err == nil {
		err = ErrClosed
	}
	term := c.terminate(err)
	c.emitState(StateChange{State: StateClosed, CloseCode: code, Err: term})
	switch {
	case c.closedByUser():
		return nil
	case errors.Is(term, ErrClosed) && ctx.Err() != nil:
		return ctx.Err()
	}
	return term
}

func (c *Client) closedByUser() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.byClose
}

// terminate records the terminal error (the first one wins) and wakes every
// waiter.
func (c *Client) terminate(err error) error {
	c.mu.Lock()
	if c.term == nil {
		c.term = err
	}
	c.state = StateClosed
	term := c.term
	c.mu.Unlock()
	c.stopOnce.Do(func() { close(c.stop) })
	return term
}

// Close stops the client: it closes the live connection with 1000, fails
// waiting calls with ErrClosed and waits for the client's goroutines to
// exit — except when called from a callback (or while one is running), when
// it returns at once and the goroutines exit right after. Close is
// idempotent and always returns nil.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.term == nil {
		c.term = ErrClosed
		c.byClose = true
	}
	started, cancel := c.started, c.cancelRun
	c.mu.Unlock()
	c.stopOnce.Do(func() { close(c.stop) })
	if cancel != nil {
		cancel()
	}
	if started && c.inCallback.Load() == 0 {
		<-c.runDone
	}
	return nil
}

// WaitConnected waits until the client has a live connection (hello
// received). It returns the terminal error if the client stopped, or ctx's
// error wrapped with the last connection failure.
func (c *Client) WaitConnected(ctx context.Context) error {
	_, err := c.waitConn(ctx)
	if err != nil && ctx.Err() != nil {
		c.mu.Lock()
		last := c.lastErr
		c.mu.Unlock()
		if last != nil {
			return fmt.Errorf("client: not connected: %w (last attempt: %v)", ctx.Err(), last)
		}
	}
	return err
}

// waitConn returns the live connection, waiting for one if needed.
func (c *Client) waitConn(ctx context.Context) (*conn, error) {
	for {
		c.mu.Lock()
		cn, ready, term := c.cur, c.ready, c.term
		c.mu.Unlock()
		if term != nil {
			return nil, term
		}
		if cn != nil {
			return cn, nil
		}
		select {
		case <-ready:
		case <-c.stop:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Hello returns the hello frame of the current (or last) connection; the
// zero Hello before the first connection.
func (c *Client) Hello() protocol.Hello {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.hello
}

// Limits returns the limits of the current (or last) connection's hello.
func (c *Client) Limits() protocol.Limits { return c.Hello().Limits }

// State returns the current connection state.
func (c *Client) State() State {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.state
}

// Cursors returns, per chat, the last messageId processed from history (in
// commit order). Saved and passed back as Config.InitialCursors, they let a
// later run resume without a full sync. Cursors move only with history
// pages, so a run that starts from them reports again the messages this
// run received live after them (at most MaxUnsyncedPerChat per chat): the
// dedupe memory is not persisted.
func (c *Client) Cursors() map[string]string { return c.dd.cursors() }

// Stats returns the client's counters.
func (c *Client) Stats() Stats {
	recent, unsynced := c.dd.sizes()
	return Stats{
		MessageFrames:   c.st.messageFrames.Load(),
		Delivered:       c.st.delivered.Load(),
		FromHistory:     c.st.fromHistory.Load(),
		DuplicateFrames: c.st.duplicateFrames.Load(),
		HistoryOverlap:  c.st.historyOverlap.Load(),
		Connects:        c.st.connects.Load(),
		Reconnects:      c.st.reconnects.Load(),
		ConnectFailures: c.st.connectFailures.Load(),
		Syncs:           c.st.syncs.Load(),
		HistoryPages:    c.st.historyPages.Load(),
		SendsAccepted:   c.st.sendsAccepted.Load(),
		SendsRetried:    c.st.sendsRetried.Load(),
		SendErrors:      c.st.sendErrors.Load(),
		AckFrames:       c.st.ackFrames.Load(),
		AckedIDs:        c.st.ackedIDs.Load(),
		InFlight:        c.sem.inUse(),
		DedupeRecent:    recent,
		DedupeUnsynced:  unsynced,
	}
}

// loop is Run's body: connect, serve, back off, again. It returns the close
// code of the last connection and the terminal error (nil when ctx ended).
func (c *Client) loop(ctx context.Context) (int, error) {
	attempt := 0
	refused := 0 // upgrades answered 401 in a row
	for {
		c.freshForDial(ctx)
		cn, err := c.connect(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return 0, nil
			}
			c.st.connectFailures.Add(1)
			c.mu.Lock()
			c.lastErr = err
			c.mu.Unlock()
			var e *Error
			if errors.As(err, &e) && e.Status == http.StatusUnauthorized {
				// The token will not get better by itself; a new one from
				// TokenRefresh may (once: a second 401 in a row stops).
				if refused++; refused > 1 || !c.renewAfterRefusal(ctx) {
					return 0, err
				}
			}
			c.emitError(err)
			if !sleep(ctx, nil, backoff(c.cfg.BackoffMin, c.cfg.BackoffMax, attempt)) {
				return 0, nil
			}
			attempt++
			continue
		}
		refused = 0
		if c.st.connects.Add(1) > 1 {
			c.st.reconnects.Add(1)
		}
		synced := c.serve(ctx, cn)
		code, cerr := cn.closeCode, cn.closeErr // set before cn.done closed
		if ctx.Err() != nil {
			return code, nil
		}
		if synced {
			attempt = 0
		}
		if code == protocol.CloseSuperseded && !c.cfg.ReconnectOnSuperseded {
			return code, ErrSuperseded
		}
		c.setState(StateChange{State: StateReconnecting, CloseCode: code, Err: cerr})
		if !sleep(ctx, nil, backoff(c.cfg.BackoffMin, c.cfg.BackoffMax, attempt)) {
			return code, nil
		}
		attempt++
	}
}

// serve installs cn, runs the post-connect history sync (retried with
// backoff while cn lives) and catch-up syncs, and returns when cn ended
// (after its goroutines exited) or ctx ended (after closing cn with 1000).
// It reports whether a post-connect sync completed.
func (c *Client) serve(ctx context.Context, cn *conn) (synced bool) {
	c.install(cn)

	syncCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	stopAfter := context.AfterFunc(cn.ctx, cancel) // the sync belongs to this connection
	defer stopAfter()

	due := true // a full sync is due
	failures := 0
	var retry <-chan time.Time // unreferenced timers are collected (Go 1.23+)

	// Token refresh (Config.TokenRefresh): a timer to the next refresh,
	// one TokenRefresh call at a time on its own goroutine.
	var refreshAt <-chan time.Time
	refreshDone := make(chan refreshResult, 1)
	refreshing, refreshFailures := false, 0
	scheduleRefresh := func() {
		_, exp := c.tok.get()
		refreshAt = nil
		if d, ok := c.refreshIn(exp); ok {
			refreshAt = time.After(d)
		}
	}
	scheduleRefresh()
	defer func() {
		if refreshing {
			<-refreshDone // syncCtx is cancelled: TokenRefresh returns soon
		}
	}()
	for {
		if due {
			due = false
			if err := c.resync(syncCtx); err != nil {
				if syncCtx.Err() == nil {
					c.emitError(err)
					retry = time.After(backoff(c.cfg.BackoffMin, c.cfg.BackoffMax, failures))
					failures++
				}
			} else {
				synced = true
				c.st.syncs.Add(1)
				c.setState(StateChange{State: StateSynced, Hello: cn.hello})
			}
		}
		select {
		case <-cn.done:
			cn.wg.Wait()
			return synced
		case <-ctx.Done():
			cn.flushAcksNow()
			_ = cn.ws.Close(websocket.StatusNormalClosure, "client closing")
			<-cn.done
			cn.wg.Wait()
			return synced
		case <-retry:
			retry = nil
			due = true
		case <-c.syncKick:
			if retry == nil { // a full sync pending covers the catch-up
				c.catchUp(syncCtx)
			}
		case <-refreshAt:
			refreshAt, refreshing = nil, true
			go c.refreshOnConn(syncCtx, cn, refreshDone)
		case r := <-refreshDone:
			refreshing = false
			if r.err != nil {
				if syncCtx.Err() == nil {
					c.emitError(r.err)
					refreshAt = time.After(backoff(c.cfg.BackoffMin, c.cfg.BackoffMax, refreshFailures))
					refreshFailures++
				}
			} else {
				refreshFailures = 0
				scheduleRefresh()
			}
		}
	}
}

// install makes cn the live connection and applies its hello's limits.
func (c *Client) install(cn *conn) {
	l := cn.hello.Limits
	c.sem.setLimit(l.MaxInFlightSends)
	if c.limiter != nil {
		if l.SendsPerSecond > 0 {
			burst := c.cfg.SendBurst
			if burst == 0 {
				burst = l.SendsPerSecond
			}
			c.limiter.SetBurst(burst)
			c.limiter.SetLimit(rate.Limit(l.SendsPerSecond))
		} else {
			c.limiter.SetLimit(rate.Inf)
		}
	}
	c.mu.Lock()
	if cn.ended {
		// The server closed it between hello and here (a refusal such as
		// 1013): it never becomes the live connection, and the ready
		// channel stays open for the next one (closing it here made the
		// next install close it twice, a panic).
		c.mu.Unlock()
		return
	}
	c.cur = cn
	c.hello = cn.hello
	c.lastErr = nil
	close(c.ready)
	c.mu.Unlock()
	c.setState(StateChange{State: StateConnected, Hello: cn.hello})
}

// connDown forgets cn as the live connection. Called by cn's reader before
// it closes cn.done.
func (c *Client) connDown(cn *conn) {
	c.mu.Lock()
	cn.ended = true
	if c.cur == cn {
		c.cur = nil
		c.ready = make(chan struct{})
	}
	c.mu.Unlock()
}

// setState records a state and reports it (StateClosed is reported by Run).
func (c *Client) setState(sc StateChange) {
	c.mu.Lock()
	if c.state == StateClosed {
		c.mu.Unlock()
		return
	}
	c.state = sc.State
	c.mu.Unlock()
	c.emitState(sc)
}

func (c *Client) emitState(sc StateChange) {
	if f := c.cfg.OnState; f != nil {
		c.callback(func() { f(sc) })
	}
}

func (c *Client) emitError(err error) {
	if f := c.cfg.OnError; f != nil {
		c.callback(func() { f(err) })
	}
}

func (c *Client) deliver(m protocol.Message) {
	m.Type = protocol.TypeMessage
	if f := c.cfg.OnMessage; f != nil {
		c.callback(func() { f(m) })
	}
}

// callback runs a user callback, one at a time.
func (c *Client) callback(f func()) {
	c.cbMu.Lock()
	c.inCallback.Add(1)
	defer func() {
		c.inCallback.Add(-1)
		c.cbMu.Unlock()
	}()
	f()
}

// kickSync asks the serve loop for a catch-up sync.
func (c *Client) kickSync() {
	select {
	case c.syncKick <- struct{}{}:
	default:
	}
}

// renewAfterRefusal asks TokenRefresh for a new token after the upgrade
// was answered 401 and reports whether it got one other than the refused
// token (then the client retries instead of stopping).
func (c *Client) renewAfterRefusal(ctx context.Context) bool {
	if c.cfg.TokenRefresh == nil {
		return false
	}
	old, _ := c.tok.get()
	tok, err := c.fetchToken(ctx)
	if err != nil {
		c.emitError(err)
		return false
	}
	return tok != old
}

// redact hides the token in errors that may quote the upgrade URL.
func (c *Client) redact(err error) error {
	if err == nil || !c.cfg.TokenInQuery {
		return err
	}
	tok, _ := c.tok.get()
	return &redactedError{err: err, token: url.QueryEscape(tok)}
}

type redactedError struct {
	err   error
	token string
}

func (e *redactedError) Error() string {
	return strings.ReplaceAll(e.err.Error(), e.token, "REDACTED")
}

func (e *redactedError) Unwrap() error { return e.err }
