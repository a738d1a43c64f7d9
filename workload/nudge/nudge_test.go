package nudge

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/delivery"
)

var secret = []byte("0123456789abcdef-test")

func TestSignVerify(t *testing.T) {
	body := []byte(`{"nudges":[]}`)
	now := time.Unix(1_800_000_000, 0)
	h := http.Header{}
	h.Set(HeaderTimestamp, strconv.FormatInt(now.Unix(), 10))
	h.Set(HeaderSignature, Sign(secret, now.Unix(), body))
	if err := Verify(secret, h, body, now.Add(time.Minute), 0); err != nil {
		t.Fatalf("Verify of a fresh signed request: %v", err)
	}
	if err := Verify(secret, h, []byte(`{"nudges":[{}]}`), now, 0); !errors.Is(err, ErrBadSignature) {
		t.Errorf("tampered body: %v, want ErrBadSignature", err)
	}
	if err := Verify([]byte("another-secret-of-16"), h, body, now, 0); !errors.Is(err, ErrBadSignature) {
		t.Errorf("wrong secret: %v, want ErrBadSignature", err)
	}
	if err := Verify(secret, h, body, now.Add(10*time.Minute), 0); !errors.Is(err, ErrStale) {
		t.Errorf("replayed 10 minutes later: %v, want ErrStale", err)
	}
	h2 := h.Clone()
	h2.Set(HeaderTimestamp, strconv.FormatInt(now.Unix()+1, 10))
	if err := Verify(secret, h2, body, now, 0); !errors.Is(err, ErrBadSignature) {
		t.Errorf("timestamp changed: %v, want ErrBadSignature", err)
	}
	h3 := h.Clone()
	h3.Set(HeaderSignature, "v1=00,"+Sign(secret, now.Unix(), body))
	if err := Verify(secret, h3, body, now, 0); err != nil {
		t.Errorf("two signatures, one valid (rotation): %v", err)
	}
	if err := Verify(secret, http.Header{}, body, now, 0); !errors.Is(err, ErrNoSignature) {
		t.Errorf("no headers: %v, want ErrNoSignature", err)
	}
	if ID("m1", "bob") != ID("m1", "bob") || ID("m1", "bob") == ID("m1", "bo") || ID("m1b", "ob") == ID("m1", "bob") || len(ID("m", "u")) != 32 {
		t.Errorf("ID is not a stable 32-hex id per (message, recipient)")
	}
}

func TestValidate(t *testing.T) {
	ok := Config{URL: "https://push.example.com/hook", Secret: secret}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]Config{
		"scheme":    {URL: "ftp://x/y", Secret: secret},
		"no host":   {URL: "http:///hook", Secret: secret},
		"userinfo":  {URL: "https://u:p@x/hook", Secret: secret},
		"relative":  {URL: "/hook", Secret: secret},
		"secret":    {URL: "https://x/hook", Secret: []byte("short")},
		"batch":     {URL: "https://x/hook", Secret: secret, BatchSize: -1},
		"queue":     {URL: "https://x/hook", Secret: secret, QueueSize: 2000000},
		"max delay": {URL: "https://x/hook", Secret: secret, MaxDelay: 2 * time.Minute},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate accepted %+v", name, c)
		}
	}
}

func TestBackoffGrowsWithJitter(t *testing.T) {
	lo, hi := 100*time.Millisecond, 2*time.Second
	for attempt, want := range []time.Duration{100, 200, 400, 800, 1600, 2000, 2000} {
		want *= time.Millisecond
		for range 50 {
			d := backoff(lo, hi, attempt)
			if d < want/2 || d > want {
				t.Fatalf("attempt %d: %v outside [%v, %v]", attempt, d, want/2, want)
			}
		}
	}
}

