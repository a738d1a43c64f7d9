package redis

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/internal/testenv"
	"github.com/tetra-messenger/tetra/workload/waterline"
)

// The index refuses servers whose scripts would fail half-way (ZADD ...
// LT is Redis 6.2).
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

// Concurrent SentMany calls that arrive while a script is in flight are
// recorded together, in one script call, each batch with its own lease and
// its own answer (an unknown client's batch fails alone).
func TestSentManyCoalesces(t *testing.T) {
	ctx := t.Context()
	url, prefix := testenv.Redis(t)
	x, err := New(ctx, Config{URL: url, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
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
	x.sends.queued = make(chan struct{}, calls)
	x.sends.mu.Lock()
	x.sends.busy = true
	x.sends.mu.Unlock()
	errs := make([][]error, calls)
	var wg sync.WaitGroup
	for i := range calls {
		wg.Go(func() {
			errs[i] = x.SentMany(ctx, []waterline.SentBatch{{ClientID: fmt.Sprint("c", i),
				Entries: []waterline.Entry{{MessageID: fmt.Sprint("m", i), Pos: int64(10 + i)}}}},
				base.Add(time.Duration(i)*time.Millisecond))
		})
	}
	for range calls {
		select {
		case <-x.sends.queued:
		case <-time.After(10 * time.Second):
			t.Fatal("the calls did not wait for the flight in the air")
		}
	}
	x.sends.land()
	wg.Wait()
	if g := x.sends.groups.Load(); g != 1 {
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
	if g := x.sends.groups.Load(); g != 2 {
		t.Errorf("groups = %d after an idle call, want 2", g)
	}
}
