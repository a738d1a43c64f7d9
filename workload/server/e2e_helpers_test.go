package server_test

// Helpers of the end-to-end suite (e2e_test.go): the backend table, a test
// environment around one in-process server, a raw WebSocket test client on
// github.com/coder/websocket and small HTTP helpers. The suite deliberately
// does not use workload/client: it tests the wire contract of PROTOCOL.md
// itself, byte for byte.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/tetra-messenger/tetra/internal/testenv"
	"github.com/tetra-messenger/tetra/workload/server"
)

// Timeouts. waitLong bounds anything that must happen (generous: the suite
// runs with -race on a shared 2-core machine); quiet is how long a negative
// assertion ("nothing arrives") watches, several poll intervals.
const (
	waitLong = 15 * time.Second
	quiet    = 400 * time.Millisecond
)

// backend is one storage configuration the whole suite runs against.
type backend struct {
	name string
	// start boots a server on 127.0.0.1:0 over fresh, isolated storage for
	// t (cleaned up with t), after applying mutate to the configuration the
	// backend prepared. mutate sees the complete configuration, so a test
	// may keep a copy of it to start a second server on the same storage
	// (startServer). The server is shut down when t ends.
	start func(t *testing.T, mutate func(*server.Config)) *server.Server
}

// backends lists the backends. Adding one here (for example
// "postgres+redis", with a database schema and a Redis key prefix per test)
// runs every end-to-end test against it unchanged.
func backends(t *testing.T) []backend {
	t.Helper()
	return []backend{
		{name: "sqlite+memory", start: func(t *testing.T, mutate func(*server.Config)) *server.Server {
			t.Helper()
			cfg := server.DefaultConfig()
			cfg.Addr = "127.0.0.1:0"
			cfg.DataDir = t.TempDir()
			cfg.Store = "sqlite"
			cfg.Index = "memory"
			if mutate != nil {
				mutate(&cfg)
			}
			return startServer(t, cfg)
		}},
		{name: "postgres+redis", start: func(t *testing.T, mutate func(*server.Config)) *server.Server {
			t.Helper()
			cfg := server.DefaultConfig()
			cfg.Addr = "127.0.0.1:0"
			cfg.DataDir = t.TempDir() // only the token secret lives here
			cfg.Store = testenv.Postgres(t)
			cfg.Index, cfg.IndexPrefix = testenv.Redis(t)
			if mutate != nil {
				mutate(&cfg)
			}
			return startServer(t, cfg)
		}},
		// Kafka mode: history in the relational store, the outbox in a
		// topic of its own (kfake over TCP, or TETRA_TEST_KAFKA) fed by
		// the relay.
		{name: "sqlite+kafka", start: func(t *testing.T, mutate func(*server.Config)) *server.Server {
			t.Helper()
			cfg := server.DefaultConfig()
			cfg.Addr = "127.0.0.1:0"
			cfg.DataDir = t.TempDir()
			cfg.Store = "sqlite"
			cfg.Outbox = testenv.KafkaURL(t)
			cfg.Index = "memory"
			if mutate != nil {
				mutate(&cfg)
			}
			return startServer(t, cfg)
		}},
		{name: "postgres+kafka+redis", start: func(t *testing.T, mutate func(*server.Config)) *server.Server {
			t.Helper()
			cfg := server.DefaultConfig()
			cfg.Addr = "127.0.0.1:0"
			cfg.DataDir = t.TempDir()
			cfg.Store = testenv.Postgres(t)
			cfg.Outbox = testenv.KafkaURL(t)
			cfg.Index, cfg.IndexPrefix = testenv.Redis(t)
			if mutate != nil {
				mutate(&cfg)
			}
			return startServer(t, cfg)
		}},
	}
}

