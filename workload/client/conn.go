package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coder/websocket"

	"github.com/tetra-messenger/tetra/workload/protocol"
)

// outQueue is the capacity of a connection's outbound frame queue. Senders
// block (with their context) when it is full: that is the back-pressure.
const outQueue = 64

var errConnLost = errors.New("client: connection lost")

// conn is one WebSocket connection: one reader goroutine (frames in,
// callbacks, answers to pending sends) and one writer goroutine (queued
// frames, coalesced acks, application pings and the liveness check).
type conn struct {
	c      *Client
	ws     *websocket.Conn
	hello  protocol.Hello
	ctx    context.Context // cancelled when the reader exits
	cancel context.CancelFunc
	out    chan []byte
	done   chan struct{} // closed when the connection is over
	wg     sync.WaitGroup

	mu        sync.Mutex
	pending   map[string][]*call // correlationId -> sends waiting, FIFO
	dead      bool
	failErr   error // why the writer dropped the connection
	closeCode int   // valid once done is closed
	closeErr  error // valid once done is closed

	ackMu  sync.Mutex
	acks   []string
	ackSig chan struct{}

	lastRead atomic.Int64 // unix nanoseconds of the last frame or ping received

	// writeDeadline drops the connection when one write of the writer
	// goroutine takes longer than Config.WriteTimeout; only that goroutine
	// arms it. One timer per connection, reset per write, costs less than
	// a context with a deadline per frame (a timer, a context and a
	// cancellation registration each).
	writeDeadline *time.Timer

	// ended is set by Client.connDown (under Client.mu) once the reader
	// saw the connection end; install then leaves it uninstalled.
	ended bool
}

// call is one attempt of a send waiting for its answer on one connection.
type call struct {
	res chan answer // capacity 1: at most one answer per registration
}

type answer struct {
	acc protocol.Accepted
	err *protocol.ErrorFrame // nil when accepted
}

// connect dials, reads hello and starts the connection's goroutines.
func (c *Client) connect(ctx context.Context) (*conn, error) {
	hctx, cancel := context.WithTimeout(ctx, c.cfg.HandshakeTimeout)
	defer cancel()
	tok, _ := c.tok.get()
	hdr := http.Header{}
	hdr.Set("Authorization", "Bearer "+tok)
	cn := &conn{
		c:      c,
		out:    make(chan []byte, outQueue),
		done:   make(chan struct{}),
		ackSig: make(chan struct{}, 1),
	}
	ws, resp, err := websocket.Dial(hctx, c.dialURL(tok), &websocket.DialOptions{
		HTTPClient: c.cfg.HTTPClient,
		HTTPHeader: hdr,
		OnPingReceived: func(context.Context, []byte) bool {
			cn.lastRead.Store(time.Now().UnixNano())
			return true
		},
	})
	if err != nil {
		if resp != nil && resp.StatusCode != http.StatusSwitchingProtocols && resp.StatusCode != 0 {
			var body []byte
			if resp.Body != nil {
				body, _ = io.ReadAll(io.LimitReader(resp.Body, 4096))
			}
			return nil, httpError(resp.StatusCode, body)
		}
		return nil, c.redact(fmt.Errorf("client: connect: %w", err))
	}
	ws.SetReadLimit(maxFrameBytes)
	_, b, err := ws.Read(hctx)
	if err != nil {
		_ = ws.CloseNow()
		return nil, fmt.Errorf("client: read hello: %w", err)
	}
	if err := json.Unmarshal(b, &cn.hello); err != nil || cn.hello.Type != protocol.TypeHello {
		_ = ws.Close(websocket.StatusProtocolError, "expected hello")
		return nil, fmt.Errorf("client: first frame is not hello: %.100q", b)
	}
	cn.ws = ws
	cn.ctx, cn.cancel = context.WithCancel(context.Background())
	timeout := c.cfg.WriteTimeout
	cn.writeDeadline = time.AfterFunc(time.Hour, func() {
		cn.fail(fmt.Errorf("client: a write took longer than WriteTimeout (%v): dropping the connection", timeout))
	})
	cn.writeDeadline.Stop()
	cn.lastRead.Store(time.Now().UnixNano())
	cn.wg.Add(2)
	go cn.readLoop()
	go cn.writeLoop()
	return cn, nil
}

