// Package hostile_test attacks an in-process tetra server with clients that
// misbehave on purpose (issue 7): each must get a clear error or close,
// while the other clients keep their latency and memory stays bounded.
package hostile_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/tetra-messenger/tetra/workload/client"
	"github.com/tetra-messenger/tetra/workload/protocol"
	"github.com/tetra-messenger/tetra/workload/server"
)

const secret = "hostile-test-secret-0123456789abcdef"

type env struct {
	t   *testing.T
	srv *server.Server
}

func start(t *testing.T, mutate func(*server.Config)) *env {
	t.Helper()
	cfg := server.DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.DataDir = t.TempDir()
	cfg.JWTSecret = secret
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	cfg.Tuning.PollInterval = 20 * time.Millisecond
	if mutate != nil {
		mutate(&cfg)
	}
	srv, err := server.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	return &env{t: t, srv: srv}
}

func (e *env) token(user string) string {
	tok, err := e.srv.Signer().Issue(user, time.Hour)
	if err != nil {
		e.t.Fatal(err)
	}
	return tok
}

func (e *env) wsURL() string { return "ws" + strings.TrimPrefix(e.srv.URL(), "http") + "/ws" }

func (e *env) client(user string, onMsg func(protocol.Message)) *client.Client {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	c, err := client.Dial(ctx, client.Config{URL: e.srv.URL(), Token: e.token(user), OnMessage: onMsg})
	if err != nil {
		e.t.Fatalf("dial %s: %v", user, err)
	}
	e.t.Cleanup(func() { c.Close() })
	return c
}

// rawWS opens a socket with github.com/coder/websocket, which reads only
// when asked: a client that never calls Read never reads its socket.
func (e *env) rawWS(user string) (*websocket.Conn, *http.Response, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h := http.Header{}
	h.Set("Authorization", "Bearer "+e.token(user))
	c, resp, err := websocket.Dial(ctx, e.wsURL(), &websocket.DialOptions{HTTPHeader: h})
	if err == nil {
		c.SetReadLimit(1 << 20)
		e.t.Cleanup(func() { c.CloseNow() })
	}
	return c, resp, err
}

// probe is a healthy pair that measures send-to-receive latency while the
// attack runs.
type probe struct {
	e        *env
	from     *client.Client
	chat     string
	mu       sync.Mutex
	arrived  map[string]time.Time
	arrivedC chan struct{}
}

func newProbe(e *env, tag string) *probe {
	p := &probe{e: e, arrived: map[string]time.Time{}, arrivedC: make(chan struct{}, 1024)}
	p.from = e.client("probe-a-"+tag, nil)
	e.client("probe-b-"+tag, func(m protocol.Message) {
		p.mu.Lock()
		p.arrived[m.MessageID] = time.Now()
		p.mu.Unlock()
		select {
		case p.arrivedC <- struct{}{}:
		default:
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	chat, err := p.from.CreateDirect(ctx, "probe-b-"+tag)
	if err != nil {
		e.t.Fatal(err)
	}
	p.chat = chat.ChatID
	return p
}

// measure sends n messages one after another and returns the worst
// send-to-delivery latency; it fails the test if one does not arrive.
func (p *probe) measure(n int) time.Duration {
	t := p.e.t
	t.Helper()
	var worst time.Duration
	for i := range n {
		t0 := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		acc, err := p.from.Send(ctx, p.chat, fmt.Sprintf("probe %d", i))
		cancel()
		if err != nil {
			t.Errorf("probe send: %v", err)
			return worst
		}
		deadline := time.After(10 * time.Second)
		for {
			p.mu.Lock()
			at, ok := p.arrived[acc.MessageID]
			p.mu.Unlock()
			if ok {
				worst = max(worst, at.Sub(t0))
				break
			}
			select {
			case <-p.arrivedC:
			case <-time.After(20 * time.Millisecond):
			case <-deadline:
				t.Errorf("probe message %s not delivered within 10 s", acc.MessageID)
				return worst
			}
		}
	}
	return worst
}

// During an attack the healthy pair keeps this latency (generous: -race on
// 2 shared cores).
const maxProbeLatency = 1500 * time.Millisecond

func heapInuse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// closeCode reads c until it fails and returns the close code (-1 when the
// connection ended without a close frame).
func closeCode(c *websocket.Conn, timeout time.Duration) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		_, _, err := c.Read(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return 0, fmt.Errorf("still open after %s", timeout)
			}
			return int(websocket.CloseStatus(err)), nil
		}
	}
}