// statusServer answers the statuses in order, then 204; it counts requests.
func statusServer(t *testing.T, statuses ...int) (*httptest.Server, *atomic.Int32) {
	var n atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		i := int(n.Add(1)) - 1
		if i < len(statuses) {
			w.WriteHeader(statuses[i])
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

func start(t *testing.T, cfg Config) *Nudger {
	t.Helper()
	cfg.Secret = secret
	cfg.MaxDelay, cfg.MinBackoff, cfg.MaxBackoff = 5*time.Millisecond, 5*time.Millisecond, 20*time.Millisecond
	x, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	x.Start()
	t.Cleanup(func() { x.Stop(context.Background()) })
	return x
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func one(id string) []delivery.Nudge {
	return []delivery.Nudge{{MessageID: id, ChatID: "c", SenderID: "alice", Recipient: "bob", Reason: delivery.NudgeOffline, SentAt: time.Now()}}
}

// 5xx and 429 are retried until a 2xx; a 4xx is not (the batch is
// dropped, counted as rejected).
func TestRetryPolicy(t *testing.T) {
	srv, n := statusServer(t, 503, 429, 500)
	x := start(t, Config{URL: srv.URL})
	x.Nudge(one("m1"))
	waitFor(t, "the nudge through 503, 429 and 500", func() bool { return x.Stats().Sent == 1 })
	if got := n.Load(); got != 4 {
		t.Errorf("%d requests, want 4", got)
	}
	if st := x.Stats(); st.Failed != 3 {
		t.Errorf("stats %+v: want 3 failed attempts", st)
	}

	srv2, n2 := statusServer(t, 400, 400, 400)
	y := start(t, Config{URL: srv2.URL})
	y.Nudge(one("m2"))
	waitFor(t, "the rejection", func() bool { return y.Stats().Dropped[DropRejected] == 1 })
	time.Sleep(50 * time.Millisecond)
	if got := n2.Load(); got != 1 {
		t.Errorf("a 400 was retried: %d requests, want 1", got)
	}
}

// A network error (nothing listening) is retried.
func TestRetryNetworkError(t *testing.T) {
	srv, _ := statusServer(t)
	url := srv.URL
	srv.Close()
	x := start(t, Config{URL: url, Timeout: 200 * time.Millisecond})
	x.Nudge(one("m1"))
	waitFor(t, "three failed attempts", func() bool { return x.Stats().Failed >= 3 })
	if st := x.Stats(); st.Sent != 0 || st.Dropped[DropRejected] != 0 {
		t.Errorf("stats %+v: a network error is neither sent nor rejected", st)
	}
}

// The queue drops the oldest nudge when full, and Nudge never blocks.
func TestQueueDropsOldest(t *testing.T) {
	x, err := New(Config{URL: "http://127.0.0.1:1/never", Secret: secret, QueueSize: 3})
	if err != nil {
		t.Fatal(err)
	}
	// Not started: nothing drains the queue.
	for _, id := range []string{"m1", "m2", "m3", "m4", "m5"} {
		x.Nudge(one(id))
	}
	st := x.Stats()
	if st.Depth != 3 || st.Dropped[DropQueueFull] != 2 || st.Queued != 5 {
		t.Fatalf("stats %+v: want depth 3, 2 dropped, 5 queued", st)
	}
	x.closing = true
	batch, _ := x.take(context.Background())
	var got []string
	for _, e := range batch {
		got = append(got, e.it.MessageID)
	}
	if len(got) != 3 || got[0] != "m3" || got[2] != "m5" {
		t.Errorf("queue holds %v, want the newest [m3 m4 m5]", got)
	}
}

// Batches hold at most BatchSize nudges, and Stop sends what is queued.
func TestBatchingAndStop(t *testing.T) {
	var mu sync.Mutex
	var sizes []int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var b Batch
		body, _ := io.ReadAll(r.Body)
		if err := Verify(secret, r.Header, body, time.Now(), 0); err != nil {
			t.Errorf("verify: %v", err)
		}
		json.Unmarshal(body, &b)
		mu.Lock()
		sizes = append(sizes, len(b.Nudges))
		mu.Unlock()
		w.WriteHeader(200)
	}))
	t.Cleanup(srv.Close)
	x, err := New(Config{URL: srv.URL, Secret: secret, BatchSize: 4, MaxDelay: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	x.Start()
	var ns []delivery.Nudge
	for i := range 10 {
		ns = append(ns, one("m"+strconv.Itoa(i))...)
	}
	x.Nudge(ns)
	waitFor(t, "two full batches", func() bool { return x.Stats().Sent == 8 })
	x.Stop(context.Background()) // the last 2 go without waiting a minute
	if st := x.Stats(); st.Sent != 10 {
		t.Errorf("stats %+v: Stop must send what is queued", st)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, s := range sizes {
		if s > 4 {
			t.Errorf("a batch of %d, over BatchSize 4", s)
		}
	}
}