// readLoop reads frames until the connection ends, then tears it down.
func (cn *conn) readLoop() {
	defer cn.wg.Done()
	var buf bytes.Buffer // reused: decoding copies what it keeps
	var err error
	for {
		var r io.Reader
		// No context: the writer's liveness check (Config.PingInterval),
		// the server's idle close (4004) and TCP keep-alive end dead
		// connections, and a cancellable context would cost a registration
		// per read. Close and CloseNow unblock this read.
		if _, r, err = cn.ws.Reader(context.Background()); err != nil {
			break
		}
		buf.Reset()
		if _, err = buf.ReadFrom(r); err != nil {
			break
		}
		cn.lastRead.Store(time.Now().UnixNano())
		cn.c.handleFrame(cn, buf.Bytes())
	}
	cn.down(err)
}

// down tears the connection down after the reader stopped: the client
// forgets it, pending sends see done and resend on the next connection.
func (cn *conn) down(err error) {
	cn.c.connDown(cn)
	cn.mu.Lock()
	cn.dead = true
	cn.pending = nil
	if cn.failErr != nil && websocket.CloseStatus(err) == -1 {
		err = cn.failErr
	}
	cn.closeCode = int(websocket.CloseStatus(err))
	cn.closeErr = err
	cn.mu.Unlock()
	_ = cn.ws.CloseNow()
	cn.cancel()
	close(cn.done)
}

// fail drops the connection because of a local failure (write error,
// timeout, liveness); the reader then tears it down.
func (cn *conn) fail(err error) {
	cn.mu.Lock()
	if cn.failErr == nil {
		cn.failErr = err
	}
	cn.mu.Unlock()
	_ = cn.ws.CloseNow()
}

// writeLoop writes queued frames and coalesced acks, sends application
// pings and checks liveness, until the connection ends.
func (cn *conn) writeLoop() {
	defer cn.wg.Done()
	cfg := &cn.c.cfg

	ackTimer := time.NewTimer(time.Hour)
	ackTimer.Stop()
	defer ackTimer.Stop()
	armed := false

	// Liveness (only with Config.PingInterval): our application pings
	// elicit pongs, so nothing received (frame or WebSocket ping) for three
	// intervals means a dead peer. It is not derived from hello's
	// pingIntervalMs: the server may retune its pings live, and a client
	// that timed out on the old value would drop healthy connections.
	var readTimeout, period time.Duration
	if p := cfg.PingInterval; p > 0 {
		readTimeout, period = 3*p, p
	}
	var tick <-chan time.Time
	if period > 0 {
		t := time.NewTicker(period)
		defer t.Stop()
		tick = t.C
	}
	ping := protocol.Encode(protocol.Ping{Type: protocol.TypePing})

	defer cn.writeDeadline.Stop()
	var spare []string
	var frame []byte // the ack frames' buffer, reused: a write copies it
	write := func(ids []string) error {
		frame = appendAck(frame[:0], ids)
		return cn.write(frame)
	}
	flush := func() bool {
		ids := cn.takeAcks(spare)
		if err := cn.writeAcks(ids, write); err != nil {
			cn.fail(err)
			return false
		}
		spare = ids[:0]
		return true
	}
	for {
		select {
		case <-cn.ctx.Done():
			return
		case b := <-cn.out:
			if err := cn.write(b); err != nil {
				cn.fail(err)
				return
			}
		case <-cn.ackSig:
			switch n := cn.ackLen(); {
			case n >= cfg.AckBatch || (n > 0 && cfg.AckDelay == 0):
				ackTimer.Stop()
				armed = false
				if !flush() {
					return
				}
			case n > 0 && !armed:
				ackTimer.Reset(cfg.AckDelay)
				armed = true
			}
		case <-ackTimer.C:
			armed = false
			if !flush() {
				return
			}
		case now := <-tick:
			if idle := now.Sub(time.Unix(0, cn.lastRead.Load())); idle > readTimeout {
				cn.fail(fmt.Errorf("client: nothing received for %v (limit %v): dropping the connection", idle.Round(time.Millisecond), readTimeout))
				return
			}
			if cfg.PingInterval > 0 {
				if err := cn.write(ping); err != nil {
					cn.fail(err)
					return
				}
			}
		}
	}
}

