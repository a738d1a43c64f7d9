package server

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/coder/websocket"
	"github.com/oklog/ulid/v2"
	"golang.org/x/time/rate"

	"github.com/tetra-messenger/tetra/workload/config"
	"github.com/tetra-messenger/tetra/workload/delivery"
	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/ingest"
	"github.com/tetra-messenger/tetra/workload/metrics"
	"github.com/tetra-messenger/tetra/workload/protocol"
)

// maxBadFrames is how many bad frames in a row close a connection with 1008.
const maxBadFrames = 20

// MaxDeviceLen bounds the device query parameter, in bytes.
const MaxDeviceLen = 64

func validDevice(d string) bool {
	if d == "" || len(d) > MaxDeviceLen || !utf8.ValidString(d) {
		return false
	}
	for _, r := range d {
		if r < 0x20 || r == 0x7f {
			return false
		}
	}
	return true
}

func (s *Server) handleWS(w http.ResponseWriter, r *http.Request) {
	if s.draining.Load() {
		writeError(w, protocol.CodeUnavailable, "server shutting down")
		return
	}
	// The query is parsed strictly first: the token may be in it, and a
	// device dropped by a lenient parse would silently become "default".
	q, ok := queryValues(w, r)
	if !ok {
		return
	}
	token := bearer(r)
	if token == "" {
		token = q.Get("token")
	}
	user, exp, err := s.signer.VerifyExpiry(token)
	if err != nil {
		writeError(w, protocol.CodeUnauthorized, "missing, malformed, expired or wrongly signed token")
		return
	}
	device := q.Get("device")
	if device == "" {
		device = "default"
	}
	if !validDevice(device) {
		writeError(w, protocol.CodeInvalid, "device must be 1..64 bytes of UTF-8 without control characters")
		return
	}
	if !s.admit(user) {
		writeErrorRetry(w, protocol.CodeRateLimited, "too many connections", connectRetryMs)
		return
	}
	if refuseUpgrade(w, r, s.cfg.AllowedOrigins) {
		s.release(user)
		return // JSON, not Accept's plain text (upgrade.go)
	}
	fanout := s.fanout.acquire(user, s.Tuning().FanoutPerSecond)
	c, err := websocket.Accept(w, r, &websocket.AcceptOptions{OriginPatterns: s.cfg.AllowedOrigins})
	if err != nil {
		s.fanout.release(user)
		s.release(user)
		return // Accept answered the client already
	}
	s.sessions.Add(1)
	sess := newSession(s, c, user, device)
	sess.cork, _ = r.Context().Value(corkKey{}).(*corkConn)
	sess.exp, sess.fanout = exp, fanout
	sess.run(func() {
		s.sessions.Done()
		s.fanout.release(user)
		s.release(user)
	})
}

func (s *Server) admit(user string) bool {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	if s.conns >= s.cfg.MaxConns || s.perUser[user] >= s.cfg.MaxConnsPerUser {
		return false
	}
	s.conns++
	s.perUser[user]++
	return true
}

func (s *Server) release(user string) {
	s.connMu.Lock()
	defer s.connMu.Unlock()
	s.conns--
	if s.perUser[user]--; s.perUser[user] <= 0 {
		delete(s.perUser, user)
	}
}