// customBackend is a backend of one test's own: the default configuration
// on 127.0.0.1:0 with a data directory for t, then set, then the mutate of
// newEnv.
func customBackend(name string, set func(*server.Config)) backend {
	return backend{name: name, start: func(t *testing.T, mutate func(*server.Config)) *server.Server {
		t.Helper()
		cfg := server.DefaultConfig()
		cfg.Addr, cfg.DataDir = "127.0.0.1:0", t.TempDir()
		set(&cfg)
		if mutate != nil {
			mutate(&cfg)
		}
		return startServer(t, cfg)
	}}
}

// forEachBackend runs fn as a parallel subtest per backend.
func forEachBackend(t *testing.T, fn func(t *testing.T, b backend)) {
	t.Helper()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			fn(t, b)
		})
	}
}

// startServer builds and starts a server with cfg and shuts it down when t
// ends (Shutdown is idempotent, so tests may shut it down earlier).
func startServer(t *testing.T, cfg server.Config) *server.Server {
	t.Helper()
	srv, err := server.New(t.Context(), cfg)
	if err != nil {
		t.Fatalf("server.New: %v", err)
	}
	if err := srv.Start(t.Context()); err != nil {
		t.Fatalf("server.Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			t.Errorf("Shutdown: %v", err)
		}
	})
	return srv
}

// env is one test's server and the means to talk to it.
type env struct {
	t      *testing.T
	srv    *server.Server
	cfg    server.Config // as started, for restarts on the same storage
	secret string        // the HS256 secret, to forge tokens
	http   *http.Client
}

// newEnv starts a server of backend b with the suite's short timings, then
// mutate. Unless mutate changes them: ping every 200 ms (pong timeout 10 s),
// poll every 20 ms, GC every 50 ms without grace, 5 s leases.
func newEnv(t *testing.T, b backend, mutate func(*server.Config)) *env {
	t.Helper()
	e := &env{t: t, secret: randomHex(24), http: &http.Client{Timeout: 20 * time.Second}}
	logs := &testenv.LogBuffer{}
	// Registered before the server's own cleanup, so it runs after it and
	// shows the shutdown too.
	t.Cleanup(func() {
		e.http.CloseIdleConnections()
		if t.Failed() {
			t.Logf("server log (tail):\n%s", logs.Tail(150))
		}
	})
	e.srv = b.start(t, func(c *server.Config) {
		c.JWTSecret = e.secret
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
		c.ShutdownGrace = 10 * time.Second
		c.Tuning.PingInterval = 200 * time.Millisecond
		c.Tuning.PollInterval = 20 * time.Millisecond
		c.Tuning.GCInterval = 50 * time.Millisecond
		c.Tuning.GCGrace = 0
		c.Tuning.Lease = 5 * time.Second
		if mutate != nil {
			mutate(c)
		}
		e.cfg = *c
	})
	return e
}

// restart shuts the server down and starts a new one on the same storage
// (and the same secret, so tokens stay valid), on a new port.
func (e *env) restart() {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := e.srv.Shutdown(ctx); err != nil {
		e.t.Fatalf("Shutdown: %v", err)
	}
	e.http.CloseIdleConnections()
	e.srv = startServer(e.t, e.cfg)
}

func randomHex(n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		panic(err)
	}
	return hex.EncodeToString(b)
}

// token mints a valid token for user.
func (e *env) token(user string) string {
	e.t.Helper()
	tok, err := e.srv.Signer().Issue(user, time.Hour)
	if err != nil {
		e.t.Fatalf("Issue(%q): %v", user, err)
	}
	return tok
}

// eventually polls cond every 10 ms until it holds or timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// outboxDepth sums the outbox depth over every partition.
func (e *env) outboxDepth() int64 {
	e.t.Helper()
	ctx := e.t.Context()
	parts, err := e.srv.Outbox().Partitions(ctx)
	if err != nil {
		e.t.Fatalf("outbox partitions: %v", err)
	}
	var n int64
	for _, p := range parts {
		st, err := e.srv.Outbox().Stats(ctx, p)
		if err != nil {
			e.t.Fatalf("outbox stats: %v", err)
		}
		n += st.Depth
	}
	return n
}

