package redis

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tetra-messenger/tetra/internal/testenv"
	"github.com/tetra-messenger/tetra/workload/waterline"
)

// The index refuses servers older than MinVersion (6.2).
func TestCheckVersion(t *testing.T) {
	for _, tc := range []struct {
		info string
		ok   bool
	}{
		{"# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n", true},
		{"redis_version:6.2.0\r\n", true},
		{"redis_version:6.2.14\r\n", true},
		{"redis_version:10.0.0\r\n", true},
		{"redis_version:8.2.1\r\n", true},
		{"redis_version:6.0.16\r\n", false},
		{"redis_version:5.0.7\r\n", false},
		{"redis_version:garbage\r\n", false},
		{"redis_mode:standalone\r\n", false}, // no version at all
	} {
		if err := checkVersion(tc.info); (err == nil) != tc.ok {
			t.Errorf("checkVersion(%q) = %v, want ok %v", tc.info, err, tc.ok)
		}
	}
}

// Concurrent SentMany calls that arrive while a flight is in the air are
// written together, in one flight, each batch with its own lease and its
// own answer (an unknown client's batch fails alone, at once: it is not
// registered in the process).
func TestSentManyCoalesces(t *testing.T) {
	ctx := t.Context()
	x, _, _ := newTestIndex(t)
	const calls = 8
	for i := range calls {
		if i != 3 { // client c3 is not registered
			if err := x.Connect(ctx, waterline.Client{ID: fmt.Sprint("c", i)}); err != nil {
				t.Fatal(err)
			}
		}
	}
	base := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	// A flight is in the air: every call waits for it.
	x.pins.queued = make(chan struct{}, calls)
	x.pins.mu.Lock()
	x.pins.busy = true
	x.pins.mu.Unlock()
	errs := make([][]error, calls)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			errs[i] = x.SentMany(ctx, []waterline.SentBatch{{ClientID: fmt.Sprint("c", i),
				Entries: []waterline.Entry{{MessageID: fmt.Sprint("m", i), Pos: int64(10 + i)}}}},
				base.Add(time.Duration(i)*time.Millisecond))
		})
	}
	for range calls - 1 {
		select {
		case <-x.pins.queued:
		case <-time.After(10 * time.Second):
			t.Fatal("the calls did not wait for the flight in the air")
		}
	}
	x.pins.land()
	wg.Wait()
	if g := x.pins.groups.Load(); g != 1 {
		t.Errorf("%d calls waiting for one flight were recorded in %d script calls, want 1", calls, g)
	}
	for i, e := range errs {
		if i == 3 {
			if len(e) != 1 || !errors.Is(e[0], waterline.ErrUnknownClient) {
				t.Errorf("call %d (an unknown client): %v, want ErrUnknownClient", i, e)
			}
		} else if len(e) != 1 || e[0] != nil {
			t.Errorf("call %d: %v, want no error", i, e)
		}
	}
	due, err := x.Expired(ctx, base.Add(time.Hour), 100)
	if err != nil {
		t.Fatal(err)
	}
	if len(due) != calls-1 {
		t.Fatalf("%d entries recorded, want %d: %+v", len(due), calls-1, due)
	}
	for _, p := range due {
		var i int
		fmt.Sscan(p.MessageID[1:], &i)
		if want := base.Add(time.Duration(i) * time.Millisecond); p.ClientID != fmt.Sprint("c", i) || !p.LeaseUntil.Equal(want) || p.Attempts != 1 || p.Pos != int64(10+i) {
			t.Errorf("recorded %+v; want client c%d, pos %d, lease %v, 1 attempt", p, i, 10+i, want)
		}
	}
	// Idle again: the next call runs at once, in a group of its own.
	if e := x.SentMany(ctx, []waterline.SentBatch{{ClientID: "c0", Entries: []waterline.Entry{{MessageID: "n0", Pos: 1}}}}, base); e[0] != nil {
		t.Fatal(e[0])
	}
	if g := x.pins.groups.Load(); g != 2 {
		t.Errorf("groups = %d after an idle call, want 2", g)
	}
}

// A pins script older than the last one Redis ran for this owner is
// refused (a flight that timed out on the process's side may still reach
// the server after a newer one), and a flight that failed leaves its
// clients unsure: the next flight writes all of their pins, not only those
// that moved since the last flight that succeeded, since the failed one
// may have run after all.
func TestPinsFenceAndUnsure(t *testing.T) {
	ctx := t.Context()
	x, url, prefix := newTestIndex(t)
	raw := goredis.NewClient(mustParse(t, url))
	defer raw.Close()
	pin := func() (float64, error) { return raw.ZScore(ctx, prefix+"pins:0", "c").Result() }
	if err := x.Connect(ctx, waterline.Client{ID: "c"}); err != nil {
		t.Fatal(err)
	}
	lease := time.Now().Add(time.Hour)
	if _, err := x.Sent(ctx, "c", []waterline.Entry{{MessageID: "m", Pos: 5}}, lease); err != nil {
		t.Fatal(err)
	}
	good := x.seq.Load()

	// A flight numbered below the last one run: refused, nothing written.
	x.seq.Store(good - 10)
	if _, err := x.Ack(ctx, "c", []string{"m"}); !errors.Is(err, waterline.ErrUnavailable) || !strings.Contains(err.Error(), "STALEPINS") {
		t.Fatalf("Ack in a stale flight: %v; want ErrUnavailable (STALEPINS)", err)
	}
	if p, err := pin(); err != nil || p != 5 {
		t.Fatalf("pin after the refused flight = %v, %v; want 5 still", p, err)
	}
	x.seq.Store(good)

	// Say the refused script had run after all (Redis lost c's pin), and m
	// comes back pending at the same position: the pins the process has
	// equal the last ones a flight wrote, yet Redis lacks them.
	if err := raw.ZRem(ctx, prefix+"pins:0", "c").Err(); err != nil {
		t.Fatal(err)
	}
	if err := x.local.Restore(ctx, "c", []waterline.Pending{{Entry: waterline.Entry{MessageID: "m", Pos: 5}, Attempts: 1, LeaseUntil: lease}}); err != nil {
		t.Fatal(err)
	}
	id, err := x.Identity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.MarkPrimed(ctx, id); err != nil {
		t.Fatal(err)
	}
	if line, ok, err := x.SafeLine(ctx, 0, id); err != nil || !ok || line != 5 {
		t.Fatalf("SafeLine = %d %v %v; want 5: the unsure client's pins written in full first", line, ok, err)
	}
}

func mustParse(t *testing.T, url string) *goredis.Options {
	t.Helper()
	opt, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	return opt
}

// newTestIndex returns an index on the test Redis under a fresh prefix,
// closed when the test ends, with the URL and the prefix.
func newTestIndex(t *testing.T) (*Index, string, string) {
	t.Helper()
	url, prefix := testenv.Redis(t)
	x, err := New(t.Context(), Config{URL: url, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.Close() })
	return x, url, prefix
}