// session is one WebSocket connection. It implements delivery.Conn.
type session struct {
	srv    *Server
	ws     *websocket.Conn
	id     string
	user   string
	device string

	out        *outQueue
	closing    chan struct{}
	closeOnce  sync.Once
	closeCode  atomic.Int32
	closeWhy   atomic.Value // string
	writerGone chan struct{}
	// writerCtx ends with the writer (a context, so the reader can follow
	// it with context.AfterFunc instead of a goroutine per connection).
	writerCtx  context.Context
	writerDone context.CancelFunc

	cork     *corkConn // the connection under ws (cork.go); nil when not served through corkListener
	member   *delivery.Member
	inflight atomic.Int32
	// credits bounds the sends in flight for this connection: the
	// maxInFlightSends it connected with (at most maxSessionCredits), the
	// answers its outbound queue has room for. A live change of the knob
	// lowers it at once and raises it up to this bound; new connections
	// get the new value.
	credits int
	limiter *rate.Limiter
	fanout  *rate.Limiter // the user's outbox rows per second, shared by its connections (fanout.go)
	bad     int

	// The token's expiry (PROTOCOL.md §1): zero for a token without exp;
	// expiry closes the connection with 4005 when it passes. refresh moves
	// both (handleRefresh). Guarded by expMu.
	expMu  sync.Mutex
	exp    time.Time
	expiry *time.Timer
}

func newSession(s *Server, c *websocket.Conn, user, device string) *session {
	t := s.Tuning()
	wctx, wdone := context.WithCancel(context.Background())
	return &session{
		srv: s, ws: c, id: ulid.Make().String(), user: user, device: device,
		out:        newOutQueue(s.cfg.OutboundQueue, min(t.MaxInFlightSends, maxSessionCredits)),
		credits:    min(t.MaxInFlightSends, maxSessionCredits),
		closing:    make(chan struct{}),
		writerGone: make(chan struct{}),
		writerCtx:  wctx, writerDone: wdone,
		limiter: rate.NewLimiter(rate.Limit(t.SendsPerSecond), t.SendsPerSecond),
	}
}

func (c *session) ID() string     { return c.id }
func (c *session) User() string   { return c.user }
func (c *session) Device() string { return c.device }

// Enqueue implements delivery.Conn: message frames fill the queue up to
// answerReserve short of its capacity; beyond that they are left to
// re-delivery after the lease.
func (c *session) Enqueue(frame []byte) bool {
	select {
	case <-c.closing:
		return false
	default:
	}
	return c.out.pushMessage(frame)
}

// awaitRoom is the reader's backpressure: before it handles another frame
// (whose answer takes a slot), it waits while the queue is at the message
// limit, so a client that sends faster than it reads is slowed down instead
// of losing answers. After the write timeout it closes the connection
// (1008) and reports false.
func (c *session) awaitRoom(ctx context.Context) bool {
	if c.out.awaitRoom(ctx, c.closing, time.Now().Add(c.srv.cfg.WriteTimeout)) {
		return true
	}
	if ctx.Err() == nil {
		c.Close(protocol.ClosePolicy, "outbound queue full: the client does not read")
	}
	return false
}

// Close implements delivery.Conn: the writer flushes what is queued (up to
// a second) and then closes the socket with code.
func (c *session) Close(code int, reason string) {
	c.closeOnce.Do(func() {
		c.closeCode.Store(int32(code))
		c.closeWhy.Store(reason)
		close(c.closing)
	})
}

// send queues an answer or a control frame. Unlike a message frame (which
// the engine re-delivers after its lease), an answer has no second chance:
// when the queue is full (the client sends faster than it reads), the
// connection is closed with 1008 so the client reconnects and resends its
// unanswered sends with the same correlationId (PROTOCOL.md §3), which
// answers the original outcome.
func (c *session) send(frame any) {
	select {
	case <-c.closing:
		return
	default:
	}
	if !c.out.pushAnswer(protocol.Encode(frame)) {
		c.Close(protocol.ClosePolicy, "outbound queue full: the client does not read its answers")
	}
}

func (c *session) sendError(corr, code, msg string) {
	if corr != "" {
		c.srv.metrics.Refused(code)
	}
	c.send(protocol.ErrorFrame{Type: protocol.TypeError, CorrelationID: corr, Code: code, Message: msg})
}

