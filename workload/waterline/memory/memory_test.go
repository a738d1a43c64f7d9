package memory_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/waterline"
	"github.com/tetra-messenger/tetra/workload/waterline/memory"
	"github.com/tetra-messenger/tetra/workload/waterline/waterlinetest"
)

func TestConformance(t *testing.T) {
	waterlinetest.Run(t, func(t *testing.T) waterline.Index { return memory.New() })
}

// fakeClock is a settable clock for hold ttls.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// primed marks x primed with its identity, as a rebuild does, and returns
// the identity.
func primed(t testing.TB, x *memory.Index) string {
	t.Helper()
	id, _ := x.Identity(context.Background())
	if err := x.MarkPrimed(context.Background(), id); err != nil {
		t.Fatal(err)
	}
	return id
}

func line(t *testing.T, x *memory.Index, part int32) string {
	t.Helper()
	id := primed(t, x)
	l, ok, err := x.SafeLine(t.Context(), part, id)
	if err != nil {
		t.Fatal(err)
	}
	if !ok {
		return "none"
	}
	return fmt.Sprint(l)
}

func TestHoldTTLWithClock(t *testing.T) {
	ctx := t.Context()
	clk := &fakeClock{t: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	x := memory.NewWithClock(clk.now)

	if err := x.Hold(ctx, "p", 0, 10, time.Second); err != nil {
		t.Fatal(err)
	}
	if err := x.Hold(ctx, "q", 0, 20, 3*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := line(t, x, 0); got != "10" {
		t.Fatalf("line = %s, want 10", got)
	}
	clk.advance(999 * time.Millisecond)
	if got := line(t, x, 0); got != "10" {
		t.Fatalf("line before ttl = %s, want 10", got)
	}
	if err := x.Hold(ctx, "p", 0, 10, time.Second); err != nil { // renew
		t.Fatal(err)
	}
	clk.advance(999 * time.Millisecond)
	if got := line(t, x, 0); got != "10" {
		t.Fatalf("line after renewal = %s, want 10", got)
	}
	clk.advance(time.Millisecond) // exactly ttl after the renewal
	if got := line(t, x, 0); got != "20" {
		t.Fatalf("line at ttl = %s, want 20 (p lapsed)", got)
	}
	clk.advance(time.Second) // 2999 ms since q's hold
	if got := line(t, x, 0); got != "20" {
		t.Fatalf("line before q's ttl = %s, want 20", got)
	}
	clk.advance(time.Millisecond)
	if got := line(t, x, 0); got != "none" {
		t.Fatalf("line after both ttls = %s, want none", got)
	}
}

func TestHoldRejectsNonPositiveTTL(t *testing.T) {
	x := memory.New()
	for _, ttl := range []time.Duration{0, -time.Second} {
		if err := x.Hold(t.Context(), "p", 0, 5, ttl); err == nil {
			t.Errorf("Hold with ttl %v: no error", ttl)
		}
	}
	if err := x.Hold(t.Context(), "p", 0, -1, 0); err != nil {
		t.Errorf("release with ttl 0: %v", err)
	}
	if got := line(t, x, 0); got != "none" {
		t.Fatalf("line = %s, want none", got)
	}
}

func TestExpiredEdges(t *testing.T) {
	ctx := t.Context()
	x := memory.New()
	if err := x.Connect(ctx, waterline.Client{ID: "c"}); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	if _, err := x.Sent(ctx, "c", []waterline.Entry{{MessageID: "m", Pos: 1}}, now); err != nil {
		t.Fatal(err)
	}
	for _, limit := range []int{0, -1} {
		if ps, err := x.Expired(ctx, now, limit); err != nil || len(ps) != 0 {
			t.Errorf("Expired(limit %d) = %v, %v; want none", limit, ps, err)
		}
	}
	// Far past and future leases keep their order.
	if err := x.Restore(ctx, "c", []waterline.Pending{{Entry: waterline.Entry{MessageID: "r", Pos: 0}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Sent(ctx, "c", []waterline.Entry{{MessageID: "old", Pos: 2}}, time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Sent(ctx, "c", []waterline.Entry{{MessageID: "late", Pos: 3}}, time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)); err != nil {
		t.Fatal(err)
	}
	ps, err := x.Expired(ctx, time.Date(9999, 12, 1, 0, 0, 0, 0, time.UTC), 10)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, p := range ps {
		ids = append(ids, p.MessageID)
	}
	if got := strings.Join(ids, ","); got != "old,r,m,late" {
		t.Fatalf("Expired order = %s, want old,r,m,late", got)
	}
	if !ps[1].LeaseUntil.Equal(time.Unix(0, 0)) || ps[1].Attempts != 0 {
		t.Fatalf("restored entry = %+v, want 0 attempts and the Unix epoch as lease", ps[1])
	}
}

// TestExpiredAcrossShards checks the best-first merge over all shards
// against the obvious order, with many clients and interleaved leases.
func TestExpiredAcrossShards(t *testing.T) {
	ctx := t.Context()
	x := memory.New()
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	const clients, per = 300, 7
	for c := range clients {
		id := fmt.Sprintf("c%03d", c)
		if err := x.Connect(ctx, waterline.Client{ID: id}); err != nil {
			t.Fatal(err)
		}
		for k := range per {
			// Lease c*per+k ms spreads every client over the range.
			ms := (k*clients + c) * 1
			e := waterline.Entry{MessageID: fmt.Sprintf("m%d", k), Pos: int64(ms)}
			if _, err := x.Sent(ctx, id, []waterline.Entry{e}, base.Add(time.Duration(ms)*time.Millisecond)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, tc := range []struct{ nowMS, limit, want int }{
		{-1, 100, 0},
		{0, 100, 1},
		{499, 1000, 500},
		{clients*per - 1, 10_000, clients * per},
		{clients*per - 1, 777, 777},
	} {
		ps, err := x.Expired(ctx, base.Add(time.Duration(tc.nowMS)*time.Millisecond), tc.limit)
		if err != nil {
			t.Fatal(err)
		}
		if len(ps) != tc.want {
			t.Fatalf("Expired(%d ms, %d) = %d entries, want %d", tc.nowMS, tc.limit, len(ps), tc.want)
		}
		for i, p := range ps {
			if p.Pos != int64(i) || !p.LeaseUntil.Equal(base.Add(time.Duration(i)*time.Millisecond)) {
				t.Fatalf("Expired(%d ms, %d)[%d] = %+v, want lease and pos %d", tc.nowMS, tc.limit, i, p, i)
			}
		}
	}
}

func TestConnectCopiesStartAndRejectsEmptyID(t *testing.T) {
	ctx := t.Context()
	x := memory.New()
	if err := x.Connect(ctx, waterline.Client{}); err == nil {
		t.Fatal("Connect with an empty id: no error")
	}
	start := map[int32]int64{0: 10}
	if err := x.Connect(ctx, waterline.Client{ID: "a", Start: start}); err != nil {
		t.Fatal(err)
	}
	start[0] = 99
	cs, _ := x.Clients(ctx)
	if cs[0].Start[0] != 10 {
		t.Fatalf("Start aliased the caller's map: %v", cs[0].Start)
	}
	cs[0].Start[0] = 77
	cs, _ = x.Clients(ctx)
	if cs[0].Start[0] != 10 {
		t.Fatalf("Clients returned the index's own map: %v", cs[0].Start)
	}
}

func TestIdentityPerIndex(t *testing.T) {
	a, _ := memory.New().Identity(t.Context())
	b, _ := memory.New().Identity(t.Context())
	if a == "" || a == b {
		t.Fatalf("identities %q and %q; want distinct, non-empty", a, b)
	}
}