// ---------------------------------------------------------------- HTTP

// chatJSON is a chat as PROTOCOL.md §2 shows it.
type chatJSON struct {
	ChatID    string            `json:"chatId"`
	Kind      string            `json:"kind"`
	Title     string            `json:"title"`
	Members   []string          `json:"members"`
	CreatedBy string            `json:"createdBy"`
	LastRead  map[string]string `json:"lastRead"`
	Unread    *int              `json:"unread"`
}

// msgJSON is a history message (the message frame without type).
type msgJSON struct {
	MessageID     string `json:"messageId"`
	CorrelationID string `json:"correlationId"`
	ChatID        string `json:"chatId"`
	SenderID      string `json:"senderId"`
	Body          string `json:"body"`
	SentAt        string `json:"sentAt"`
	// PROTOCOL.md §7.3.
	Edits    string `json:"edits"`
	Deletes  string `json:"deletes"`
	EditedAt string `json:"editedAt"`
	Deleted  bool   `json:"deleted"`
}

type pageJSON struct {
	Messages []msgJSON `json:"messages"`
	HasMore  bool      `json:"hasMore"`
}

type errorJSON struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// call does one HTTP request with token as bearer (none when empty); body
// is sent as is when it is a string or []byte, JSON-encoded otherwise. It
// reports any 5xx as a test error: no request may get one.
func (e *env) call(method, path, token string, body any) (int, []byte) {
	e.t.Helper()
	return e.callHeader(method, path, http.Header{"Authorization": bearerHeader(token)}, body)
}

func bearerHeader(token string) []string {
	if token == "" {
		return nil
	}
	return []string{"Bearer " + token}
}

func (e *env) callHeader(method, path string, h http.Header, body any) (int, []byte) {
	e.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		raw, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequestWithContext(e.t.Context(), method, e.srv.URL()+path, rd)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	for k, v := range h {
		if len(v) > 0 {
			req.Header[k] = v
		}
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := e.http.Do(req)
	if err != nil {
		e.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatalf("%s %s: read body: %v", method, path, err)
	}
	if resp.StatusCode >= 500 {
		e.t.Errorf("%s %s answered %d (no request may get a 5xx): %s", method, path, resp.StatusCode, raw)
	}
	return resp.StatusCode, raw
}

// decode unmarshals raw into v or fails the test.
func decode[T any](t testing.TB, raw []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatalf("decode %T from %s: %v", v, raw, err)
	}
	return v
}

// expectInvalid checks a 400 {"error":{"code":"invalid","message":...}}.
func expectInvalid(t testing.TB, what string, status int, raw []byte) {
	t.Helper()
	if status != http.StatusBadRequest {
		t.Errorf("%s: status %d, want 400; body %s", what, status, raw)
		return
	}
	var ej errorJSON
	if err := json.Unmarshal(raw, &ej); err != nil || ej.Error.Code != "invalid" || ej.Error.Message == "" {
		t.Errorf(`%s: body %s, want {"error":{"code":"invalid","message":"..."}}`, what, raw)
	}
}

// expectDenied checks that a non-member got 403 or 404 and no data.
func expectDenied(t testing.TB, what string, status int, raw []byte) {
	t.Helper()
	if status != http.StatusForbidden && status != http.StatusNotFound {
		t.Errorf("%s: status %d, want 403 or 404; body %s", what, status, raw)
	}
	for _, leak := range []string{`"messages"`, `"members"`, `"chatId"`} {
		if bytes.Contains(raw, []byte(leak)) {
			t.Errorf("%s: denied answer leaks %s: %s", what, leak, raw)
		}
	}
}

func (e *env) createDirect(user, peer string) chatJSON {
	e.t.Helper()
	status, raw := e.call("POST", "/api/chats", e.token(user), map[string]any{"kind": "direct", "members": []string{peer}})
	if status != http.StatusCreated && status != http.StatusOK {
		e.t.Fatalf("create direct %s-%s: %d %s", user, peer, status, raw)
	}
	return decode[chatJSON](e.t, raw)
}