// A client that never reads its socket while thousands of messages are
// pushed to it: it is withdrawn (4002/4003/4004), the server's heap does
// not grow with what was pushed, and another pair keeps low latency.
func TestNeverReads(t *testing.T) {
	e := start(t, func(c *server.Config) {
		c.Tuning.SendsPerSecond = 5000
		c.Tuning.MaxInFlightSends = 256
	})
	p := newProbe(e, "nr")
	pusher := e.client("pusher", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	chat, err := pusher.CreateDirect(ctx, "sloth")
	if err != nil {
		t.Fatal(err)
	}
	sloth, _, err := e.rawWS("sloth")
	if err != nil {
		t.Fatal(err)
	}
	p.measure(3)
	before := heapInuse()

	const n, workers = 2000, 32
	body := strings.Repeat("x", 4000)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= n; i = next.Add(1) {
				if _, err := pusher.Send(ctx, chat.ChatID, body); err != nil {
					t.Errorf("push %d: %v", i, err)
					return
				}
			}
		}()
	}
	worst := p.measure(10)
	wg.Wait()
	worst = max(worst, p.measure(5))
	time.Sleep(500 * time.Millisecond)
	after := heapInuse()
	growth := int64(after) - int64(before)
	t.Logf("pushed %d × %d B to a client that never reads: heap in use %d -> %d MiB (%+d KiB); probe worst latency %s",
		n, len(body), before>>20, after>>20, growth>>10, worst)
	if growth > 6<<20 { // well under the 8 MB pushed
		t.Errorf("heap grew by %d MiB while pushing to a client that never reads", growth>>20)
	}
	if worst > maxProbeLatency {
		t.Errorf("a healthy pair's worst latency was %s during the attack", worst)
	}
	// Now read what the kernel buffered: the server closed it.
	code, err := closeCode(sloth, 10*time.Second)
	if err != nil {
		t.Fatalf("the client that never reads was not withdrawn: %v", err)
	}
	if code != protocol.ClosePending && code != protocol.CloseAttempts && code != protocol.CloseIdle {
		t.Errorf("the client that never reads was closed with %d, want a withdrawal code (4002/4003/4004)", code)
	}
}

// One user opening 1,000 sockets: beyond the per-user cap the upgrade gets
// HTTP 429; other users connect and keep their latency.
func TestThousandConnections(t *testing.T) {
	e := start(t, nil)
	p := newProbe(e, "tc")
	var ok, tooMany, other atomic.Int64
	var wg sync.WaitGroup
	var next atomic.Int64
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := next.Add(1); i <= 1000; i = next.Add(1) {
				_, resp, err := e.rawWS("hog")
				switch {
				case err == nil:
					ok.Add(1)
				case resp != nil && resp.StatusCode == http.StatusTooManyRequests:
					tooMany.Add(1)
				default:
					other.Add(1)
					t.Logf("dial %d: %v", i, err)
				}
			}
		}()
	}
	worst := p.measure(10)
	wg.Wait()
	worst = max(worst, p.measure(5))
	limit := int64(server.DefaultConfig().MaxConnsPerUser)
	t.Logf("1000 upgrades of one user: %d open, %d × 429, %d other; probe worst %s", ok.Load(), tooMany.Load(), other.Load(), worst)
	if ok.Load() > limit || tooMany.Load() < 1000-limit || other.Load() != 0 {
		t.Errorf("per-user cap %d: %d opened, %d got 429, %d failed otherwise", limit, ok.Load(), tooMany.Load(), other.Load())
	}
	if worst > maxProbeLatency {
		t.Errorf("a healthy pair's worst latency was %s", worst)
	}
	e.client("newcomer", nil) // another user still gets in
}