// run sets the session up (hello, Register, the writer) on the calling
// goroutine, net/http's, and then serves it on a goroutine of its own,
// returning at once: the handshake, the token check and Register's store
// read grow a goroutine's stack to tens of KiB, which it keeps for as long
// as it lives, and a connection lives for hours (issue 22: 10,000 idle
// connections held 210 MB of stacks, more than their heap). The new
// goroutine starts small. done runs once the session is over.
func (c *session) run(done func()) {
	s := c.srv
	t := s.Tuning()
	c.ws.SetReadLimit(protocol.TransportLimit)
	ctx, cancel := context.WithCancel(context.Background())
	// hello is queued first, before the engine can queue any message
	// frame, but the writer starts only once Register has fixed the
	// connection's start position: a client that pages history as soon as
	// hello arrives then sees every message at or below that position, and
	// every later one is pushed. No gap between the two.
	c.send(protocol.Hello{Type: protocol.TypeHello, UserID: c.user, Device: c.device, ConnectionID: c.id,
		Limits: protocol.Limits{MaxBodyBytes: t.MaxBodyBytes, MaxInFlightSends: min(t.MaxInFlightSends, c.credits),
			SendsPerSecond: t.SendsPerSecond, PingIntervalMs: int(t.PingInterval / time.Millisecond),
			MaxPending: t.MaxPending, FanoutPerSecond: t.FanoutPerSecond}})
	rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
	m, err := s.engine.Register(rctx, c)
	rcancel()
	if err != nil && !errors.Is(err, delivery.ErrSuperseded) {
		c.out.discard() // refused before hello (PROTOCOL.md §7.8)
	}
	go c.writer(ctx)
	if errors.Is(err, delivery.ErrSuperseded) {
		c.Close(protocol.CloseSuperseded, "superseded by a newer connection of the same device")
		<-c.writerGone
		cancel()
		done()
		return
	}
	if err != nil {
		s.warnRefused.Warn(s.log, "connection refused: live delivery unavailable", "user", c.user, "err", err)
		c.Close(int(websocket.StatusTryAgainLater), "live delivery unavailable, retry")
		<-c.writerGone
		cancel()
		done()
		return
	}
	c.member = m
	s.noteConnection(c.user, c.device)
	s.presence.up(c.user, c.id)
	c.setExpiry(c.exp)
	c.startPinger(ctx)
	go func() {
		defer done()
		defer cancel()
		defer c.setExpiry(time.Time{})
		c.reader(ctx)
		s.engine.Unregister(m)
		s.presence.down(c.user, c.id)
		c.Close(int(websocket.StatusNormalClosure), "")
		<-c.writerGone
	}()
}