func (e *env) createGroup(user, title string, members ...string) chatJSON {
	e.t.Helper()
	if members == nil {
		members = []string{} // not null: PROTOCOL.md §7.7 refuses a null
	}
	status, raw := e.call("POST", "/api/chats", e.token(user), map[string]any{"kind": "group", "title": title, "members": members})
	if status != http.StatusCreated {
		e.t.Fatalf("create group: %d %s", status, raw)
	}
	return decode[chatJSON](e.t, raw)
}

// page GETs one history page; query is the raw query string ("" for none).
func (e *env) page(user, chatID, query string) pageJSON {
	e.t.Helper()
	path := "/api/chats/" + url.PathEscape(chatID) + "/messages"
	if query != "" {
		path += "?" + query
	}
	status, raw := e.call("GET", path, e.token(user), nil)
	if status != http.StatusOK {
		e.t.Fatalf("GET %s as %s: %d %s", path, user, status, raw)
	}
	var probe map[string]json.RawMessage
	if err := json.Unmarshal(raw, &probe); err != nil {
		e.t.Fatalf("GET %s: %v in %s", path, err, raw)
	}
	if m, ok := probe["messages"]; !ok || !bytes.HasPrefix(bytes.TrimSpace(m), []byte("[")) {
		e.t.Fatalf(`GET %s: "messages" must be an array: %s`, path, raw)
	}
	if _, ok := probe["hasMore"]; !ok {
		e.t.Fatalf(`GET %s: "hasMore" missing: %s`, path, raw)
	}
	return decode[pageJSON](e.t, raw)
}

// history pages the whole history of chatID after since (limit 500), checking
// that hasMore is true exactly on the pages that are not the last.
func (e *env) history(user, chatID, since string) []msgJSON {
	e.t.Helper()
	var all []msgJSON
	for i := 0; ; i++ {
		q := url.Values{"limit": {"500"}}
		if since != "" {
			q.Set("since", since)
		}
		p := e.page(user, chatID, q.Encode())
		all = append(all, p.Messages...)
		if !p.HasMore {
			return all
		}
		if len(p.Messages) == 0 {
			e.t.Fatalf("history of %s: empty page with hasMore", chatID)
		}
		if i > 1000 {
			e.t.Fatalf("history of %s: paging does not end", chatID)
		}
		since = p.Messages[len(p.Messages)-1].MessageID
	}
}

func ids(ms []msgJSON) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.MessageID
	}
	return out
}

// ------------------------------------------------------------ WebSocket

// frame is any server frame; fields absent from a type stay empty. Raw keeps
// the bytes for exact checks.
type frame struct {
	Type          string          `json:"type"`
	UserID        string          `json:"userId"`
	Device        string          `json:"device"`
	ConnectionID  string          `json:"connectionId"`
	Limits        json.RawMessage `json:"limits"`
	CorrelationID string          `json:"correlationId"`
	MessageID     string          `json:"messageId"`
	ChatID        string          `json:"chatId"`
	SenderID      string          `json:"senderId"`
	Body          string          `json:"body"`
	SentAt        string          `json:"sentAt"`
	Code          string          `json:"code"`
	Message       string          `json:"message"`
	Edits         string          `json:"edits"`    // PROTOCOL.md §7.3
	Deletes       string          `json:"deletes"`  // PROTOCOL.md §7.3
	Online        *bool           `json:"online"`   // PROTOCOL.md §7.4 presence
	LastSeen      string          `json:"lastSeen"` // PROTOCOL.md §7.4 presence
	Raw           []byte          `json:"-"`
}

func (f frame) String() string { return string(f.Raw) }

// keysOf returns the sorted top-level keys of a JSON object.
func keysOf(t testing.TB, raw []byte) []string {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatalf("not a JSON object: %s", raw)
	}
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// expectKeys checks that raw has exactly the given top-level keys.
func expectKeys(t testing.TB, what string, raw []byte, want ...string) {
	t.Helper()
	want = slices.Clone(want)
	slices.Sort(want)
	if got := keysOf(t, raw); !slices.Equal(got, want) {
		t.Errorf("%s: keys %v, want exactly %v in %s", what, got, want, raw)
	}
}