// write writes one frame from the writer goroutine, within WriteTimeout
// (writeDeadline). A connection that ends meanwhile unblocks it: down
// closes the socket.
func (cn *conn) write(b []byte) error {
	cn.writeDeadline.Reset(cn.c.cfg.WriteTimeout)
	err := cn.ws.Write(context.Background(), websocket.MessageText, b)
	if !cn.writeDeadline.Stop() && err == nil {
		// The deadline passed as the write ended: the connection is being
		// dropped all the same.
		err = errWriteTimeout
	}
	return err
}

// errWriteTimeout is what write returns when the deadline passed as the
// write ended; writeDeadline reports the same with the timeout in it,
// and whichever comes first says why the connection was dropped.
var errWriteTimeout = errors.New("client: a write took longer than WriteTimeout: dropping the connection")

// writeCtx writes one frame from any goroutine, within WriteTimeout.
func (cn *conn) writeCtx(b []byte) error {
	ctx, cancel := context.WithTimeout(cn.ctx, cn.c.cfg.WriteTimeout)
	defer cancel()
	return cn.ws.Write(ctx, websocket.MessageText, b)
}

// enqueue hands a frame to the writer.
func (cn *conn) enqueue(ctx context.Context, b []byte) error {
	select {
	case cn.out <- b:
		return nil
	case <-cn.done:
		return errConnLost
	case <-ctx.Done():
		return ctx.Err()
	}
}

// addAcks queues ids for the next ack frame and wakes the writer when the
// queue was empty (to flush, or to arm the coalescing timer) or holds a
// full batch. Ids that arrive while the writer is busy join the next frame.
func (cn *conn) addAcks(ids ...string) {
	cn.ackMu.Lock()
	cn.acks = append(cn.acks, ids...)
	n := len(cn.acks)
	cn.ackMu.Unlock()
	if n == len(ids) || n >= cn.c.cfg.AckBatch {
		select {
		case cn.ackSig <- struct{}{}:
		default:
		}
	}
}

func (cn *conn) ackLen() int {
	cn.ackMu.Lock()
	defer cn.ackMu.Unlock()
	return len(cn.acks)
}

// takeAcks swaps the queued ids for spare (an empty slice to reuse).
func (cn *conn) takeAcks(spare []string) []string {
	cn.ackMu.Lock()
	ids := cn.acks
	cn.acks = spare[:0]
	cn.ackMu.Unlock()
	return ids
}

// writeAcks writes ids in ack frames of at most AckBatch ids, each with
// write.
func (cn *conn) writeAcks(ids []string, write func(ids []string) error) error {
	for len(ids) > 0 {
		n := min(len(ids), cn.c.cfg.AckBatch)
		cn.c.st.ackFrames.Add(1)
		cn.c.st.ackedIDs.Add(int64(n))
		if err := write(ids[:n]); err != nil {
			return err
		}
		ids = ids[n:]
	}
	return nil
}