// A client that floods sends past its credits and rate gets
// credit_exhausted / rate_limited errors; nothing it did not get accepted
// is stored, others keep their latency.
func TestFloodPastCreditsAndRate(t *testing.T) {
	e := start(t, nil)
	p := newProbe(e, "fl")
	owner := e.client("flooder", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	chat, err := owner.CreateDirect(ctx, "victim")
	if err != nil {
		t.Fatal(err)
	}
	owner.Close()
	c, _, err := e.rawWS("flooder")
	if err != nil {
		t.Fatal(err)
	}
	codes := map[string]int{}
	accepted := 0
	readDone := make(chan int)
	go func() {
		code := 0
		for {
			_, raw, err := c.Read(ctx)
			if err != nil {
				code = int(websocket.CloseStatus(err))
				break
			}
			var f struct{ Type, Code string }
			_ = json.Unmarshal(raw, &f)
			switch f.Type {
			case "error":
				codes[f.Code]++
			case "accepted":
				accepted++
			}
		}
		readDone <- code
	}()
	const n = 3000
	go func() {
		for i := range n {
			frame := fmt.Sprintf(`{"type":"send","chatId":%q,"correlationId":"f-%d","body":"flood"}`, chat.ChatID, i)
			if c.Write(ctx, websocket.MessageText, []byte(frame)) != nil {
				return
			}
		}
	}()
	worst := p.measure(10)
	time.Sleep(time.Second)
	c.Close(websocket.StatusNormalClosure, "")
	code := <-readDone
	t.Logf("flood of %d sends: %d accepted, errors %v, close %d; probe worst %s", n, accepted, codes, code, worst)
	if codes[protocol.CodeRateLimited]+codes[protocol.CodeCreditExhausted] == 0 {
		t.Errorf("a flood past credits and rate got no rate_limited/credit_exhausted error: %v", codes)
	}
	if accepted >= n {
		t.Errorf("every one of %d flooded sends was accepted", n)
	}
	if worst > maxProbeLatency {
		t.Errorf("a healthy pair's worst latency was %s", worst)
	}
	// History holds exactly what was accepted.
	vc := e.client("victim", nil)
	stored := 0
	since := ""
	for {
		page, more, err := vc.History(ctx, chat.ChatID, since, 500)
		if err != nil {
			t.Fatal(err)
		}
		stored += len(page)
		if !more || len(page) == 0 {
			break
		}
		since = page[len(page)-1].MessageID
	}
	if stored != accepted {
		t.Errorf("history holds %d flooded messages, %d were accepted", stored, accepted)
	}
}

// rawUpgrade opens a socket by hand (net.Conn), so a test can write
// arbitrary bytes, and returns it with a reader past the 101 answer.
func (e *env) rawUpgrade(user string) (net.Conn, *bufio.Reader) {
	e.t.Helper()
	nc, err := net.Dial("tcp", e.srv.Addr())
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { nc.Close() })
	fmt.Fprintf(nc, "GET /ws HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"+
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nAuthorization: Bearer %s\r\n\r\n",
		e.srv.Addr(), e.token(user))
	br := bufio.NewReader(nc)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != http.StatusSwitchingProtocols {
		e.t.Fatalf("upgrade: %v %v", resp, err)
	}
	return nc, br
}

// readCloseFrame parses the server's (unmasked) frames until a close frame
// and returns its code; -1 when the connection ends without one.
func readCloseFrame(br *bufio.Reader) int {
	for {
		var h [2]byte
		if _, err := io.ReadFull(br, h[:]); err != nil {
			return -1
		}
		n := uint64(h[1] & 0x7f)
		switch n {
		case 126:
			var b [2]byte
			if _, err := io.ReadFull(br, b[:]); err != nil {
				return -1
			}
			n = uint64(binary.BigEndian.Uint16(b[:]))
		case 127:
			var b [8]byte
			if _, err := io.ReadFull(br, b[:]); err != nil {
				return -1
			}
			n = binary.BigEndian.Uint64(b[:])
		}
		if n > 1<<20 {
			return -1
		}
		payload := make([]byte, n)
		if _, err := io.ReadFull(br, payload); err != nil {
			return -1
		}
		if h[0]&0x0f == 0x8 {
			if len(payload) < 2 {
				return 1005
			}
			return int(binary.BigEndian.Uint16(payload))
		}
	}
}

