package redis_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tetra-messenger/tetra/internal/testenv"
	"github.com/tetra-messenger/tetra/workload/waterline"
	"github.com/tetra-messenger/tetra/workload/waterline/redis"
	"github.com/tetra-messenger/tetra/workload/waterline/waterlinetest"
)

// newIndex returns an index on the test Redis under a fresh prefix, closed
// (and its keys deleted by testenv) when the test ends.
func newIndex(tb testing.TB, edit ...func(*redis.Config)) (*redis.Index, redis.Config) {
	tb.Helper()
	url, prefix := testenv.Redis(tb)
	cfg := redis.Config{URL: url, Prefix: prefix}
	for _, f := range edit {
		f(&cfg)
	}
	x, err := redis.New(context.Background(), cfg)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { x.Close() })
	return x, cfg
}

// primed marks x primed with its server's identity, as a rebuild does, and
// returns the identity (what SafeLine is asked for).
func primed(tb testing.TB, x *redis.Index) string {
	tb.Helper()
	id, err := x.Identity(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	if err := x.MarkPrimed(context.Background(), id); err != nil {
		tb.Fatal(err)
	}
	return id
}

func TestConformance(t *testing.T) {
	waterlinetest.Run(t, func(t *testing.T) waterline.Index {
		x, _ := newIndex(t)
		return x
	})
}

// rawClient is a plain client on the test Redis.
func rawClient(t testing.TB, url string) *goredis.Client {
	t.Helper()
	opt, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	c := goredis.NewClient(opt)
	t.Cleanup(func() { c.Close() })
	return c
}

// TestFlushUnprimes: losing the keys (FLUSHALL, a restart without
// persistence, a fresh instance; here: deleting the prefix) makes State
// report unprimed, which is what makes the engine rebuild before any delete.
func TestFlushUnprimes(t *testing.T) {
	ctx := t.Context()
	x, cfg := newIndex(t)
	id, err := x.Identity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.Connect(ctx, waterline.Client{ID: "c"}); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Sent(ctx, "c", []waterline.Entry{{MessageID: "m", Pos: 7}}, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := x.MarkPrimed(ctx, id); err != nil {
		t.Fatal(err)
	}
	if st, err := x.State(ctx); err != nil || !st.Primed || st.Identity != id {
		t.Fatalf("State = %+v, %v; want primed with %q", st, err, id)
	}

	testenv.DeletePrefix(ctx, rawClient(t, cfg.URL), cfg.Prefix)

	if st, err := x.State(ctx); err != nil || st.Primed {
		t.Fatalf("State after the flush = %+v, %v; want unprimed", st, err)
	}
	if l, ok, err := x.SafeLine(ctx, 0, id); !errors.Is(err, waterline.ErrNotPrimed) {
		t.Fatalf("SafeLine after the flush = %d, %v, %v; want ErrNotPrimed (no line from an emptied index)", l, ok, err)
	}
	// The next send that moves the client's pin finds the registration
	// gone (one that does not move it writes nothing to Redis).
	_, err = x.Sent(ctx, "c", []waterline.Entry{{MessageID: "m2", Pos: 5}}, time.Now())
	if !errors.Is(err, waterline.ErrUnknownClient) {
		t.Fatalf("Sent after the flush: %v; want ErrUnknownClient", err)
	}
}

// TestOwnersShareTheLine: two processes (owners) on one prefix see each
// other's pins in SafeLine, but each lists, expires, counts and resets only
// its own clients and holds.
func TestOwnersShareTheLine(t *testing.T) {
	ctx := t.Context()
	a, cfg := newIndex(t, func(c *redis.Config) { c.Owner = "pod-a" })
	b, err := redis.New(ctx, redis.Config{URL: cfg.URL, Prefix: cfg.Prefix, Owner: "pod-b"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	lease := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(a.Connect(ctx, waterline.Client{ID: "ca"}))
	must(b.Connect(ctx, waterline.Client{ID: "cb"}))
	_, err = a.Sent(ctx, "ca", []waterline.Entry{{MessageID: "m1", Pos: 10}}, lease)
	must(err)
	_, err = b.Sent(ctx, "cb", []waterline.Entry{{MessageID: "m2", Pos: 5}}, lease)
	must(err)
	must(a.Hold(ctx, "poller", 0, 3, time.Hour))
	must(b.Hold(ctx, "poller", 0, 4, time.Hour)) // same holder name, another owner

	id := primed(t, a)
	primed(t, b)
	wantLine := func(x *redis.Index, want int64) {
		t.Helper()
		l, ok, err := x.SafeLine(ctx, 0, id)
		if err != nil || !ok || l != want {
			t.Fatalf("SafeLine = %d, %v, %v; want %d", l, ok, err, want)
		}
	}
	wantLine(a, 3)
	wantLine(b, 3)
	if _, err := a.Sent(ctx, "cb", nil, lease); !errors.Is(err, waterline.ErrUnknownClient) {
		t.Fatalf("a.Sent to b's client: %v; want ErrUnknownClient", err)
	}
	if ok, err := a.Withdraw(ctx, "cb"); err != nil || ok {
		t.Fatalf("a.Withdraw(b's client) = %v, %v; want false", ok, err)
	}
	ps, err := a.Expired(ctx, time.Now(), 10)
	must(err)
	if len(ps) != 1 || ps[0].ClientID != "ca" {
		t.Fatalf("a.Expired = %+v; want only ca's entry", ps)
	}
	if st, _ := a.Stats(ctx); st != (waterline.Stats{Clients: 1, Pending: 1}) {
		t.Fatalf("a.Stats = %+v", st)
	}

	must(a.Reset(ctx))
	wantLine(b, 4) // a's hold and pin are gone; b's hold (4) and pin (5) stay
	must(b.Hold(ctx, "poller", 0, -1, 0))
	wantLine(b, 5)
	if st, _ := b.State(ctx); !st.Primed || st.Identity != id {
		t.Fatalf("b.State after a.Reset = %+v; want primed %s", st, id)
	}
	if st, _ := a.State(ctx); st.Primed {
		t.Fatalf("a.State after Reset = %+v; want unprimed", st)
	}
	if cs, _ := b.Clients(ctx); len(cs) != 1 || cs[0].ID != "cb" {
		t.Fatalf("b.Clients = %+v", cs)
	}
}

// TestExpiredTiesByPos: equal leases come lowest position first, also
// across clients and beyond a limit, and also for negative positions.
func TestExpiredTiesByPos(t *testing.T) {
	ctx := t.Context()
	x, _ := newIndex(t)
	lease := time.Now().Truncate(time.Millisecond)
	for _, c := range []string{"z", "a", "m"} {
		if err := x.Connect(ctx, waterline.Client{ID: c}); err != nil {
			t.Fatal(err)
		}
	}
	send := func(c string, pos int64) {
		if _, err := x.Sent(ctx, c, []waterline.Entry{{MessageID: fmt.Sprint("m", pos), Pos: pos}}, lease); err != nil {
			t.Fatal(err)
		}
	}
	send("z", 30)
	send("a", 200)
	send("m", -5)
	send("z", 1)
	send("a", 7)
	ps, err := x.Expired(ctx, lease, 4)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, p := range ps {
		got = append(got, fmt.Sprintf("%s:%d", p.ClientID, p.Pos))
	}
	if g := strings.Join(got, " "); g != "m:-5 z:1 a:7 z:30" {
		t.Fatalf("Expired = %s; want m:-5 z:1 a:7 z:30", g)
	}
}

// TestSubMillisecondLease: a lease is never due before it ends.
func TestSubMillisecondLease(t *testing.T) {
	ctx := t.Context()
	x, _ := newIndex(t)
	if err := x.Connect(ctx, waterline.Client{ID: "c"}); err != nil {
		t.Fatal(err)
	}
	lease := time.Now().Truncate(time.Millisecond).Add(300 * time.Microsecond)
	if _, err := x.Sent(ctx, "c", []waterline.Entry{{MessageID: "m", Pos: 1}}, lease); err != nil {
		t.Fatal(err)
	}
	for _, now := range []time.Time{lease.Add(-time.Microsecond), lease.Truncate(time.Millisecond)} {
		if ps, err := x.Expired(ctx, now, 10); err != nil || len(ps) != 0 {
			t.Fatalf("Expired(%v) before the lease %v = %+v, %v", now, lease, ps, err)
		}
	}
	ps, err := x.Expired(ctx, lease.Add(700*time.Microsecond), 10)
	if err != nil || len(ps) != 1 || ps[0].LeaseUntil.Before(lease) {
		t.Fatalf("Expired after the lease = %+v, %v", ps, err)
	}
}

// TestRestoreLarge: a Restore bigger than one script call restores every
// entry and the pin is the lowest position from the start.
func TestRestoreLarge(t *testing.T) {
	ctx := t.Context()
	x, _ := newIndex(t)
	if err := x.Connect(ctx, waterline.Client{ID: "c"}); err != nil {
		t.Fatal(err)
	}
	var es []waterline.Pending
	for i := range 12_000 {
		// Descending positions, so the lowest comes last.
		es = append(es, waterline.Pending{Entry: waterline.Entry{MessageID: fmt.Sprint("m", i), Partition: int32(i % 2), Pos: int64(100_000 - i)}})
	}
	if err := x.Restore(ctx, "c", es); err != nil {
		t.Fatal(err)
	}
	if st, err := x.Stats(ctx); err != nil || st.Pending != len(es) {
		t.Fatalf("Stats = %+v, %v; want %d pending", st, err, len(es))
	}
	id := primed(t, x)
	for p, want := range map[int32]int64{0: 100_000 - 11_998, 1: 100_000 - 11_999} {
		if l, ok, err := x.SafeLine(ctx, p, id); err != nil || !ok || l != want {
			t.Fatalf("SafeLine(%d) = %d, %v, %v; want %d", p, l, ok, err, want)
		}
	}
}

func TestPositionBounds(t *testing.T) {
	ctx := t.Context()
	x, _ := newIndex(t)
	if err := x.Connect(ctx, waterline.Client{ID: "c"}); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Sent(ctx, "c", []waterline.Entry{{MessageID: "m", Pos: redis.MaxPos + 1}}, time.Now()); err == nil {
		t.Fatal("Sent beyond MaxPos: no error")
	}
	if err := x.Hold(ctx, "h", 0, redis.MaxPos+1, time.Second); err == nil {
		t.Fatal("Hold beyond MaxPos: no error")
	}
	if err := x.Hold(ctx, "h", 0, 5, 0); err == nil {
		t.Fatal("Hold with ttl 0: no error")
	}
	if err := x.Connect(ctx, waterline.Client{ID: "a\x00b"}); err == nil {
		t.Fatal("Connect with a NUL in the id: no error")
	}
	if _, err := x.Sent(ctx, "c", []waterline.Entry{{MessageID: "big", Pos: redis.MaxPos}}, time.Now()); err != nil {
		t.Fatal(err)
	}
	if l, ok, err := x.SafeLine(ctx, 0, primed(t, x)); err != nil || !ok || l != redis.MaxPos {
		t.Fatalf("SafeLine = %d, %v, %v; want MaxPos exactly", l, ok, err)
	}
}

func TestConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		cfg  redis.Config
		want string
	}{
		{redis.Config{}, "URL or SentinelAddrs"},
		{redis.Config{URL: "redis://x:1", SentinelAddrs: []string{"y:2"}}, "exclusive"},
		{redis.Config{URL: "http://x"}, "URL"},
		{redis.Config{URL: "redis://x:1", Password: "p"}, "Sentinel mode only"},
		{redis.Config{SentinelAddrs: []string{"y:2"}}, "MasterName"},
		{redis.Config{SentinelAddrs: []string{"nope"}, MasterName: "m"}, "SentinelAddrs[0]"},
		{redis.Config{URL: "redis://x:1", Owner: "a\x00b"}, "Owner"},
		{redis.Config{URL: "redis://x:1", Timeout: -time.Second}, "Timeout"},
		{redis.Config{URL: "redis://x:1", Timeout: time.Hour}, "Timeout"},
	} {
		_, err := redis.New(t.Context(), tc.cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%+v) = %v; want an error naming %s", tc.cfg, err, tc.want)
		}
	}
}

// TestUnreachable: a server that does not answer fails New with an error
// that names the address without its password and wraps ErrUnavailable.
func TestUnreachable(t *testing.T) {
	addr := testenv.FreeAddr(t) // nothing listens there
	_, err := redis.New(t.Context(), redis.Config{URL: "redis://tetra:s3cret@" + addr + "/0", Timeout: 2 * time.Second})
	if !errors.Is(err, waterline.ErrUnavailable) {
		t.Fatalf("New = %v; want ErrUnavailable", err)
	}
	if msg := err.Error(); !strings.Contains(msg, addr) || strings.Contains(msg, "s3cret") {
		t.Fatalf("error %q: want the address %s and no password", msg, addr)
	}
	t.Log(err)
}

// TestErrorsWrapUnavailable: once the server is gone, every method's error
// wraps ErrUnavailable.
func TestErrorsWrapUnavailable(t *testing.T) {
	ctx := t.Context()
	x, _ := newIndex(t, func(c *redis.Config) { c.Timeout = time.Second })
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	if err := x.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	_, err1 := x.Sent(ctx, "c", nil, time.Now())
	_, err2 := x.Ack(ctx, "c", nil)
	_, _, err3 := x.SafeLine(ctx, 0, "id")
	_, err4 := x.State(ctx)
	_, err5 := x.Identity(ctx)
	_, err6 := x.Expired(ctx, time.Now(), 1)
	_, err7 := x.Withdraw(ctx, "c")
	err8 := x.Reset(ctx)
	_, err9 := x.Stats(ctx)
	for i, err := range []error{err1, err2, err3, err4, err5, err6, err7, err8, err9} {
		if !errors.Is(err, waterline.ErrUnavailable) {
			t.Errorf("call %d: %v; want ErrUnavailable", i+1, err)
		}
	}
}

func TestIdentityFormat(t *testing.T) {
	x, cfg := newIndex(t)
	id, err := x.Identity(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	info, err := rawClient(t, cfg.URL).Info(t.Context(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	runID, replID, ok := strings.Cut(id, "/")
	if !ok || len(runID) != 40 || len(replID) != 40 || !strings.Contains(info, "run_id:"+runID) {
		t.Fatalf("Identity = %q; want run_id/master_replid of the server", id)
	}
}

// SentMany pipelines script calls by SHA: after Redis lost its scripts (a
// restart, a failover; here SCRIPT FLUSH, which every other user of the
// server survives, go-redis falling back to EVAL), the batches are sent
// again with the script loaded, and none is recorded twice. A batch with a
// position beyond MaxPos fails alone.
func TestSentManyAfterScriptFlush(t *testing.T) {
	ctx := t.Context()
	x, cfg := newIndex(t)
	for _, id := range []string{"a", "b"} {
		if err := x.Connect(ctx, waterline.Client{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	flushScripts(t, cfg.URL)
	lease := time.Now().Add(time.Minute)
	errs := x.SentMany(ctx, []waterline.SentBatch{
		{ClientID: "a", Entries: []waterline.Entry{{MessageID: "m1", Pos: 1}}},
		{ClientID: "b", Entries: []waterline.Entry{{MessageID: "m2", Pos: redis.MaxPos + 1}}},
		{ClientID: "b", Entries: []waterline.Entry{{MessageID: "m3", Pos: 3}}},
	}, lease)
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("SentMany after SCRIPT FLUSH: %v", errs)
	}
	if errs[1] == nil {
		t.Error("SentMany with a position beyond MaxPos: no error")
	}
	due, err := x.Expired(ctx, lease.Add(time.Millisecond), 10)
	if err != nil {
		t.Fatal(err)
	}
	if len(due) != 2 || due[0].Attempts != 1 || due[1].Attempts != 1 {
		t.Errorf("after SentMany: %+v; want m1 and m3, one attempt each", due)
	}
}

// flushScripts makes the Redis at url forget its scripts (SCRIPT FLUSH),
// as a restart or a failover does.
func flushScripts(t *testing.T, url string) {
	t.Helper()
	opt, err := goredis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	admin := goredis.NewClient(opt)
	defer admin.Close()
	if err := admin.ScriptFlush(t.Context()).Err(); err != nil {
		t.Fatal(err)
	}
}

// AckMany is Ack for each batch in one pipelined round trip, by SHA like
// SentMany: after SCRIPT FLUSH it loads the script and records every
// batch; an unregistered client's batch gets ErrUnknownClient and the
// others are recorded (the pins move as Ack moves them).
func TestAckManyAfterScriptFlush(t *testing.T) {
	ctx := t.Context()
	x, cfg := newIndex(t)
	for _, id := range []string{"a", "b"} {
		if err := x.Connect(ctx, waterline.Client{ID: id}); err != nil {
			t.Fatal(err)
		}
	}
	lease := time.Now().Add(time.Minute)
	for _, b := range []waterline.SentBatch{
		{ClientID: "a", Entries: []waterline.Entry{{MessageID: "m1", Pos: 1}, {MessageID: "m2", Pos: 2}}},
		{ClientID: "b", Entries: []waterline.Entry{{MessageID: "m3", Pos: 3}}},
	} {
		if _, err := x.Sent(ctx, b.ClientID, b.Entries, lease); err != nil {
			t.Fatal(err)
		}
	}
	flushScripts(t, cfg.URL)
	errs := x.AckMany(ctx, []waterline.AckBatch{
		{ClientID: "a", MessageIDs: []string{"m1"}},
		{ClientID: "nobody", MessageIDs: []string{"m9"}},
		{ClientID: "b", MessageIDs: []string{"m3"}},
	})
	if errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], waterline.ErrUnknownClient) {
		t.Fatalf("AckMany after SCRIPT FLUSH: %v; want nil, ErrUnknownClient, nil", errs)
	}
	st, err := x.Stats(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.Pending != 1 {
		t.Errorf("pending after AckMany = %d, want 1 (a's m2)", st.Pending)
	}
	id, err := x.Identity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := x.MarkPrimed(ctx, id); err != nil {
		t.Fatal(err)
	}
	if line, ok, err := x.SafeLine(ctx, 0, id); err != nil || !ok || line != 2 {
		t.Errorf("SafeLine after AckMany = %d %v %v, want 2 (a's pin moved to m2, b's gone)", line, ok, err)
	}
}

// TestPartsOnlyGrow: a client's parts set (the partitions Withdraw and a
// reset, this version's or an older one's, clean up) keeps a partition
// after its pending set emptied, so a one-to-one client's sends and acks
// after its first write no parts; the registration records what parts
// holds without showing it to Clients. Reset and Withdraw still leave no
// pin and no pending set behind, whatever emptied and refilled meanwhile,
// and a registration replaced by Connect only costs the next send one
// idempotent SADD.
func TestPartsOnlyGrow(t *testing.T) {
	ctx := t.Context()
	x, cfg := newIndex(t)
	raw := rawClient(t, cfg.URL)
	id := primed(t, x)
	lease := time.Now().Add(time.Hour)
	start := map[int32]int64{0: 3, 1: 4}
	for _, c := range []string{"a", "b"} {
		if err := x.Connect(ctx, waterline.Client{ID: c, User: "u" + c, Device: "d", Start: start}); err != nil {
			t.Fatal(err)
		}
	}
	wantParts := func(c string, want ...string) {
		t.Helper()
		got, err := raw.SMembers(ctx, cfg.Prefix+"parts:"+c).Result()
		slices.Sort(got)
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("parts of %s = %v, %v; want %v", c, got, err, want)
		}
	}
	wantLine := func(part int32, want int64, wantOK bool) {
		t.Helper()
		line, ok, err := x.SafeLine(ctx, part, id)
		if err != nil || ok != wantOK || (ok && line != want) {
			t.Fatalf("SafeLine(%d) = %d, %v, %v; want %d, %v", part, line, ok, err, want, wantOK)
		}
	}
	sent := func(c, m string, part int32, pos int64) {
		t.Helper()
		if errs := x.SentMany(ctx, []waterline.SentBatch{{ClientID: c, Entries: []waterline.Entry{{MessageID: m, Partition: part, Pos: pos}}}}, lease); errs[0] != nil {
			t.Fatal(errs[0])
		}
	}
	acked := func(c string, ms ...string) {
		t.Helper()
		if errs := x.AckMany(ctx, []waterline.AckBatch{{ClientID: c, MessageIDs: ms}}); errs[0] != nil {
			t.Fatal(errs[0])
		}
	}

	sent("a", "m1", 0, 10)
	acked("a", "m1")
	wantParts("a", "0") // the set emptied; the partition stays listed
	wantLine(0, 0, false)
	sent("a", "m2", 0, 11)
	sent("a", "m3", 1, 12)
	wantParts("a", "0", "1")
	wantLine(0, 11, true)
	acked("a", "m2", "m3")
	sent("a", "m4", 1, 13)
	wantParts("a", "0", "1")
	wantLine(0, 0, false)
	wantLine(1, 13, true)

	clients, err := x.Clients(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(clients) != 2 || clients[0].ID != "a" || clients[0].User != "ua" || !maps.Equal(clients[0].Start, start) {
		t.Fatalf("Clients = %+v; want a and b as registered", clients)
	}

	// A new registration of a forgets what parts holds; its next send
	// lists the partition again (no harm done) and remembers it.
	if err := x.Connect(ctx, waterline.Client{ID: "a", User: "ua", Device: "d2", Start: start}); err != nil {
		t.Fatal(err)
	}
	sent("a", "m5", 0, 14)
	wantParts("a", "0", "1")
	wantLine(0, 14, true)

	if ok, err := x.Withdraw(ctx, "a"); err != nil || !ok {
		t.Fatalf("Withdraw(a) = %v, %v", ok, err)
	}
	sent("b", "n1", 1, 20)
	acked("b", "n1")
	sent("b", "n2", 2, 21)
	if err := x.Reset(ctx); err != nil {
		t.Fatal(err)
	}
	keys, err := raw.Keys(ctx, cfg.Prefix+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if !strings.HasSuffix(k, "holdparts") {
			t.Errorf("after Withdraw(a) and Reset: key %s is left", k)
		}
	}
}