// appendAck appends the ack frame of ids to dst, byte for byte as
// protocol.Encode writes it: ids of plain characters (printable ASCII
// that JSON does not escape, as every messageId tetra mints is) are copied
// as they are, without boxing the frame into an interface; a frame with
// any other id goes through protocol.Encode.
func appendAck(dst []byte, ids []string) []byte {
	for _, id := range ids {
		if !plainJSON(id) {
			return append(dst, protocol.Encode(protocol.Ack{Type: protocol.TypeAck, MessageIDs: ids})...)
		}
	}
	dst = append(dst, `{"type":"ack","messageIds":[`...)
	for i, id := range ids {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(dst, '"')
		dst = append(dst, id...)
		dst = append(dst, '"')
	}
	return append(dst, "]}"...)
}

// plainJSON reports whether encoding/json writes s as it is between
// quotes: printable ASCII other than the quote, the backslash and the
// characters it escapes for HTML (<, >, &).
func plainJSON(s string) bool {
	for i := 0; i < len(s); i++ {
		switch b := s[i]; {
		case b < 0x20 || b >= 0x7f, b == '"', b == '\\', b == '<', b == '>', b == '&':
			return false
		}
	}
	return true
}

// flushAcksNow writes the queued acks from the calling goroutine, before a
// graceful close. Errors do not matter: the connection is closing.
func (cn *conn) flushAcksNow() {
	_ = cn.writeAcks(cn.takeAcks(nil), func(ids []string) error { return cn.writeCtx(appendAck(nil, ids)) })
}

// register adds a send attempt waiting for correlationID's answer; nil when
// the connection is already over.
func (cn *conn) register(correlationID string) *call {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if cn.dead {
		return nil
	}
	if cn.pending == nil {
		cn.pending = make(map[string][]*call)
	}
	ca := &call{res: make(chan answer, 1)}
	cn.pending[correlationID] = append(cn.pending[correlationID], ca)
	return ca
}

func (cn *conn) unregister(correlationID string, ca *call) {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	q := cn.pending[correlationID]
	for i, x := range q {
		if x == ca {
			q = append(q[:i], q[i+1:]...)
			break
		}
	}
	if len(q) == 0 {
		delete(cn.pending, correlationID)
	} else {
		cn.pending[correlationID] = q
	}
}

// resolve hands an answer to the oldest send waiting for correlationID and
// reports whether there was one.
func (cn *conn) resolve(correlationID string, a answer) bool {
	cn.mu.Lock()
	q := cn.pending[correlationID]
	if len(q) == 0 {
		cn.mu.Unlock()
		return false
	}
	ca := q[0]
	if len(q) == 1 {
		delete(cn.pending, correlationID)
	} else {
		q[0] = nil
		cn.pending[correlationID] = q[1:]
	}
	cn.mu.Unlock()
	ca.res <- a // never blocks: one answer per registration, capacity 1
	return true
}

// frameType returns the type of a server frame. The server encodes frames
// from protocol structs whose first field is type, so the fast path reads
// it without decoding; anything else is decoded.
func frameType(b []byte) string {
	const prefix = `{"type":"`
	if bytes.HasPrefix(b, []byte(prefix)) {
		rest := b[len(prefix):]
		if i := bytes.IndexByte(rest, '"'); i > 0 && i+1 < len(rest) && bytes.IndexByte(rest[:i], '\\') < 0 {
			if next := rest[i+1]; next == ',' || next == '}' {
				return knownType(rest[:i])
			}
		}
	}
	var probe struct {
		Type string `json:"type"`
	}
	if json.Unmarshal(b, &probe) != nil {
		return ""
	}
	return probe.Type
}

// knownType returns the frame type t as a constant without allocating
// when it is one the client handles, else a copy.
func knownType(t []byte) string {
	switch string(t) { // compiled to comparisons: no allocation
	case protocol.TypeMessage:
		return protocol.TypeMessage
	case protocol.TypeAccepted:
		return protocol.TypeAccepted
	case protocol.TypeError:
		return protocol.TypeError
	case protocol.TypeRead:
		return protocol.TypeRead
	case protocol.TypeChat:
		return protocol.TypeChat
	case protocol.TypeTyping:
		return protocol.TypeTyping
	case protocol.TypePresence:
		return protocol.TypePresence
	case protocol.TypePong:
		return protocol.TypePong
	}
	return string(t)
}

