package redis_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/tetra-messenger/tetra/workload/waterline"
	"github.com/tetra-messenger/tetra/workload/waterline/redis"
)

// twoOwners returns two indexes on one prefix, as two processes of one
// deployment would have.
func twoOwners(t *testing.T) (a, b *redis.Index, cfg redis.Config) {
	t.Helper()
	a, cfg = newIndex(t, func(c *redis.Config) { c.Owner = "pod-a" })
	cfg.Owner = "pod-b"
	b, err := redis.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return a, b, cfg
}

// TestClaimsAreOrderedAndAnnounced: every claim of a device gets a larger
// epoch than the one before, wherever it was made; the other process hears
// it, the claiming process does not; wake-ups likewise.
func TestClaimsAreOrderedAndAnnounced(t *testing.T) {
	ctx := t.Context()
	a, b, _ := twoOwners(t)
	var mu sync.Mutex
	var heardA, heardB []waterline.Claim
	wakesA, wakesB := 0, 0
	var casts []string
	sctx, stop := context.WithCancel(ctx)
	doneA, err := a.Subscribe(sctx, waterline.FleetHandlers{
		OnClaim: func(c waterline.Claim) { mu.Lock(); heardA = append(heardA, c); mu.Unlock() },
		OnWake:  func() { mu.Lock(); wakesA++; mu.Unlock() }})
	if err != nil {
		t.Fatal(err)
	}
	// The subscriber goroutine ends with its context.
	defer func() {
		stop()
		select {
		case <-doneA:
		case <-time.After(10 * time.Second):
			t.Error("the subscriber did not end after its context")
		}
	}()
	if _, err := b.Subscribe(ctx, waterline.FleetHandlers{
		OnClaim: func(c waterline.Claim) { mu.Lock(); heardB = append(heardB, c); mu.Unlock() },
		OnWake:  func() { mu.Lock(); wakesB++; mu.Unlock() },
		OnBroadcast: func(users []string, frame []byte) {
			mu.Lock()
			casts = append(casts, strings.Join(users, ",")+"|"+string(frame))
			mu.Unlock()
		}}); err != nil {
		t.Fatal(err)
	}
	var last int64
	for i, x := range []*redis.Index{a, b, a, a, b} {
		c, err := x.Claim(ctx, "alice", "phone", "conn-"+string(rune('0'+i)))
		if err != nil {
			t.Fatal(err)
		}
		if c.Epoch <= last {
			t.Fatalf("claim %d: epoch %d not above the previous %d", i, c.Epoch, last)
		}
		last = c.Epoch
		got, err := b.LatestEpoch(ctx, "alice", "phone")
		if err != nil || got != c.Epoch {
			t.Fatalf("LatestEpoch = %d, %v; want %d", got, err, c.Epoch)
		}
	}
	if got, err := a.LatestEpoch(ctx, "alice", "laptop"); err != nil || got != 0 {
		t.Fatalf("LatestEpoch of an unclaimed device = %d, %v; want 0", got, err)
	}
	if err := a.Wake(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Broadcast(ctx, []string{"bob", "carol"}, []byte(`{"type":"read"}`)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		done := len(heardA) == 2 && len(heardB) == 3 && wakesB == 1 && len(casts) == 1
		mu.Unlock()
		if done {
			break
		}
		if time.Now().After(deadline) {
			mu.Lock()
			defer mu.Unlock()
			t.Fatalf("heard: a %d claims (want 2, b's), b %d claims (want 3, a's), b %d wakes (want 1)", len(heardA), len(heardB), wakesB)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond) // anything more would be an echo
	mu.Lock()
	defer mu.Unlock()
	for _, c := range heardA {
		if c.Owner != "pod-b" || c.User != "alice" || c.Device != "phone" {
			t.Errorf("a heard %+v: want only pod-b's claims of alice/phone", c)
		}
	}
	for _, c := range heardB {
		if c.Owner != "pod-a" {
			t.Errorf("b heard its own claim %+v", c)
		}
	}
	if len(casts) != 1 || casts[0] != `bob,carol|{"type":"read"}` {
		t.Errorf("b heard broadcasts %q, want one for bob,carol", casts)
	}
	if len(heardA) != 2 || len(heardB) != 3 || wakesA != 0 || wakesB != 1 {
		t.Errorf("a: %d claims %d wakes, b: %d claims %d wakes; want 2/0 and 3/1", len(heardA), wakesA, len(heardB), wakesB)
	}
}

// TestReapDeadOwner: the pins of a process whose heartbeat lapsed stop
// holding the safe line once another process reaps it; a live process and
// a process that never heartbeat are left alone; the reaped process learns
// it at its next heartbeat.
func TestReapDeadOwner(t *testing.T) {
	ctx := t.Context()
	a, b, cfg := twoOwners(t)
	lease := time.Now().Add(time.Hour)
	// pod-a: client at pos 10; pod-b: client at pos 20, heartbeat long.
	for _, step := range []struct {
		x   *redis.Index
		cid string
		pos int64
	}{{a, "ca", 10}, {b, "cb", 20}} {
		if err := step.x.Connect(ctx, waterline.Client{ID: step.cid, User: step.cid, Device: "d", Start: map[int32]int64{0: 0}}); err != nil {
			t.Fatal(err)
		}
		if _, err := step.x.Sent(ctx, step.cid, []waterline.Entry{{MessageID: "m" + step.cid, Partition: 0, Pos: step.pos}}, lease); err != nil {
			t.Fatal(err)
		}
	}
	id := primed(t, a)
	primed(t, b)
	if _, err := a.Heartbeat(ctx, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Heartbeat(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	line := func() int64 {
		t.Helper()
		l, ok, err := b.SafeLine(ctx, 0, id)
		if err != nil || !ok {
			t.Fatalf("SafeLine = %d, %v, %v", l, ok, err)
		}
		return l
	}
	if reaped, err := b.ReapDead(ctx); err != nil || len(reaped) != 0 {
		t.Fatalf("ReapDead while both are alive = %v, %v; want nothing", reaped, err)
	}
	if got := line(); got != 10 {
		t.Fatalf("safe line %d, want pod-a's pin 10", got)
	}
	time.Sleep(400 * time.Millisecond) // pod-a's heartbeat lapses
	reaped, err := b.ReapDead(ctx)
	if err != nil || !slices.Equal(reaped, []string{"pod-a"}) {
		t.Fatalf("ReapDead = %v, %v; want [pod-a]", reaped, err)
	}
	if got := line(); got != 20 {
		t.Fatalf("safe line %d after reaping pod-a, want pod-b's pin 20", got)
	}
	if st, err := a.State(ctx); err != nil || st.Primed {
		t.Fatalf("pod-a State after reap = %+v, %v; want unprimed", st, err)
	}
	if _, err := a.Ack(ctx, "ca", []string{"mca"}); err == nil {
		t.Fatal("pod-a's client is still registered after the reap")
	}
	if r, err := a.Heartbeat(ctx, time.Minute); err != nil || !r {
		t.Fatalf("pod-a's next Heartbeat = %v, %v; want reaped", r, err)
	}
	if r, err := a.Heartbeat(ctx, time.Minute); err != nil || r {
		t.Fatalf("pod-a's second Heartbeat = %v, %v; want not reaped (tombstone consumed)", r, err)
	}
	// pod-a is alive again, unprimed: a laggard, so no line until it
	// rebuilds.
	if _, _, err := b.SafeLine(ctx, 0, id); !errors.Is(err, waterline.ErrNotPrimed) {
		t.Fatalf("SafeLine while the reaped pod-a lives unprimed: %v; want ErrNotPrimed", err)
	}
	primed(t, a)
	// An owner that never heartbeat (an older build) is never reaped.
	cfg.Owner = "old-build"
	c, err := redis.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.Connect(ctx, waterline.Client{ID: "cc", User: "cc", Device: "d", Start: map[int32]int64{0: 0}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Sent(ctx, "cc", []waterline.Entry{{MessageID: "mcc", Partition: 0, Pos: 5}}, lease); err != nil {
		t.Fatal(err)
	}
	if reaped, err := b.ReapDead(ctx); err != nil || len(reaped) != 0 {
		t.Fatalf("ReapDead = %v, %v; want nothing (old-build never heartbeat, the others are alive)", reaped, err)
	}
	if got := line(); got != 5 {
		t.Fatalf("safe line %d, want old-build's pin 5", got)
	}
}

// TestLaggards: a live owner whose primed flag misses the current identity
// blocks deletes; a dead one does not.
func TestLaggards(t *testing.T) {
	ctx := t.Context()
	a, b, _ := twoOwners(t)
	for _, x := range []*redis.Index{a, b} {
		if _, err := x.Heartbeat(ctx, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.MarkPrimed(ctx, "new"); err != nil {
		t.Fatal(err)
	}
	if err := b.MarkPrimed(ctx, "old"); err != nil {
		t.Fatal(err)
	}
	lag, err := a.Laggards(ctx, "new")
	if err != nil || !slices.Equal(lag, []string{"pod-b"}) {
		t.Fatalf("Laggards = %v, %v; want [pod-b]", lag, err)
	}
	if err := b.MarkPrimed(ctx, "new"); err != nil {
		t.Fatal(err)
	}
	if lag, err := a.Laggards(ctx, "new"); err != nil || len(lag) != 0 {
		t.Fatalf("Laggards = %v, %v; want none", lag, err)
	}
	if err := b.Reset(ctx); err != nil { // unprimed again, and then dies
		t.Fatal(err)
	}
	if _, err := b.Heartbeat(ctx, 50*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if lag, err := a.Laggards(ctx, "new"); err != nil || !slices.Equal(lag, []string{"pod-b"}) {
		t.Fatalf("Laggards = %v, %v; want [pod-b] (alive, unprimed)", lag, err)
	}
	time.Sleep(100 * time.Millisecond)
	if lag, err := a.Laggards(ctx, "new"); err != nil || len(lag) != 0 {
		t.Fatalf("Laggards = %v, %v; want none (pod-b's heartbeat lapsed)", lag, err)
	}
}

// TestIdentityAge: the first sighting of an identity is recorded once, by
// the server's clock, for every process; a new identity starts again.
func TestIdentityAge(t *testing.T) {
	ctx := t.Context()
	a, b, cfg := twoOwners(t)
	id1, id2 := "test-"+cfg.Prefix+"1", "test-"+cfg.Prefix+"2" // unique: the keys are outside the prefix
	raw := rawClient(t, cfg.URL)
	t.Cleanup(func() { raw.Del(context.Background(), redis.IdentitySeenKey(id1), redis.IdentitySeenKey(id2)) })
	if age, err := a.IdentityAge(ctx, id1); err != nil || age > time.Second {
		t.Fatalf("first sighting: age %v, %v; want about 0", age, err)
	}
	time.Sleep(300 * time.Millisecond)
	if age, err := b.IdentityAge(ctx, id1); err != nil || age < 250*time.Millisecond {
		t.Fatalf("another process, later: age %v, %v; want at least 250ms", age, err)
	}
	if age, err := b.IdentityAge(ctx, id2); err != nil || age > time.Second {
		t.Fatalf("a new identity: age %v, %v; want about 0", age, err)
	}
}

// TestKeyNamesArePrintable: every key the index and the fleet write under
// the prefix is printable UTF-8 with no NUL or control byte, even for user
// and device names with separators and non-ASCII letters, so a
// `redis-cli --scan | xargs redis-cli del` cleanup works (issue 15).
func TestKeyNamesArePrintable(t *testing.T) {
	ctx := t.Context()
	x, cfg := newIndex(t, func(c *redis.Config) { c.Owner = "pod:ä" })
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(x.Connect(ctx, waterline.Client{ID: "c1", User: "bob:x", Device: "phone ☎", Start: map[int32]int64{0: 0}}))
	_, err := x.Sent(ctx, "c1", []waterline.Entry{{MessageID: "m1", Partition: 0, Pos: 3}}, time.Now().Add(time.Hour))
	must(err)
	must(x.Hold(ctx, "poller", 0, 1, time.Minute))
	_, err = x.Claim(ctx, "bob:x", "phone ☎", "c1")
	must(err)
	_, err = x.Heartbeat(ctx, time.Minute)
	must(err)
	must(x.BindOutbox(ctx, "postgres:abc"))
	must(x.MarkPrimed(ctx, primed(t, x)))
	keys, err := rawClient(t, cfg.URL).Keys(ctx, cfg.Prefix+"*").Result()
	must(err)
	if len(keys) < 8 {
		t.Fatalf("only %d keys under the prefix: %v", len(keys), keys)
	}
	for _, k := range keys {
		if !utf8.ValidString(k) || strings.IndexFunc(k, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
			t.Errorf("key %q is not printable", k)
		}
	}
}

// TestBindOutbox: a prefix covers one outbox while any other process of it
// is alive; the same outbox binds again (every replica does), another is
// refused, and once the others are gone it may take the prefix over.
func TestBindOutbox(t *testing.T) {
	ctx := t.Context()
	a, cfg := newIndex(t, func(c *redis.Config) { c.Owner = "a" })
	cfg.Owner = "b"
	b, err := redis.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, x := range []*redis.Index{a, b} {
		if held, err := x.Acquire(ctx, time.Minute); err != nil || !held {
			t.Fatalf("Acquire = %v, %v", held, err)
		}
	}
	if err := a.BindOutbox(ctx, "postgres:one"); err != nil {
		t.Fatal(err)
	}
	if err := b.BindOutbox(ctx, "postgres:one"); err != nil {
		t.Fatalf("a second process of the same outbox: %v", err)
	}
	if err := b.BindOutbox(ctx, "postgres:two"); !errors.Is(err, waterline.ErrPrefixTaken) || !strings.Contains(err.Error(), "postgres:one") {
		t.Fatalf("another outbox while a lives: %v; want ErrPrefixTaken naming postgres:one", err)
	}
	if err := a.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.BindOutbox(ctx, "postgres:two"); err != nil {
		t.Fatalf("another outbox once the others are gone: %v", err)
	}
}