func (c *session) writer(ctx context.Context) {
	defer func() {
		close(c.writerGone)
		c.writerDone()
	}()
	// A write that takes longer than WriteTimeout closes the socket, which
	// fails the write. One reusable timer watches the write in progress: a
	// context with a deadline per frame cost a timer, a context and an
	// AfterFunc registration in coder/websocket per frame (6 % of the
	// server's CPU at 10,000 msg/s), and Write given a context that can
	// never end registers nothing.
	wt := c.srv.cfg.WriteTimeout
	// Times are monotonic: offsets from base (plus one, so 0 means none),
	// so a wall clock stepped back cannot hide a stuck write.
	base := time.Now()
	var writing atomic.Int64 // when the write in progress began: time.Since(base)+1; 0: none
	watchdog := time.AfterFunc(time.Hour, func() {
		if at := writing.Load(); at != 0 && time.Since(base)-time.Duration(at-1) >= wt {
			c.ws.CloseNow()
		}
	})
	watchdog.Stop()
	defer watchdog.Stop()
	never := context.WithoutCancel(ctx)
	guard := func(op func() error) bool {
		writing.Store(int64(time.Since(base)) + 1)
		watchdog.Reset(wt)
		err := op()
		writing.Store(0)
		watchdog.Stop()
		return err == nil
	}
	write := func(f []byte) bool {
		return guard(func() error { return c.ws.Write(never, websocket.MessageText, f) })
	}
	// batch writes f and, when more frames are queued already, those
	// too, corked into one write(2) (cork.go).
	batch := func(f []byte) bool {
		if c.cork == nil || c.out.len() == 0 {
			return write(f)
		}
		c.cork.cork()
		ok := c.ws.Write(never, websocket.MessageText, f) == nil
		for ok && c.cork.held() < maxCorkBytes {
			f, more := c.out.pop()
			if !more {
				break
			}
			ok = c.ws.Write(never, websocket.MessageText, f) == nil
		}
		return guard(c.cork.uncork) && ok
	}
	for {
		select {
		case <-c.out.ready():
			for {
				f, ok := c.out.pop()
				if !ok {
					break
				}
				if !batch(f) {
					c.Close(int(websocket.StatusGoingAway), "write failed")
					c.srv.metrics.WebSocketClosed(1006) // dropped without a close frame
					c.ws.CloseNow()
					return
				}
			}
		case <-c.closing:
			deadline := time.Now().Add(time.Second)
			for time.Now().Before(deadline) {
				f, ok := c.out.pop()
				if !ok || !write(f) {
					break
				}
			}
			// Counted before the close frame goes, so a client that saw it
			// finds it counted.
			c.srv.metrics.WebSocketClosed(int(c.closeCode.Load()))
			why, _ := c.closeWhy.Load().(string)
			done := make(chan struct{})
			go func() {
				_ = c.ws.Close(websocket.StatusCode(c.closeCode.Load()), truncate(why, 120))
				close(done)
			}()
			select {
			case <-done:
			case <-time.After(2 * time.Second):
				c.ws.CloseNow()
			}
			return
		}
	}
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// startPinger pings the client every ping interval until ctx ends or the
// session closes; a pong touches the member (the idle reaper judges
// silence). It runs on timers, not on a goroutine of its own: a goroutine
// exists only while a ping waits for its pong.
func (c *session) startPinger(ctx context.Context) {
	var mu sync.Mutex
	var timer *time.Timer
	stopped := false
	var tick func()
	schedule := func() {
		mu.Lock()
		defer mu.Unlock()
		if !stopped {
			timer = time.AfterFunc(c.srv.Tuning().PingInterval, tick)
		}
	}
	tick = func() {
		select {
		case <-ctx.Done():
			return
		case <-c.closing:
			return
		default:
		}
		pctx, cancel := context.WithTimeout(ctx, c.srv.Tuning().PingTimeout)
		err := c.ws.Ping(pctx)
		cancel()
		if err == nil {
			c.srv.engine.Touch(c.member)
		}
		// No pong: the idle reaper decides (delivery.IdleReaper).
		schedule()
	}
	schedule()
	context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		stopped = true
		if timer != nil {
			timer.Stop()
		}
	})
}

func (c *session) reader(ctx context.Context) {
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// Cancelling a Read closes the socket at once (coder/websocket), so the
	// reader must not stop on Close: that would race the writer's flush and
	// close frame, and clients would see the socket drop without the close
	// code. It keeps reading (and drops frames) until the writer is done;
	// the writer's close handshake ends the Read.
	//
	// Read gets a context that never ends (so coder/websocket registers no
	// AfterFunc per frame), and the writer's end closes the socket, which
	// ends the Read as cancelling it did.
	stop := context.AfterFunc(c.writerCtx, func() {
		cancel()
		c.ws.CloseNow()
	})
	defer stop()
	never := context.WithoutCancel(ctx)
	var buf bytes.Buffer
	for {
		typ, data, err := c.readFrame(never, &buf)
		if err != nil {
			if errors.Is(err, websocket.ErrMessageTooBig) {
				// The library has sent its close frame already; this
				// records the code.
				c.Close(protocol.CloseTooBig, "frame over the transport limit")
			}
			return
		}
		select {
		case <-c.closing:
			continue // closing: nothing more is handled or answered
		default:
		}
		c.srv.engine.Touch(c.member)
		if !c.awaitRoom(rctx) {
			continue // closing: the writer's close handshake ends the Read
		}
		if typ != websocket.MessageText {
			c.bad++
			c.sendError("", protocol.CodeInvalid, "frames must be JSON text messages")
		} else {
			c.handle(rctx, data)
		}
		if c.bad >= maxBadFrames {
			c.Close(protocol.ClosePolicy, "too many bad frames")
			return
		}
	}
}