// Clients sending 10 MB frames are closed with 1009 quickly and the heap
// stays bounded (the server never buffers the frame).
func TestHugeFrames(t *testing.T) {
	e := start(t, nil)
	p := newProbe(e, "hf")
	p.measure(2)
	before := heapInuse()
	chunk := make([]byte, 64<<10)
	for i := range chunk {
		chunk[i] = 'A'
	}
	var wg sync.WaitGroup
	for i := range 5 {
		nc, br := e.rawUpgrade(fmt.Sprintf("giant-%d", i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			t0 := time.Now()
			go func() {
				// A masked text frame announcing 10 MB (mask 0: the payload
				// goes as is), streamed in 64 KiB writes.
				hdr := []byte{0x81, 0x80 | 127, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
				binary.BigEndian.PutUint64(hdr[2:10], 10<<20)
				if _, err := nc.Write(hdr); err != nil {
					return
				}
				for sent := 0; sent < 10<<20; sent += len(chunk) {
					if _, err := nc.Write(chunk); err != nil {
						return
					}
				}
			}()
			nc.SetReadDeadline(t0.Add(8 * time.Second))
			code := readCloseFrame(br)
			took := time.Since(t0)
			switch {
			case code != protocol.CloseTooBig:
				t.Errorf("10 MB frame: closed with %d after %s, want 1009", code, took)
			case took > 3*time.Second:
				t.Errorf("10 MB frame: closed after %s, want quickly", took)
			}
		}()
	}
	worst := p.measure(5)
	wg.Wait()
	after := heapInuse()
	growth := int64(after) - int64(before)
	t.Logf("5 × 10 MB frames: heap in use %d -> %d MiB (%+d KiB), probe worst %s", before>>20, after>>20, growth>>10, worst)
	if growth > 8<<20 {
		t.Errorf("heap grew by %d MiB after 10 MB frames", growth>>20)
	}
	if worst > maxProbeLatency {
		t.Errorf("a healthy pair's worst latency was %s", worst)
	}
}

// Slowloris on the upgrade: half an HTTP request, then nothing. The server
// drops it after its header timeout (10 s); others are unaffected.
func TestSlowlorisUpgrade(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	p := newProbe(e, "su")
	var conns []net.Conn
	for range 20 {
		nc, err := net.Dial("tcp", e.srv.Addr())
		if err != nil {
			t.Fatal(err)
		}
		defer nc.Close()
		fmt.Fprintf(nc, "GET /ws HTTP/1.1\r\nHost: %s\r\nUpgrade: websocket\r\n", e.srv.Addr())
		conns = append(conns, nc)
	}
	t0 := time.Now()
	worst := p.measure(10)
	for i, nc := range conns {
		nc.SetReadDeadline(t0.Add(14 * time.Second))
		_, err := io.Copy(io.Discard, nc)
		if err != nil {
			t.Errorf("slowloris upgrade %d still open after %s: %v", i, time.Since(t0), err)
			break
		}
	}
	t.Logf("20 half-sent upgrades dropped after %s; probe worst %s", time.Since(t0), worst)
	if worst > maxProbeLatency {
		t.Errorf("a healthy pair's worst latency was %s", worst)
	}
}

// Slowloris on frames: a socket that sends half a WebSocket frame and
// stalls is closed by the idle reaper; others are unaffected.
func TestSlowlorisFrame(t *testing.T) {
	t.Parallel()
	e := start(t, func(c *server.Config) {
		c.Tuning.PingInterval = 500 * time.Millisecond
		c.Tuning.PingTimeout = time.Second
	})
	p := newProbe(e, "sf")
	nc, br := e.rawUpgrade("snail")
	// A masked text frame announcing 1000 bytes, then 3 bytes of its mask.
	if _, err := nc.Write([]byte{0x81, 0x80 | 126, 0x03, 0xe8, 1, 2, 3}); err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	worst := p.measure(5)
	nc.SetReadDeadline(t0.Add(10 * time.Second))
	code := readCloseFrame(br) // hello and pings first, then the close
	closedAt := time.Since(t0)
	if code != protocol.CloseIdle {
		t.Errorf("half a frame, then a stall: close code %d after %s, want 4004 (idle)", code, closedAt)
	}
	_, err := io.Copy(io.Discard, br)
	if err != nil && !errors.Is(err, net.ErrClosed) {
		t.Fatalf("half a frame, then a stall: socket still open after %s (%v)", time.Since(t0), err)
	}
	t.Logf("half a frame: close %d after %s, socket gone after %s; probe worst %s", code, closedAt, time.Since(t0), worst)
	if worst > maxProbeLatency {
		t.Errorf("a healthy pair's worst latency was %s", worst)
	}
}
