package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/tetra-messenger/tetra/workload/protocol"
)

// The tests below run the client against fakeServer (fake_test.go), a
// minimal stand-in that exists to exercise this package's logic; the
// end-to-end tests against the real server live in test/ and
// workload/server. No test sleeps to wait for something: they wait on
// callbacks and on the fake's event channels, with a generous timeout.

const waitTimeout = 10 * time.Second

func recv[T any](t testing.TB, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(waitTimeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// recorder collects a client's callbacks.
type recorder struct {
	msgs   chan protocol.Message
	states chan StateChange
	reads  chan protocol.Read
	errs   chan error
}

func newRecorder() *recorder {
	return &recorder{
		msgs:   make(chan protocol.Message, 1024),
		states: make(chan StateChange, 1024),
		reads:  make(chan protocol.Read, 64),
		errs:   make(chan error, 64),
	}
}

func (r *recorder) config(fs *fakeServer, user string) Config {
	return Config{
		URL:       fs.srv.URL,
		Token:     token(user),
		OnMessage: func(m protocol.Message) { r.msgs <- m },
		OnState:   func(s StateChange) { r.states <- s },
		OnRead:    func(rd protocol.Read) { r.reads <- rd },
		OnError: func(err error) {
			select {
			case r.errs <- err:
			default:
			}
		},
		BackoffMin: 5 * time.Millisecond,
		BackoffMax: 50 * time.Millisecond,
	}
}

// waitState consumes state changes until one with state s arrives.
func (r *recorder) waitState(t testing.TB, s State) StateChange {
	t.Helper()
	for {
		sc := recv(t, r.states, "state "+s.String())
		if sc.State == s {
			return sc
		}
	}
}

// noMessage checks that no OnMessage call is pending, after a round trip
// (a synced state) has proven that earlier frames were handled.
func (r *recorder) noMessage(t testing.TB) {
	t.Helper()
	select {
	case m := <-r.msgs:
		t.Fatalf("unexpected OnMessage %+v", m)
	default:
	}
}

func dial(t testing.TB, cfg Config) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	c, err := Dial(ctx, cfg)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestBackoffBounds(t *testing.T) {
	lo, hi := 100*time.Millisecond, 5*time.Second
	for attempt := range 20 {
		nominal := lo << min(attempt, 10)
		nominal = min(nominal, hi)
		for range 50 {
			d := backoff(lo, hi, attempt)
			if d < nominal/2 || d > nominal {
				t.Fatalf("attempt %d: backoff %v outside [%v, %v]", attempt, d, nominal/2, nominal)
			}
		}
	}
	if d := backoff(lo, hi, 1<<30); d > hi {
		t.Fatalf("huge attempt: %v above max", d)
	}
	if jitter(0) != 0 || jitter(1) != 1 {
		t.Fatal("jitter of tiny durations must be the duration")
	}
}

func TestSemaphore(t *testing.T) {
	var s semaphore
	s.setLimit(2)
	ctx := context.Background()
	for range 2 {
		if err := s.acquire(ctx, nil); err != nil {
			t.Fatal(err)
		}
	}
	got := make(chan int, 3)
	var wg sync.WaitGroup
	for i := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.acquire(ctx, nil); err == nil {
				got <- i
			}
		}()
		// FIFO needs a known queue order: wait until waiter i is queued.
		for {
			s.mu.Lock()
			n := len(s.waiters)
			s.mu.Unlock()
			if n == i+1 {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	// A cancelled waiter leaves the queue without taking a slot.
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if err := s.acquire(cctx, nil); !errors.Is(err, context.Canceled) {
		t.Fatalf("acquire with a cancelled context: %v", err)
	}
	s.release()
	if first := recv(t, got, "first waiter"); first != 0 {
		t.Fatalf("FIFO: waiter %d went first", first)
	}
	s.setLimit(4) // a bigger hello admits the rest
	wg.Wait()
	if n := s.inUse(); n != 4 {
		t.Fatalf("in use %d, want 4", n)
	}
	stop := make(chan struct{})
	close(stop)
	if err := s.acquire(ctx, stop); !errors.Is(err, ErrClosed) {
		t.Fatalf("acquire on a stopped client: %v", err)
	}
}

func TestDedupeWindowIsBounded(t *testing.T) {
	d := newDedupe(3, -1, nil)
	for i := range 10 {
		if isNew, _ := d.seenLive("c", fmt.Sprint(i)); !isNew {
			t.Fatalf("id %d reported as seen", i)
		}
	}
	recent, unsynced := d.sizes()
	if recent != 3 || len(d.ring) != 3 {
		t.Fatalf("recent ring holds %d (ring %d), want 3", recent, len(d.ring))
	}
	if unsynced != 10 {
		t.Fatalf("unsynced %d, want 10 (no catch-up configured)", unsynced)
	}
	// 0 fell out of the ring but is still beyond the cursor: a live
	// redelivery and the history overlap are both recognised.
	if isNew, _ := d.seenLive("c", "0"); isNew {
		t.Fatal("redelivery of an id beyond the cursor reported as new")
	}
	since, epoch := d.beginSync("c")
	if since != "" {
		t.Fatalf("cursor %q, want empty", since)
	}
	for i := range 10 {
		if d.seenHistory("c", fmt.Sprint(i)) {
			t.Fatalf("history id %d reported as new though received live", i)
		}
	}
	if !d.seenHistory("c", "10") {
		t.Fatal("history id 10 not reported as new")
	}
	d.advance("c", "10")
	d.endSync("c", epoch, true)
	if _, unsynced := d.sizes(); unsynced != 0 {
		t.Fatalf("after a complete sync %d ids remain beyond the cursor", unsynced)
	}
	if got := d.cursors()["c"]; got != "10" {
		t.Fatalf("cursor %q, want 10", got)
	}
	if recent, _ := d.sizes(); recent > 3 {
		t.Fatalf("ring grew to %d", recent)
	}
}

func TestDedupeCompleteSyncForgetsOlderIDs(t *testing.T) {
	d := newDedupe(2, -1, map[string]string{"c": "m5"})
	d.seenLive("c", "old") // say a late redelivery of something below the cursor
	_, epoch := d.beginSync("c")
	d.seenLive("c", "during") // arrives while the sync runs: keep it
	d.endSync("c", epoch, true)
	d.mu.Lock()
	_, hasOld := d.chats["c"].unsynced["old"]
	_, hasDuring := d.chats["c"].unsynced["during"]
	d.mu.Unlock()
	if hasOld || !hasDuring {
		t.Fatalf("after the sync: old kept %v (want false), during kept %v (want true)", hasOld, hasDuring)
	}
	// An incomplete sync forgets nothing.
	_, epoch = d.beginSync("c")
	d.endSync("c", epoch, false)
	if _, n := d.sizes(); n != 1 {
		t.Fatalf("incomplete sync: %d unsynced, want 1", n)
	}
}

func TestDedupeAsksForCatchUpOnce(t *testing.T) {
	d := newDedupe(100, 3, nil)
	var asks int
	for i := range 10 {
		if _, catchUp := d.seenLive("c", fmt.Sprint(i)); catchUp {
			asks++
		}
	}
	if asks != 1 {
		t.Fatalf("catch-up asked %d times, want once until it runs", asks)
	}
	if got := d.takeCatchUps(); !slices.Equal(got, []string{"c"}) {
		t.Fatalf("takeCatchUps %v", got)
	}
	_, e := d.beginSync("c")
	d.endSync("c", e, true)
	if got := d.takeCatchUps(); len(got) != 0 {
		t.Fatalf("catch-up still pending after the sync: %v", got)
	}
}

func TestFrameType(t *testing.T) {
	for in, want := range map[string]string{
		`{"type":"message","messageId":"x"}`: "message",
		`{"type":"pong"}`:                    "pong",
		`{ "type" : "accepted" }`:            "accepted",
		`{"messageId":"x","type":"error"}`:   "error",
		`{"type":"mes\"sage"}`:               `mes"sage`,
		`not json`:                           "",
	} {
		if got := frameType([]byte(in)); got != want {
			t.Errorf("frameType(%s) = %q, want %q", in, got, want)
		}
	}
	// The types of the frames the server writes cost no allocation.
	for _, typ := range []string{"message", "accepted", "error", "read", "chat", "typing", "presence", "pong"} {
		b := []byte(`{"type":"` + typ + `","x":1}`)
		if n := testing.AllocsPerRun(100, func() {
			if frameType(b) != typ {
				t.Fatal(typ)
			}
		}); n != 0 {
			t.Errorf("frameType of a %s frame: %v allocations", typ, n)
		}
	}
	if got := frameType([]byte(`{"type":"future","x":1}`)); got != "future" {
		t.Errorf("unknown type: %q", got)
	}
}

// The client's ack frames are the bytes protocol.Encode writes, and the
// common ones (plain ids) cost no allocation in a reused buffer.
func TestAppendAckAgreesWithEncode(t *testing.T) {
	for _, ids := range [][]string{
		{"01JABCDEFGHJKMNPQRSTVWXYZ0"},
		{"m1", "m2", "m3"},
		{"a b", "x-y_z.:/~"},
		{`q"uote`},
		{"back\\slash"},
		{"<html>", "a&b"},
		{"ctl\x01", "del\x7f"},
		{"é", "\u2028"},
		{"bad\xffutf8"},
		{"plain", "then \"not\""},
	} {
		want := protocol.Encode(protocol.Ack{Type: protocol.TypeAck, MessageIDs: ids})
		if got := appendAck(nil, ids); string(got) != string(want) {
			t.Errorf("appendAck(%q) = %s, want %s", ids, got, want)
		}
		if got := appendAck([]byte("prefix"), ids); string(got) != "prefix"+string(want) {
			t.Errorf("appendAck(%q) after a prefix = %s", ids, got)
		}
	}
	buf := make([]byte, 0, 256)
	ids := []string{"01JABCDEFGHJKMNPQRSTVWXYZ0", "01JABCDEFGHJKMNPQRSTVWXYZ1"}
	if n := testing.AllocsPerRun(100, func() { buf = appendAck(buf[:0], ids) }); n != 0 {
		t.Errorf("appendAck of plain ids: %v allocations", n)
	}
}

func TestConfigValidation(t *testing.T) {
	ok := Config{URL: "http://127.0.0.1:1", Token: "t"}
	for _, tc := range []struct {
		name  string
		edit  func(*Config)
		field string
	}{
		{"no URL", func(c *Config) { c.URL = "" }, "URL"},
		{"bad scheme", func(c *Config) { c.URL = "ftp://x" }, "URL"},
		{"no token", func(c *Config) { c.Token = "" }, "Token"},
		{"negative ack delay", func(c *Config) { c.AckDelay = -1 }, "AckDelay"},
		{"negative window", func(c *Config) { c.DedupeWindow = -1 }, "DedupeWindow"},
		{"page too big", func(c *Config) { c.HistoryPageSize = 5000 }, "HistoryPageSize"},
		{"ack batch too big", func(c *Config) { c.AckBatch = protocol.MaxAckIDs + 1 }, "AckBatch"},
		{"backoff inverted", func(c *Config) { c.BackoffMin, c.BackoffMax = time.Second, time.Millisecond }, "BackoffMin"},
		{"http timeout", func(c *Config) { c.HTTPClient = &http.Client{Timeout: time.Second} }, "HTTPClient"},
	} {
		cfg := ok
		tc.edit(&cfg)
		_, err := New(cfg)
		if err == nil || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: error %v does not name %s", tc.name, err, tc.field)
		}
	}
	cfg, base, ws, err := Config{URL: "wss://example.com/prefix/", Token: "t", TokenInQuery: true, Device: "phone"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if base.String() != "https://example.com/prefix" || ws != "wss://example.com/prefix/ws?device=phone" {
		t.Fatalf("base %s ws %s", base, ws)
	}
	// The token joins the URL at each dial (it may be refreshed).
	c, err := New(Config{URL: "wss://example.com/prefix/", Token: "t", TokenInQuery: true, Device: "phone"})
	if err != nil {
		t.Fatal(err)
	}
	if got := c.dialURL(c.Token()); got != "wss://example.com/prefix/ws?device=phone&token=t" {
		t.Fatalf("dial URL %s", got)
	}
	if cfg.BackoffMin != DefaultBackoffMin || cfg.AckBatch != DefaultAckBatch || cfg.DedupeWindow != DefaultDedupeWindow {
		t.Fatalf("defaults not applied: %+v", cfg)
	}
}

func TestHelloAndHeaderToken(t *testing.T) {
	fs := newFakeServer(t)
	fs.limits.MaxInFlightSends = 7
	r := newRecorder()
	c := dial(t, r.config(fs, "alice"))
	if h := c.Hello(); h.UserID != "alice" || h.Device != DefaultDevice || c.Limits().MaxInFlightSends != 7 {
		t.Fatalf("hello %+v", h)
	}
	r.waitState(t, StateSynced)
	fs.mu.Lock()
	inQuery := fs.tokensInQuery
	fs.mu.Unlock()
	if inQuery != 0 {
		t.Fatal("token sent in the query without TokenInQuery")
	}

	cfg := r.config(fs, "bob")
	cfg.TokenInQuery = true
	cfg.Device = "phone"
	c2 := dial(t, cfg)
	if c2.Hello().Device != "phone" {
		t.Fatalf("device %q", c2.Hello().Device)
	}
	fs.mu.Lock()
	inQuery = fs.tokensInQuery
	fs.mu.Unlock()
	if inQuery != 1 {
		t.Fatalf("token in query %d times, want 1", inQuery)
	}
}

func TestTokenNotInErrors(t *testing.T) {
	fs := newFakeServer(t)
	url := fs.srv.URL
	fs.srv.Close() // nothing listens any more
	c, err := New(Config{URL: url, Token: "s3cret-token", TokenInQuery: true})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.connect(context.Background())
	if err == nil || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("connect error leaks the token or is nil: %v", err)
	}
}

func TestUnauthorizedStopsAtOnce(t *testing.T) {
	fs := newFakeServer(t)
	cfg := newRecorder().config(fs, "alice")
	cfg.Token = "garbage"
	start := time.Now()
	_, err := Dial(context.Background(), cfg) // no deadline: must not retry forever
	var e *Error
	if !errors.As(err, &e) || e.Status != http.StatusUnauthorized || e.Code != protocol.CodeUnauthorized {
		t.Fatalf("Dial with a bad token: %v", err)
	}
	if time.Since(start) > waitTimeout {
		t.Fatal("401 was retried")
	}
}

func TestSendMatchesCorrelationIDs(t *testing.T) {
	fs := newFakeServer(t)
	fs.addChat("c1", "alice", "bob")
	const n = 20
	release := make(chan struct{})
	fs.onSend = func(sendEvent) sendReply { return sendReply{hold: release} }
	c := dial(t, newRecorder().config(fs, "alice"))

	type result struct {
		corr string
		acc  protocol.Accepted
		err  error
	}
	results := make(chan result, n)
	for i := range n {
		go func() {
			corr := fmt.Sprintf("k-%02d", i)
			acc, err := c.SendWithID(context.Background(), "c1", corr, fmt.Sprint("body ", i))
			results <- result{corr, acc, err}
		}()
	}
	for range n {
		recv(t, fs.sends, "send frame")
	}
	close(release) // answers now race each other, in any order
	ids := map[string]bool{}
	for range n {
		r := recv(t, results, "send result")
		if r.err != nil {
			t.Fatalf("send %s: %v", r.corr, r.err)
		}
		if r.acc.CorrelationID != r.corr {
			t.Fatalf("send %s got the answer of %s", r.corr, r.acc.CorrelationID)
		}
		fs.mu.Lock()
		want := fs.byCorr["alice\x00"+r.corr]
		fs.mu.Unlock()
		if r.acc.MessageID != want {
			t.Fatalf("send %s: messageId %s, stored as %s", r.corr, r.acc.MessageID, want)
		}
		ids[r.acc.MessageID] = true
	}
	if len(ids) != n {
		t.Fatalf("%d distinct messageIds for %d sends", len(ids), n)
	}
	if st := c.Stats(); st.SendsAccepted != n || st.InFlight != 0 {
		t.Fatalf("stats %+v", st)
	}

	// Send mints a fresh ULID correlationId each time.
	a1, err := c.Send(context.Background(), "c1", "x")
	if err != nil {
		t.Fatal(err)
	}
	a2, err := c.Send(context.Background(), "c1", "x")
	if err != nil {
		t.Fatal(err)
	}
	if len(a1.CorrelationID) != 26 || a1.CorrelationID == a2.CorrelationID || a1.MessageID == a2.MessageID {
		t.Fatalf("Send keys: %q %q", a1.CorrelationID, a2.CorrelationID)
	}
}

func TestSendErrors(t *testing.T) {
	fs := newFakeServer(t)
	fs.addChat("c1", "alice")
	fs.onSend = func(ev sendEvent) sendReply {
		switch {
		case ev.send.ChatID == "nope":
			return sendReply{code: protocol.CodeForbidden}
		case strings.HasPrefix(ev.send.CorrelationID, "busy") && ev.n <= 2:
			return sendReply{code: protocol.CodeOverloaded}
		case strings.HasPrefix(ev.send.CorrelationID, "rate") && ev.n <= 1:
			return sendReply{code: protocol.CodeRateLimited}
		case strings.HasPrefix(ev.send.CorrelationID, "credit") && ev.n <= 1:
			return sendReply{code: protocol.CodeCreditExhausted}
		}
		return sendReply{}
	}
	cfg := newRecorder().config(fs, "alice")
	cfg.LimitRetryWait = 5 * time.Millisecond
	c := dial(t, cfg)
	ctx := context.Background()

	_, err := c.SendWithID(ctx, "nope", "k1", "hi")
	var e *Error
	if !errors.As(err, &e) || e.Code != protocol.CodeForbidden || e.CorrelationID != "k1" || e.Status != 0 || e.Local {
		t.Fatalf("forbidden send: %#v", err)
	}
	if CodeOf(err) != protocol.CodeForbidden {
		t.Fatalf("CodeOf: %q", CodeOf(err))
	}

	for _, corr := range []string{"busy-1", "rate-1", "credit-1"} {
		acc, err := c.SendWithID(ctx, "c1", corr, "hi")
		if err != nil || acc.MessageID == "" {
			t.Fatalf("%s: %v", corr, err)
		}
	}
	if st := c.Stats(); st.SendsRetried != 4 || st.SendErrors != 1 {
		t.Fatalf("retried %d (want 2 overloaded + 1 rate + 1 credit), errors %d", st.SendsRetried, st.SendErrors)
	}

	// Local checks: nothing is sent.
	for _, tc := range []struct{ chat, corr, body, code string }{
		{"", "k", "b", protocol.CodeInvalid},
		{"c1", "", "b", protocol.CodeInvalid},
		{"c1", "k", "", protocol.CodeInvalid},
		{"c1", "k", strings.Repeat("x", 4097), protocol.CodeTooLarge},
	} {
		_, err := c.SendWithID(ctx, tc.chat, tc.corr, tc.body)
		if !errors.As(err, &e) || !e.Local || e.Code != tc.code {
			t.Errorf("local check %+v: %v", tc, err)
		}
	}
}

func TestReturnLimitErrors(t *testing.T) {
	fs := newFakeServer(t)
	fs.addChat("c1", "alice")
	fs.onSend = func(sendEvent) sendReply { return sendReply{code: protocol.CodeRateLimited} }
	cfg := newRecorder().config(fs, "alice")
	cfg.ReturnLimitErrors = true
	c := dial(t, cfg)
	_, err := c.SendWithID(context.Background(), "c1", "k", "hi")
	if CodeOf(err) != protocol.CodeRateLimited {
		t.Fatalf("want rate_limited returned, got %v", err)
	}
}

// A send whose connection drops before the answer is resent on the next
// connection with the same correlationId, whether the server had stored
// it (the answer was lost) or not; either way it is stored once.
func TestResendSameCorrelationIDAfterDrop(t *testing.T) {
	for _, stored := range []bool{false, true} {
		t.Run(fmt.Sprintf("stored=%v", stored), func(t *testing.T) {
			fs := newFakeServer(t)
			fs.addChat("c1", "alice", "bob")
			fs.onSend = func(ev sendEvent) sendReply {
				if ev.n == 1 {
					return sendReply{drop: true, store: stored}
				}
				return sendReply{}
			}
			r := newRecorder()
			c := dial(t, r.config(fs, "alice"))
			acc, err := c.SendWithID(context.Background(), "c1", "key-1", "hello")
			if err != nil {
				t.Fatal(err)
			}
			first := recv(t, fs.sends, "first send")
			if first.send.CorrelationID != "key-1" {
				t.Fatalf("first send %+v", first)
			}
			// Unless the history sync found the stored message first (then
			// Send returns it without waiting for an answer), the frame is
			// sent again with the same key.
			select {
			case second := <-fs.sends:
				if second.send.CorrelationID != "key-1" || second.n != 2 {
					t.Fatalf("resend %+v", second)
				}
			default:
				if !stored {
					t.Fatal("no resend")
				}
			}
			fs.mu.Lock()
			msgs := fs.chats["c1"].msgs
			fs.mu.Unlock()
			if len(msgs) != 1 || msgs[0].MessageID != acc.MessageID {
				t.Fatalf("stored %+v, accepted %s", msgs, acc.MessageID)
			}
			// The own message comes back in history after the reconnect
			// but is not reported: the client knows it sent it.
			// (The first connection may drop before its sync completes.)
			for r.waitState(t, StateSynced); c.Stats().Connects < 2; r.waitState(t, StateSynced) {
			}
			r.noMessage(t)
			st := c.Stats()
			if st.SendsRetried > 1 || (!stored && st.SendsRetried != 1) || st.Reconnects != 1 || st.SendsAccepted != 1 {
				t.Fatalf("stats %+v", st)
			}
		})
	}
}

// When the answer is lost with the connection and the resend is never
// answered, the history sync that follows the reconnect proves the commit:
// Send returns it, and OnMessage does not report the client's own message.
func TestSendCompletedByHistory(t *testing.T) {
	fs := newFakeServer(t)
	fs.addChat("c1", "alice", "bob")
	never := make(chan struct{})
	t.Cleanup(func() { close(never) })
	fs.onSend = func(ev sendEvent) sendReply {
		if ev.n == 1 {
			return sendReply{drop: true, store: true}
		}
		return sendReply{hold: never}
	}
	r := newRecorder()
	c := dial(t, r.config(fs, "alice"))
	acc, err := c.SendWithID(context.Background(), "c1", "key-1", "hello")
	if err != nil {
		t.Fatal(err)
	}
	fs.mu.Lock()
	stored := fs.chats["c1"].msgs[0]
	fs.mu.Unlock()
	if acc.MessageID != stored.MessageID || acc.CorrelationID != "key-1" || acc.ChatID != "c1" {
		t.Fatalf("accepted %+v, stored %+v", acc, stored)
	}
	for r.waitState(t, StateSynced); c.Stats().Connects < 2; r.waitState(t, StateSynced) {
	}
	r.noMessage(t)
}

// A send waiting for the connection survives a reconnect and ends with
// the caller's context.
func TestSendContextEnds(t *testing.T) {
	fs := newFakeServer(t)
	fs.addChat("c1", "alice")
	never := make(chan struct{})
	t.Cleanup(func() { close(never) })
	fs.onSend = func(sendEvent) sendReply { return sendReply{hold: never} }
	c := dial(t, newRecorder().config(fs, "alice"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.SendWithID(ctx, "c1", "k", "hi")
		done <- err
	}()
	recv(t, fs.sends, "send")
	cancel()
	if err := recv(t, done, "send result"); !errors.Is(err, context.Canceled) {
		t.Fatalf("send after cancel: %v", err)
	}
	if n := c.Stats().InFlight; n != 0 {
		t.Fatalf("in flight %d after cancel", n)
	}
}

func TestMaxInFlightSendsRespected(t *testing.T) {
	fs := newFakeServer(t)
	fs.addChat("c1", "alice")
	fs.limits.MaxInFlightSends = 3
	release := make(chan struct{})
	fs.onSend = func(sendEvent) sendReply { return sendReply{hold: release} }
	c := dial(t, newRecorder().config(fs, "alice"))
	errs := make(chan error, 12)
	for i := range 12 {
		go func() {
			_, err := c.SendWithID(context.Background(), "c1", fmt.Sprint("k", i), "hi")
			errs <- err
		}()
	}
	for range 3 {
		recv(t, fs.sends, "send")
	}
	// Only 3 sends are out; the 9 others wait for a slot.
	for {
		if st := c.Stats(); st.InFlight == 3 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	select {
	case ev := <-fs.sends:
		t.Fatalf("a 4th send went out while 3 were unanswered: %+v", ev)
	default:
	}
	close(release)
	for range 12 {
		if err := recv(t, errs, "send result"); err != nil {
			t.Fatal(err)
		}
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.creditErrors != 0 || fs.maxOutstand > 3 {
		t.Fatalf("credit errors %d, max outstanding %d", fs.creditErrors, fs.maxOutstand)
	}
}

// Every message frame is acked, duplicates included, in coalesced frames;
// OnMessage sees each messageId once.
func TestLiveDedupeAndAcks(t *testing.T) {
	fs := newFakeServer(t)
	fs.addChat("c1", "alice", "bob")
	r := newRecorder()
	cfg := r.config(fs, "alice")
	cfg.AckDelay = 20 * time.Millisecond
	c := dial(t, cfg)
	r.waitState(t, StateSynced)

	const n = 50
	var pushed []protocol.Message
	for i := range n {
		m := fs.store("c1", "bob", fmt.Sprint("hi ", i))
		pushed = append(pushed, m)
		fs.push("alice", m)
	}
	fs.push("alice", pushed[7]) // redelivered: the ack "got lost"
	fs.push("alice", pushed[7])

	for i := range n {
		m := recv(t, r.msgs, "message")
		if m.MessageID != pushed[i].MessageID || m.Type != protocol.TypeMessage || m.ChatID != "c1" {
			t.Fatalf("message %d: %+v", i, m)
		}
	}
	acked := map[string]int{}
	frames := 0
	for total := 0; total < n+2; {
		ids := recv(t, fs.acks, "ack frame")
		frames++
		total += len(ids)
		for _, id := range ids {
			acked[id]++
		}
	}
	if acked[pushed[7].MessageID] != 3 || len(acked) != n {
		t.Fatalf("acks: %d distinct, %d for the duplicated id (want %d, 3)", len(acked), acked[pushed[7].MessageID], n)
	}
	if frames >= n {
		t.Fatalf("%d ack frames for %d ids: not coalesced", frames, n+2)
	}
	r.noMessage(t)
	if st := c.Stats(); st.MessageFrames != n+2 || st.DuplicateFrames != 2 || st.Delivered != n || st.AckedIDs != n+2 {
		t.Fatalf("stats %+v", st)
	}
}

// By default acks leave on receipt, before OnMessage returns, and batch by
// themselves.
func TestAcksOnReceipt(t *testing.T) {
	fs := newFakeServer(t)
	fs.addChat("c1", "alice", "bob")
	r := newRecorder()
	cfg := r.config(fs, "alice")
	acked := make(chan []string, 1)
	first := true
	cfg.OnMessage = func(m protocol.Message) {
		if first { // hold the reader until the server has the ack
			first = false
			acked <- recv(t, fs.acks, "ack while OnMessage runs")
		}
		r.msgs <- m
	}
	c := dial(t, cfg)
	r.waitState(t, StateSynced)
	const n = 30
	var ids []string
	for i := range n {
		m := fs.store("c1", "bob", fmt.Sprint(i))
		ids = append(ids, m.MessageID)
		fs.push("alice", m)
	}
	got := recv(t, acked, "first ack")
	for len(got) < n {
		got = append(got, recv(t, fs.acks, "ack")...)
	}
	if !slices.Equal(got, ids) {
		t.Fatalf("acked %v, want %v", got, ids)
	}
	for range n {
		recv(t, r.msgs, "message")
	}
	if st := c.Stats(); st.AckedIDs != n || st.AckFrames > n {
		t.Fatalf("stats %+v", st)
	}
}

func TestManualAck(t *testing.T) {
	fs := newFakeServer(t)
	fs.addChat("c1", "alice", "bob")
	r := newRecorder()
	cfg := r.config(fs, "alice")
	cfg.ManualAck = true
	c := dial(t, cfg)
	r.waitState(t, StateSynced)
	m := fs.store("c1", "bob", "hi")
	fs.push("alice", m)
	fs.push("alice", m) // the duplicate is acked by the client itself
	got := recv(t, r.msgs, "message")
	if ids := recv(t, fs.acks, "ack of the duplicate"); !slices.Equal(ids, []string{m.MessageID}) {
		t.Fatalf("acked %v", ids)
	}
	if err := c.Ack(got.MessageID); err != nil {
		t.Fatal(err)
	}
	if ids := recv(t, fs.acks, "manual ack"); !slices.Equal(ids, []string{m.MessageID}) {
		t.Fatalf("acked %v", ids)
	}
}

// After a close, the client pages history from its per-chat cursor and
// reports only what it had not seen; the next sync starts at the new cursor.
func TestResyncAfterReconnect(t *testing.T) {
	fs := newFakeServer(t)
	fs.addChat("c1", "alice", "bob")
	fs.addChat("c2", "alice", "carol")
	old := fs.store("c1", "bob", "before alice connected")
	r := newRecorder()
	c := dial(t, r.config(fs, "alice"))

	if m := recv(t, r.msgs, "history message"); m.MessageID != old.MessageID {
		t.Fatalf("first sync: %+v", m)
	}
	r.waitState(t, StateSynced)
	if cur := c.Cursors(); cur["c1"] != old.MessageID {
		t.Fatalf("cursors %v", cur)
	}

	live := fs.store("c1", "bob", "live")
	fs.push("alice", live)
	if m := recv(t, r.msgs, "live message"); m.MessageID != live.MessageID {
		t.Fatalf("live: %+v", m)
	}
	// Not delivered live (say they were in flight when the connection
	// was withdrawn): only history has them.
	missed1 := fs.store("c1", "bob", "missed 1")
	missed2 := fs.store("c2", "carol", "missed 2")
	drainHistory(fs)
	fs.closeUser("alice", protocol.ClosePending)
	sc := r.waitState(t, StateReconnecting)
	if sc.CloseCode != protocol.ClosePending {
		t.Fatalf("close code %d", sc.CloseCode)
	}
	r.waitState(t, StateSynced)

	got := map[string]bool{}
	for range 2 {
		got[recv(t, r.msgs, "missed message").MessageID] = true
	}
	if !got[missed1.MessageID] || !got[missed2.MessageID] {
		t.Fatalf("missed messages not recovered: %v", got)
	}
	r.noMessage(t) // live was not reported again
	sinces := map[string]string{}
	for len(sinces) < 2 {
		ev := recv(t, fs.history, "history request")
		sinces[ev.chat] = ev.since
	}
	if sinces["c1"] != old.MessageID || sinces["c2"] != "" {
		t.Fatalf("resync paged from %v, want c1 from %s and c2 from the start", sinces, old.MessageID)
	}
	if cur := c.Cursors(); cur["c1"] != missed1.MessageID || cur["c2"] != missed2.MessageID {
		t.Fatalf("cursors %v", cur)
	}
	st := c.Stats()
	if st.Delivered != 4 || st.FromHistory != 3 || st.HistoryOverlap != 1 || st.Reconnects != 1 || st.DedupeUnsynced != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func drainHistory(fs *fakeServer) {
	for {
		select {
		case <-fs.history:
		default:
			return
		}
	}
}

// History paging follows hasMore with the last messageId as the next since.
func TestResyncPagesWithHasMore(t *testing.T) {
	fs := newFakeServer(t)
	fs.addChat("c1", "alice", "bob")
	var ids []string
	for i := range 7 {
		ids = append(ids, fs.store("c1", "bob", fmt.Sprint(i)).MessageID)
	}
	r := newRecorder()
	cfg := r.config(fs, "alice")
	cfg.HistoryPageSize = 3
	dial(t, cfg)
	r.waitState(t, StateSynced)
	for i := range 7 {
		if m := recv(t, r.msgs, "message"); m.MessageID != ids[i] {
			t.Fatalf("message %d: %s, want %s (oldest first)", i, m.MessageID, ids[i])
		}
	}
	var sinces []string
	for range 3 {
		sinces = append(sinces, recv(t, fs.history, "page").since)
	}
	if !slices.Equal(sinces, []string{"", ids[2], ids[5]}) {
		t.Fatalf("pages from %v", sinces)
	}
}

// A chat with MaxUnsyncedPerChat live ids beyond its cursor is paged in the
// background, which moves the cursor and empties the set.
func TestCatchUpSyncBoundsMemory(t *testing.T) {
	fs := newFakeServer(t)
	fs.addChat("c1", "alice", "bob")
	r := newRecorder()
	cfg := r.config(fs, "alice")
	cfg.MaxUnsyncedPerChat = 4
	c := dial(t, cfg)
	r.waitState(t, StateSynced)
	drainHistory(fs)
	var last string
	for i := range 4 {
		m := fs.store("c1", "bob", fmt.Sprint(i))
		fs.push("alice", m)
		last = m.MessageID
		recv(t, r.msgs, "message")
	}
	if ev := recv(t, fs.history, "catch-up page"); ev.chat != "c1" || ev.since != "" {
		t.Fatalf("catch-up %+v", ev)
	}
	for c.Cursors()["c1"] != last || c.Stats().DedupeUnsynced != 0 {
		time.Sleep(time.Millisecond) // the page is being processed
	}
	r.noMessage(t)
}

// A server that answers hello and closes at once (1013: tetra without its
// index) is retried until one connection holds: the client never reports
// such a connection as connected, and reconnecting after it does not close
// the ready channel twice (a fresh tester's panic on a real node).
func TestRefusedAfterHelloRetries(t *testing.T) {
	fs := newFakeServer(t)
	fs.mu.Lock()
	fs.refuse = 30
	fs.mu.Unlock()
	r := newRecorder()
	c := dial(t, r.config(fs, "alice"))
	r.waitState(t, StateSynced)
	if _, err := c.Send(context.Background(), "c1", "after the refusals"); err != nil {
		t.Fatalf("send once connected: %v", err)
	}
}

func TestSupersededStops(t *testing.T) {
	fs := newFakeServer(t)
	r1 := newRecorder()
	c1 := dial(t, r1.config(fs, "alice"))
	r1.waitState(t, StateSynced)
	r2 := newRecorder()
	dial(t, r2.config(fs, "alice")) // same device
	sc := r1.waitState(t, StateClosed)
	if sc.CloseCode != protocol.CloseSuperseded || !errors.Is(sc.Err, ErrSuperseded) {
		t.Fatalf("closed with %+v", sc)
	}
	if _, err := c1.Send(context.Background(), "c1", "hi"); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("send on a superseded client: %v", err)
	}
	if c1.State() != StateClosed {
		t.Fatalf("state %v", c1.State())
	}
}

func TestReconnectOnSupersededOption(t *testing.T) {
	fs := newFakeServer(t)
	r1 := newRecorder()
	cfg := r1.config(fs, "alice")
	cfg.ReconnectOnSuperseded = true
	c1 := dial(t, cfg)
	r1.waitState(t, StateSynced)
	r2 := newRecorder()
	c2 := dial(t, r2.config(fs, "alice"))
	sc := r1.waitState(t, StateReconnecting)
	if sc.CloseCode != protocol.CloseSuperseded {
		t.Fatalf("close code %d", sc.CloseCode)
	}
	r1.waitState(t, StateConnected) // took the device back
	_ = c2.Close()                  // stop the tug of war
	_ = c1.Close()
}

func TestReadReceipts(t *testing.T) {
	fs := newFakeServer(t)
	fs.addChat("c1", "alice", "bob")
	ra, rb := newRecorder(), newRecorder()
	a := dial(t, ra.config(fs, "alice"))
	dial(t, rb.config(fs, "bob"))
	if err := a.Read(context.Background(), "c1", "m1"); err != nil {
		t.Fatal(err)
	}
	rd := recv(t, rb.reads, "read receipt")
	if rd.ChatID != "c1" || rd.UserID != "alice" || rd.MessageID != "m1" {
		t.Fatalf("read %+v", rd)
	}
}

func TestHTTPHelpers(t *testing.T) {
	fs := newFakeServer(t)
	r := newRecorder()
	c := dial(t, r.config(fs, "alice"))
	ctx := context.Background()
	ch, err := c.CreateDirect(ctx, "bob")
	if err != nil || ch.Kind != KindDirect || !slices.Equal(ch.Members, []string{"alice", "bob"}) {
		t.Fatalf("CreateDirect: %+v %v", ch, err)
	}
	again, err := c.CreateDirect(ctx, "bob")
	if err != nil || again.ChatID != ch.ChatID {
		t.Fatalf("CreateDirect again: %+v %v", again, err)
	}
	g, err := c.CreateGroup(ctx, "Team", []string{"bob", "carol"})
	if err != nil || g.Kind != KindGroup || g.Title != "Team" || len(g.Members) != 3 {
		t.Fatalf("CreateGroup: %+v %v", g, err)
	}
	chats, err := c.Chats(ctx)
	if err != nil || len(chats) != 2 {
		t.Fatalf("Chats: %+v %v", chats, err)
	}
	if _, err := c.Send(ctx, ch.ChatID, "hi"); err != nil {
		t.Fatal(err)
	}
	msgs, more, err := c.History(ctx, ch.ChatID, "", 10)
	if err != nil || more || len(msgs) != 1 || msgs[0].Body != "hi" || msgs[0].SenderID != "alice" {
		t.Fatalf("History: %+v %v %v", msgs, more, err)
	}

	fs.addChat("secret", "mallory")
	_, _, err = c.History(ctx, "secret", "", 10)
	var e *Error
	if !errors.As(err, &e) || e.Status != http.StatusForbidden || e.Code != protocol.CodeForbidden || !strings.Contains(e.Message, "secret") {
		t.Fatalf("History of a foreign chat: %#v", err)
	}
	_, err = c.CreateGroup(ctx, "", nil)
	_ = err // the fake accepts it; the real server's rules are tested there
	if e := httpError(http.StatusNotFound, []byte("<html>nope</html>")); e.Code != protocol.CodeNotFound || e.Message != "<html>nope</html>" {
		t.Fatalf("non-JSON error body: %+v", e)
	}
}

// A write that does not finish within WriteTimeout (the server stopped
// reading and the socket buffers are full) drops the connection, which is
// then replaced.
func TestWriteTimeoutDropsConnection(t *testing.T) {
	stop := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ws, err := websocket.Accept(w, r, nil)
		if err != nil {
			return
		}
		defer ws.CloseNow()
		hello := protocol.Hello{Type: protocol.TypeHello, UserID: "alice", Device: "default", ConnectionID: "c",
			Limits: protocol.Limits{MaxBodyBytes: 1 << 20, MaxInFlightSends: 64}}
		if ws.Write(r.Context(), websocket.MessageText, protocol.Encode(hello)) != nil {
			return
		}
		<-stop // never reads: the client's writes fill the socket buffers
	}))
	defer srv.Close()
	defer close(stop)
	r := newRecorder()
	cfg := Config{URL: srv.URL, Token: "t", OnState: func(s StateChange) { r.states <- s }, DisableRateLimit: true,
		Chats: func(context.Context) ([]string, error) { return nil, nil }, WriteTimeout: 200 * time.Millisecond}
	c := dial(t, cfg)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	body := strings.Repeat("x", 1<<20)
	for i := range 64 {
		go func() { _, _ = c.SendWithID(ctx, "c1", fmt.Sprint("big", i), body) }()
	}
	sc := r.waitState(t, StateReconnecting)
	if sc.CloseCode != -1 || sc.Err == nil || !strings.Contains(sc.Err.Error(), "WriteTimeout") {
		t.Fatalf("dropped with %+v", sc)
	}
}

// A connection that goes silent is dropped by the liveness check and
// replaced.
func TestLivenessDropsSilentConnection(t *testing.T) {
	fs := newFakeServer(t)
	r := newRecorder()
	cfg := r.config(fs, "alice")
	cfg.PingInterval = 20 * time.Millisecond
	c := dial(t, cfg)
	r.waitState(t, StateSynced)
	recv(t, fs.pings, "application ping")
	fs.mu.Lock()
	fs.mute = true
	fs.mu.Unlock()
	sc := r.waitState(t, StateReconnecting)
	if sc.CloseCode != -1 || sc.Err == nil || !strings.Contains(sc.Err.Error(), "nothing received") {
		t.Fatalf("dropped with %+v", sc)
	}
	fs.mu.Lock()
	fs.mute = false
	fs.mu.Unlock()
	r.waitState(t, StateSynced)
	if c.Stats().Reconnects < 1 {
		t.Fatal("no reconnect")
	}
}

func TestCloseIsIdempotent(t *testing.T) {
	fs := newFakeServer(t)
	fs.addChat("c1", "alice")
	r := newRecorder()
	c := dial(t, r.config(fs, "alice"))
	r.waitState(t, StateSynced)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	sc := r.waitState(t, StateClosed)
	if !errors.Is(sc.Err, ErrClosed) || sc.CloseCode != int(websocket.StatusNormalClosure) {
		t.Fatalf("closed with %+v", sc)
	}
	if _, err := c.Send(context.Background(), "c1", "hi"); !errors.Is(err, ErrClosed) {
		t.Fatalf("send after Close: %v", err)
	}
	if err := c.Ack("x"); !errors.Is(err, ErrClosed) {
		t.Fatalf("ack after Close: %v", err)
	}

	// New + Run: Run returns nil after Close, ctx.Err() after its context.
	c2, err := New(r.config(fs, "bob"))
	if err != nil {
		t.Fatal(err)
	}
	ran := make(chan error, 1)
	go func() { ran <- c2.Run(context.Background()) }()
	if err := c2.WaitConnected(context.Background()); err != nil {
		t.Fatal(err)
	}
	_ = c2.Close()
	if err := recv(t, ran, "Run"); err != nil {
		t.Fatalf("Run after Close: %v", err)
	}

	c3, _ := New(r.config(fs, "carol"))
	ctx, cancel := context.WithCancel(context.Background())
	go func() { ran <- c3.Run(ctx) }()
	if err := c3.WaitConnected(context.Background()); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := recv(t, ran, "Run"); !errors.Is(err, context.Canceled) {
		t.Fatalf("Run after cancel: %v", err)
	}
	if _, err := c3.Send(context.Background(), "c1", "hi"); !errors.Is(err, ErrClosed) {
		t.Fatalf("send after Run ended: %v", err)
	}
}

// Close from inside a callback must not deadlock.
func TestCloseFromCallback(t *testing.T) {
	fs := newFakeServer(t)
	fs.addChat("c1", "alice", "bob")
	var c *Client
	closed := make(chan struct{})
	cfg := newRecorder().config(fs, "alice")
	cfg.OnMessage = func(protocol.Message) {
		_ = c.Close()
		close(closed)
	}
	c = dial(t, cfg)
	fs.push("alice", fs.store("c1", "bob", "close, please"))
	recv(t, closed, "Close from OnMessage")
}