// maxKeptReadBuffer is the largest read buffer a session keeps between
// frames; one grown by a bigger frame is dropped after it.
const maxKeptReadBuffer = 16 << 10

// readFrame is the socket's Read (coder/websocket's io.ReadAll of the next
// message, with its read limit) into buf, which the reader reuses for
// every frame instead of allocating one per frame: data is buf's bytes,
// valid until the next call (handle copies what it keeps).
func (c *session) readFrame(ctx context.Context, buf *bytes.Buffer) (websocket.MessageType, []byte, error) {
	if buf.Cap() > maxKeptReadBuffer {
		*buf = bytes.Buffer{}
	}
	buf.Reset()
	typ, r, err := c.ws.Reader(ctx)
	if err != nil {
		return 0, nil, err
	}
	if _, err := buf.ReadFrom(r); err != nil {
		return 0, nil, err
	}
	return typ, buf.Bytes(), nil
}

func (c *session) handle(ctx context.Context, data []byte) {
	t := c.srv.Tuning()
	f, err := protocol.DecodeClient(data, t.MaxBodyBytes)
	if err != nil {
		c.bad++
		var pe *protocol.Error
		if errors.As(err, &pe) {
			if pe.FrameType == protocol.TypeRead {
				c.srv.metrics.ReadReceiptFailed(metrics.ReasonInvalid)
			}
			c.sendError(pe.CorrelationID, pe.Code, pe.Message)
		} else {
			c.sendError("", protocol.CodeInvalid, "bad frame")
		}
		return
	}
	c.bad = 0
	switch {
	case f.Send != nil:
		c.handleSend(ctx, f.Send, t)
	case f.Ack != nil:
		// Engine.Ack bounds the index call itself when it needs to (a
		// remote index without the ack batcher); a timer per ack frame
		// here was wasted on the in-process index and the batcher.
		if err := c.srv.engine.Ack(ctx, c.member, f.Ack.MessageIDs); err != nil {
			c.srv.warnAck.Warn(c.srv.log, "ack not recorded", "conn", c.id, "err", err)
		}
	case f.Ping != nil:
		c.send(protocol.Ping{Type: protocol.TypePong})
	case f.Read != nil:
		c.handleRead(ctx, f.Read)
	case f.Refresh != nil:
		c.handleRefresh(f.Refresh)
	case f.Typing != nil:
		c.handleTyping(ctx, f.Typing)
	}
}

// setExpiry makes exp the connection's expiry: the connection is closed
// with 4005 when it passes (at once when it has passed already); the zero
// time means none. It replaces the previous expiry.
func (c *session) setExpiry(exp time.Time) {
	c.expMu.Lock()
	defer c.expMu.Unlock()
	if c.expiry != nil {
		c.expiry.Stop()
		c.expiry = nil
	}
	c.exp = exp
	if !exp.IsZero() {
		c.expiry = time.AfterFunc(time.Until(exp), func() {
			c.Close(protocol.CloseExpired, "token expired: reconnect with a new token, or refresh before exp")
		})
	}
}

// handleRefresh applies a refresh frame (PROTOCOL.md §1): a valid user
// token of this connection's user replaces the expiry and is answered
// refreshed; any other token gets invalid and changes nothing.
func (c *session) handleRefresh(r *protocol.Refresh) {
	user, exp, err := c.srv.signer.VerifyExpiry(r.Token)
	switch {
	case err != nil:
		c.sendError("", protocol.CodeInvalid, "refresh: the token is malformed, expired, wrongly signed or not a user token; nothing changed")
		return
	case user != c.user:
		c.sendError("", protocol.CodeInvalid, "refresh: the token is for another user; nothing changed")
		return
	}
	c.setExpiry(exp)
	ans := protocol.Refreshed{Type: protocol.TypeRefreshed}
	if !exp.IsZero() {
		ans.Exp = &exp
	}
	c.send(ans)
}