// expectUTCTime checks an RFC 3339 UTC timestamp and returns it.
func expectUTCTime(t testing.TB, what, s string) time.Time {
	t.Helper()
	ts, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Errorf("%s: %q is not RFC 3339: %v", what, s, err)
		return time.Time{}
	}
	if !strings.HasSuffix(s, "Z") || ts.Location() != time.UTC {
		t.Errorf("%s: %q is not in UTC (want a Z suffix)", what, s)
	}
	if d := time.Since(ts); d < -time.Minute || d > time.Hour {
		t.Errorf("%s: %q is not a current time", what, s)
	}
	return ts
}

// wsClient is a raw test client: one reader goroutine puts every frame on
// in; the test goroutine takes them with the expect helpers, keeping frames
// it was not looking for in backlog for later expectations. A wsClient is
// used by one goroutine at a time.
type wsClient struct {
	t     testing.TB
	name  string // user/device, for messages
	conn  *websocket.Conn
	hello frame

	ctx    context.Context
	cancel context.CancelFunc

	in       chan frame // closed when the reader ends
	readErr  error      // why the reader ended; valid once in is closed
	started  sync.Once
	backlog  []frame
	received []frame // every frame taken from in, in order
	ended    bool
}

type dialOpts struct {
	device string // "" sends no device parameter (the server's default)
	query  bool   // token in ?token= instead of the Authorization header
	token  string // overrides the user's valid token
}

// dialError is a refused upgrade.
type dialError struct {
	status int
	err    error
}

func (d *dialError) Error() string {
	return fmt.Sprintf("upgrade refused with HTTP %d: %v", d.status, d.err)
}

// wsURL is the /ws URL of the server with the given query.
func (e *env) wsURL(q url.Values) string {
	u := "ws" + strings.TrimPrefix(e.srv.URL(), "http") + "/ws"
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	return u
}

// dial opens a socket for user, checks that hello is the first frame and
// waits for a pong to a ping: the server reads frames only once the
// connection is registered for live delivery, so after the pong every
// message committed is pushed to it. (hello itself is queued before the
// registration, so a message committed right after hello may be left to
// history; the tests that count pushes must not race that.)
func (e *env) dial(user string, o dialOpts) *wsClient {
	e.t.Helper()
	c, err := e.dialE(user, o)
	if err != nil {
		e.t.Fatalf("dial %s: %v", user, err)
	}
	return c
}