// handleFrame handles one server frame on the reader goroutine.
func (c *Client) handleFrame(cn *conn, b []byte) {
	switch typ := frameType(b); typ {
	case protocol.TypeMessage:
		m, err := protocol.DecodeMessage(b)
		if err != nil || m.MessageID == "" || m.ChatID == "" {
			if err == nil && m.MessageID != "" && !c.cfg.ManualAck {
				cn.addAcks(m.MessageID) // acked, or the server would insist
			}
			c.emitError(fmt.Errorf("client: bad message frame %.200q (err %v)", b, err))
			return
		}
		c.st.messageFrames.Add(1)
		isNew, catchUp := c.dd.seenLive(m.ChatID, m.MessageID)
		// Ack every frame on receipt, duplicates included, before the
		// callback: the server counts unacknowledged messages against the
		// connection (4002, 4003), and the history sync, not the ack,
		// protects what the application has not processed. In manual mode
		// the caller never sees a duplicate, so the client acks those.
		if !c.cfg.ManualAck || !isNew {
			cn.addAcks(m.MessageID)
		}
		if isNew {
			c.st.delivered.Add(1)
			c.deliver(m)
		} else {
			c.st.duplicateFrames.Add(1)
		}
		if catchUp {
			c.kickSync()
		}
	case protocol.TypeAccepted:
		a, err := protocol.DecodeAccepted(b)
		if err != nil {
			c.emitError(fmt.Errorf("client: bad accepted frame %.200q: %v", b, err))
			return
		}
		cn.resolve(a.CorrelationID, answer{acc: a})
	case protocol.TypeError:
		var e protocol.ErrorFrame
		if err := json.Unmarshal(b, &e); err != nil {
			c.emitError(fmt.Errorf("client: bad error frame %.200q: %v", b, err))
			return
		}
		if e.CorrelationID != "" && cn.resolve(e.CorrelationID, answer{err: &e}) {
			return
		}
		c.emitError(&Error{Code: e.Code, Message: e.Message, CorrelationID: e.CorrelationID})
	case protocol.TypeRead:
		if f := c.cfg.OnRead; f != nil {
			var r protocol.Read
			if err := json.Unmarshal(b, &r); err != nil {
				c.emitError(fmt.Errorf("client: bad read frame %.200q: %v", b, err))
				return
			}
			c.callback(func() { f(r) })
		}
	case protocol.TypeChat:
		var ev ChatEvent
		if err := json.Unmarshal(b, &ev); err != nil || ev.Chat.ChatID == "" {
			c.emitError(fmt.Errorf("client: bad chat frame %.200q (err %v)", b, err))
			return
		}
		switch ev.Event {
		case ChatAdded:
			c.dd.knowAndSync(ev.Chat.ChatID)
			c.kickSync()
		case ChatRemoved:
			c.dd.forget(ev.Chat.ChatID)
		}
		if f := c.cfg.OnChat; f != nil {
			c.callback(func() { f(ev) })
		}
	case protocol.TypeTyping:
		if f := c.cfg.OnTyping; f != nil {
			var t protocol.Typing
			if err := json.Unmarshal(b, &t); err != nil {
				c.emitError(fmt.Errorf("client: bad typing frame %.200q: %v", b, err))
				return
			}
			c.callback(func() { f(t) })
		}
	case protocol.TypePresence:
		if f := c.cfg.OnPresence; f != nil {
			var p protocol.Presence
			if err := json.Unmarshal(b, &p); err != nil {
				c.emitError(fmt.Errorf("client: bad presence frame %.200q: %v", b, err))
				return
			}
			c.callback(func() { f(p) })
		}
	case protocol.TypeRefreshed:
		// The server took the token refreshOnConn sent; the client uses it
		// already.
	default:
		// pong, a repeated hello, or a frame type this client does not
		// know (forward compatibility): nothing to do.
	}
}