func (c *session) handleSend(ctx context.Context, m *protocol.Send, t config.Tuning) {
	credits, perSecond := min(t.MaxInFlightSends, c.credits), t.SendsPerSecond
	if int(c.inflight.Load()) >= credits {
		c.sendError(m.CorrelationID, protocol.CodeCreditExhausted, "too many sends awaiting an answer (maxInFlightSends)")
		return
	}
	if c.limiter.Limit() != rate.Limit(perSecond) {
		c.limiter.SetLimit(rate.Limit(perSecond))
		c.limiter.SetBurst(perSecond)
	}
	if !c.limiter.Allow() {
		c.sendErrorRetry(m.CorrelationID, protocol.CodeRateLimited, "send rate over sendsPerSecond", retryAfterMs(c.limiter, 1))
		return
	}
	if code, msg, retry := c.chargeFanout(ctx, m.ChatID, t.FanoutPerSecond); code != "" {
		c.sendErrorRetry(m.CorrelationID, code, msg, retry)
		return
	}
	c.inflight.Add(1)
	corr := m.CorrelationID
	read := time.Now()
	err := c.srv.pipeline.Submit(ingest.Request{
		Draft: history.Draft{
			ID: ulid.Make().String(), ChatID: m.ChatID, SenderID: c.user, SenderDevice: c.device,
			CorrelationID: corr, Body: m.Body, SentAt: time.Now().UTC(), Edits: m.Edits,
		},
		Done: func(res history.Result, err error) {
			c.inflight.Add(-1)
			switch {
			case err != nil:
				c.sendError(corr, protocol.CodeOverloaded, "not stored: the store is unavailable; resend with the same correlationId")
			case res.Err != nil:
				c.sendError(corr, codeOf(res.Err), clientMessage(res.Err))
			default:
				c.srv.chats.noteMembers(res.Message.ChatID, res.Members)
				c.srv.metrics.Accepted(time.Since(read), res.Duplicate)
				c.send(protocol.Accepted{Type: protocol.TypeAccepted, CorrelationID: corr,
					MessageID: res.Message.ID, ChatID: res.Message.ChatID, SentAt: res.Message.SentAt.UTC()})
			}
		},
	})
	if err != nil {
		c.inflight.Add(-1)
		c.sendError(corr, protocol.CodeOverloaded, "inbound queue full; resend with the same correlationId")
	}
}

func (c *session) handleRead(ctx context.Context, r *protocol.Read) {
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	seq, code, msg := c.srv.readTarget(rctx, c.user, r.ChatID, r.MessageID)
	if code != "" {
		c.sendError("", code, msg)
		return
	}
	rr := history.Read{ChatID: r.ChatID, UserID: c.user, MessageID: r.MessageID, Seq: seq, Device: c.device, At: time.Now().UTC()}
	// The decoder refused ids the stores refuse (package text); should a
	// store still refuse this receipt, it fails alone (ingest saves the
	// rest of its batch) and its sender is told.
	if err := c.srv.pipeline.SubmitRead(ingest.ReadRequest{Read: rr, Done: func(err error) {
		switch {
		case errors.Is(err, history.ErrInvalid):
			c.sendError("", protocol.CodeInvalid, "read receipt refused: "+clientMessage(err))
		case err != nil:
			c.sendError("", protocol.CodeOverloaded, "read receipt not stored: the store is unavailable")
		}
	}}); err != nil {
		c.srv.metrics.ReadReceiptFailed(metrics.ReasonOverloaded)
		c.sendError("", protocol.CodeOverloaded, "read receipt not stored")
	}
}