// dialE is dial for any goroutine: it reports instead of failing.
func (e *env) dialE(user string, o dialOpts) (*wsClient, error) {
	tok := o.token
	if tok == "" {
		tok = e.token(user)
	}
	q := url.Values{}
	if o.device != "" {
		q.Set("device", o.device)
	}
	h := http.Header{}
	if o.query {
		q.Set("token", tok)
	} else {
		h.Set("Authorization", "Bearer "+tok)
	}
	dctx, dcancel := context.WithTimeout(context.Background(), waitLong)
	defer dcancel()
	conn, resp, err := websocket.Dial(dctx, e.wsURL(q), &websocket.DialOptions{HTTPHeader: h})
	if err != nil {
		if resp != nil {
			return nil, &dialError{status: resp.StatusCode, err: err}
		}
		return nil, err
	}
	name := user
	if o.device != "" {
		name += "/" + o.device
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &wsClient{t: e.t, name: name, conn: conn, ctx: ctx, cancel: cancel, in: make(chan frame, 16384)}
	e.t.Cleanup(func() {
		cancel()
		conn.CloseNow()
	})
	c.startReading()
	f, err := c.nextE(nil, waitLong)
	if err != nil {
		return nil, fmt.Errorf("%s: no hello: %w", name, err)
	}
	if f.Type != "hello" {
		return nil, fmt.Errorf("%s: first frame is %s, want hello", name, f)
	}
	c.hello = f
	if err := c.syncE(); err != nil {
		return nil, err
	}
	return c, nil
}

// startReading starts the reader goroutine (once). coder/websocket answers
// pings only while Read runs; the reader always runs, so pings are answered.
func (c *wsClient) startReading() {
	c.started.Do(func() {
		go func() {
			defer close(c.in)
			for {
				typ, data, err := c.conn.Read(c.ctx)
				if err != nil {
					c.readErr = err
					return
				}
				f := frame{Raw: data}
				if typ != websocket.MessageText {
					f.Type = "!binary"
				} else if json.Unmarshal(data, &f) != nil {
					f.Type = "!not-json"
				}
				c.in <- f
			}
		}()
	})
}

// isType matches frames of one type.
func isType(typ string) func(frame) bool { return func(f frame) bool { return f.Type == typ } }

// answers matches the accepted or error frame answering a send of corr.
func answers(corr string) func(frame) bool {
	return func(f frame) bool { return (f.Type == "accepted" || f.Type == "error") && f.CorrelationID == corr }
}

// messageID matches the message frame of id.
func messageID(id string) func(frame) bool {
	return func(f frame) bool { return f.Type == "message" && f.MessageID == id }
}

// nextE returns the first frame matching pred (nil: any), from the backlog
// or the socket, waiting up to timeout.
func (c *wsClient) nextE(pred func(frame) bool, timeout time.Duration) (frame, error) {
	for i, f := range c.backlog {
		if pred == nil || pred(f) {
			c.backlog = slices.Delete(c.backlog, i, i+1)
			return f, nil
		}
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		if c.ended {
			return frame{}, fmt.Errorf("%s: connection closed (%v)", c.name, c.readErr)
		}
		select {
		case f, ok := <-c.in:
			if !ok {
				c.ended = true
				continue
			}
			c.received = append(c.received, f)
			if pred == nil || pred(f) {
				return f, nil
			}
			c.backlog = append(c.backlog, f)
		case <-timer.C:
			return frame{}, fmt.Errorf("%s: timed out after %v; unmatched frames: %v", c.name, timeout, c.backlog)
		}
	}
}

// next is nextE that fails the test.
func (c *wsClient) next(what string, pred func(frame) bool) frame {
	c.t.Helper()
	f, err := c.nextE(pred, waitLong)
	if err != nil {
		c.t.Fatalf("waiting for %s: %v", what, err)
	}
	return f
}

// expect waits for a frame of typ.
func (c *wsClient) expect(typ string) frame {
	c.t.Helper()
	return c.next(typ+" frame", isType(typ))
}

// expectNone watches for d and fails if a frame matching pred arrives (or
// is already in the backlog). A closed connection ends the watch early.
func (c *wsClient) expectNone(what string, pred func(frame) bool, d time.Duration) {
	c.t.Helper()
	for _, f := range c.backlog {
		if pred(f) {
			c.t.Fatalf("%s: got %s, want no %s", c.name, f, what)
		}
	}
	if f, err := c.nextE(pred, d); err == nil {
		c.t.Fatalf("%s: got %s, want no %s", c.name, f, what)
	}
}

// drain moves every frame already received to the backlog without waiting.
func (c *wsClient) drain() {
	for !c.ended {
		select {
		case f, ok := <-c.in:
			if !ok {
				c.ended = true
				return
			}
			c.received = append(c.received, f)
			c.backlog = append(c.backlog, f)
		default:
			return
		}
	}
}

// count returns how many frames matching pred were received so far.
func (c *wsClient) count(pred func(frame) bool) int {
	c.drain()
	n := 0
	for _, f := range c.received {
		if pred(f) {
			n++
		}
	}
	return n
}

// closeStatusE waits for the connection to end and returns its close code
// (-1 when it ended without a close frame).
func (c *wsClient) closeStatusE(timeout time.Duration) (websocket.StatusCode, error) {
	deadline := time.Now().Add(timeout)
	for !c.ended {
		if _, err := c.nextE(func(frame) bool { return false }, time.Until(deadline)); err != nil && !c.ended {
			return 0, fmt.Errorf("%s: still open after %v", c.name, timeout)
		}
	}
	return websocket.CloseStatus(c.readErr), nil
}

// expectClose waits for the server to close the socket with code.
func (c *wsClient) expectClose(code websocket.StatusCode) {
	c.t.Helper()
	got, err := c.closeStatusE(waitLong)
	if err != nil {
		c.t.Fatalf("want close %d: %v", code, err)
	}
	if got != code {
		c.t.Fatalf("%s: closed with %d (%v), want %d", c.name, got, c.readErr, code)
	}
}

// write sends v as a JSON text frame.
func (c *wsClient) write(v any) {
	c.t.Helper()
	if err := c.writeE(v); err != nil {
		c.t.Fatalf("%s: write: %v", c.name, err)
	}
}

func (c *wsClient) writeE(v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return c.writeRawE(websocket.MessageText, raw)
}

func (c *wsClient) writeRawE(typ websocket.MessageType, raw []byte) error {
	ctx, cancel := context.WithTimeout(c.ctx, waitLong)
	defer cancel()
	return c.conn.Write(ctx, typ, raw)
}

// writeText sends s verbatim as a text frame.
func (c *wsClient) writeText(s string) {
	c.t.Helper()
	if err := c.writeRawE(websocket.MessageText, []byte(s)); err != nil {
		c.t.Fatalf("%s: write: %v", c.name, err)
	}
}

type sendFrame struct {
	Type          string `json:"type"`
	ChatID        string `json:"chatId"`
	CorrelationID string `json:"correlationId"`
	Body          string `json:"body"`
}

func (c *wsClient) send(chatID, corr, body string) {
	c.t.Helper()
	c.write(sendFrame{Type: "send", ChatID: chatID, CorrelationID: corr, Body: body})
}

// sendOK sends and waits for accepted, failing on an error frame.
func (c *wsClient) sendOK(chatID, corr, body string) frame {
	c.t.Helper()
	f, err := c.sendOKE(chatID, corr, body)
	if err != nil {
		c.t.Fatal(err)
	}
	return f
}

func (c *wsClient) sendOKE(chatID, corr, body string) (frame, error) {
	if err := c.writeE(sendFrame{Type: "send", ChatID: chatID, CorrelationID: corr, Body: body}); err != nil {
		return frame{}, err
	}
	f, err := c.nextE(answers(corr), waitLong)
	if err != nil {
		return frame{}, fmt.Errorf("answer to send %s: %w", corr, err)
	}
	if f.Type != "accepted" {
		return frame{}, fmt.Errorf("%s: send %s answered %s, want accepted", c.name, corr, f)
	}
	return f, nil
}

// sendErr sends and waits for an error frame with code (and corr).
func (c *wsClient) sendErr(chatID, corr, body, code string) frame {
	c.t.Helper()
	c.send(chatID, corr, body)
	f := c.next("answer to "+corr, answers(corr))
	if f.Type != "error" || f.Code != code {
		c.t.Fatalf("%s: send %s answered %s, want error %s", c.name, corr, f, code)
	}
	return f
}

// ack acknowledges message ids.
func (c *wsClient) ack(ids ...string) {
	c.t.Helper()
	if err := c.writeE(map[string]any{"type": "ack", "messageIds": ids}); err != nil {
		c.t.Fatalf("%s: ack: %v", c.name, err)
	}
}

// sync sends a ping and waits for the pong: everything the server read
// from this socket before has been handled.
func (c *wsClient) sync() {
	c.t.Helper()
	if err := c.syncE(); err != nil {
		c.t.Fatal(err)
	}
}

func (c *wsClient) syncE() error {
	if err := c.writeE(map[string]string{"type": "ping"}); err != nil {
		return fmt.Errorf("%s: ping: %w", c.name, err)
	}
	if _, err := c.nextE(isType("pong"), waitLong); err != nil {
		return fmt.Errorf("%s: pong: %w", c.name, err)
	}
	return nil
}

// close closes the socket from the client side, without waiting.
func (c *wsClient) close() {
	c.cancel()
	c.conn.CloseNow()
}

// isDialStatus reports whether err is an upgrade refused with status.
func isDialStatus(err error, status int) bool {
	var de *dialError
	return errors.As(err, &de) && de.status == status
}

// rawConn is a WebSocket client on a bare TCP connection: after the
// handshake it reads nothing until asked, so it answers no ping, and it
// then parses the server's frames itself (a library client would try to
// answer the queued pings first and fail on the closed socket).
type rawConn struct {
	conn net.Conn
	br   *bufio.Reader
}

// dialRaw opens /ws for user over a bare TCP connection.
func (e *env) dialRaw(user string) *rawConn {
	e.t.Helper()
	return e.dialRawWith(user, &net.Dialer{})
}

// dialRawWith is dialRaw through d (to set socket options before the
// connection exists, for one).
func (e *env) dialRawWith(user string, d *net.Dialer) *rawConn {
	e.t.Helper()
	u, err := url.Parse(e.srv.URL())
	if err != nil {
		e.t.Fatal(err)
	}
	d.Timeout = waitLong
	conn, err := d.Dial("tcp", u.Host)
	if err != nil {
		e.t.Fatalf("dial %s: %v", u.Host, err)
	}
	e.t.Cleanup(func() { conn.Close() })
	key := make([]byte, 16)
	_, _ = rand.Read(key)
	req := "GET /ws HTTP/1.1\r\nHost: " + u.Host + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: " + base64.StdEncoding.EncodeToString(key) + "\r\n" +
		"Authorization: Bearer " + e.token(user) + "\r\n\r\n"
	_ = conn.SetDeadline(time.Now().Add(waitLong))
	if _, err := io.WriteString(conn, req); err != nil {
		e.t.Fatalf("raw handshake: %v", err)
	}
	br := bufio.NewReader(conn)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		e.t.Fatalf("raw handshake: %v", err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		e.t.Fatalf("raw handshake: HTTP %d", resp.StatusCode)
	}
	_ = conn.SetDeadline(time.Time{})
	return &rawConn{conn: conn, br: br}
}

// readUntilClose reads the server's frames up to its close frame and
// returns the text messages before it and the close code (-1: the socket
// ended without a close frame). Fragmented messages are not expected.
func (r *rawConn) readUntilClose(timeout time.Duration) (texts []string, code int, err error) {
	_ = r.conn.SetReadDeadline(time.Now().Add(timeout))
	for {
		var h [2]byte
		if _, err := io.ReadFull(r.br, h[:]); err != nil {
			return texts, -1, err
		}
		op, n := h[0]&0x0f, uint64(h[1]&0x7f)
		switch n {
		case 126:
			var b [2]byte
			if _, err := io.ReadFull(r.br, b[:]); err != nil {
				return texts, -1, err
			}
			n = uint64(binary.BigEndian.Uint16(b[:]))
		case 127:
			var b [8]byte
			if _, err := io.ReadFull(r.br, b[:]); err != nil {
				return texts, -1, err
			}
			n = binary.BigEndian.Uint64(b[:])
		}
		if h[1]&0x80 != 0 || n > 1<<20 {
			return texts, -1, fmt.Errorf("unexpected frame header %x (length %d)", h, n)
		}
		payload := make([]byte, n)
		if _, err := io.ReadFull(r.br, payload); err != nil {
			return texts, -1, err
		}
		switch op {
		case 0x1:
			texts = append(texts, string(payload))
		case 0x8:
			if len(payload) < 2 {
				return texts, 1005, nil
			}
			return texts, int(binary.BigEndian.Uint16(payload)), nil
		}
	}
}
