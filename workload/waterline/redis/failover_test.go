package redis_test

// The failover tests run the real delivery engine over a real SQLite outbox
// and this package's index on real redis-server processes (started here on
// free loopback ports, killed at cleanup), and lose Redis writes the ways
// the design paper worries about:
//
//   - a stale replica is promoted: it kept the primed flag and an old copy of
//     the pins, and misses what was written to the old master after it
//     stopped replicating (the paper's open "stale-replica failover" edge),
//     reached either through a Service that moves to it or by the old master
//     resyncing from it and being promoted back;
//   - the server restarts on the same address, empty or from an old
//     snapshot.
//
// In each the next GC pass must rebuild the index from the outbox before it
// deletes anything, and delete none of bob's unacknowledged rows. Each case
// also runs with the detection switched off (an index wrapper that keeps
// reporting what the index said before the fault) and then asserts that GC
// DOES delete unacknowledged rows: proof that the scenario really exercises
// the check instead of passing by luck. TestSentinelFailover checks that
// Sentinel mode follows a failover and sees the new identity.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	goredis "github.com/redis/go-redis/v9"

	"github.com/tetra-messenger/tetra/internal/testenv"
	"github.com/tetra-messenger/tetra/workload/config"
	"github.com/tetra-messenger/tetra/workload/delivery"
	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/outbox"
	"github.com/tetra-messenger/tetra/workload/store/sqlite"
	"github.com/tetra-messenger/tetra/workload/waterline"
	"github.com/tetra-messenger/tetra/workload/waterline/redis"
)

// ---- redis-server processes ----

// server is a redis-server process on a fixed loopback port, without
// persistence, so a restart comes back empty.
type server struct {
	t      *testing.T
	bin    string
	addr   string
	dir    string
	args   []string // before the common flags; a config file for Sentinel
	cmd    *exec.Cmd
	out    *bytes.Buffer
	client *goredis.Client
}

func startServer(t *testing.T) *server {
	t.Helper()
	return startServerArgs(t, nil)
}

func startServerArgs(t *testing.T, setup func(*server)) *server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		testenv.Unavailable(t, "redis-server (on PATH)", "Install it (apt-get install redis-server); the failover tests start their own servers.", err)
	}
	s := &server{t: t, bin: bin, addr: testenv.FreeAddr(t), dir: t.TempDir()}
	if setup != nil {
		setup(s)
	}
	s.start()
	t.Cleanup(s.stop)
	return s
}

// startSentinel starts a Sentinel monitoring master as "mymaster" with a
// quorum of one and short timeouts.
func startSentinel(t *testing.T, master *server) *server {
	t.Helper()
	s := startServerArgs(t, func(s *server) {
		host, port, _ := net.SplitHostPort(master.addr)
		conf := filepath.Join(s.dir, "sentinel.conf")
		err := os.WriteFile(conf, []byte(fmt.Sprintf(
			"sentinel monitor mymaster %s %s 1\n"+
				"sentinel down-after-milliseconds mymaster 1000\n"+
				"sentinel failover-timeout mymaster 5000\n", host, port)), 0o600)
		if err != nil {
			t.Fatal(err)
		}
		s.args = []string{conf, "--sentinel"}
	})
	return s
}

func (s *server) start() {
	s.t.Helper()
	_, port, _ := net.SplitHostPort(s.addr)
	s.out = &bytes.Buffer{}
	s.cmd = exec.Command(s.bin, append(slices.Clone(s.args), "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", s.dir,
		"--repl-diskless-sync-delay", "0")...) // no 5 s wait before a full sync
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server on %s: %v", s.addr, err)
	}
	s.client = goredis.NewClient(&goredis.Options{Addr: s.addr, MaxRetries: -1})
	waitFor(s.t, "redis-server on "+s.addr+" to answer", func() bool {
		return s.client.Ping(context.Background()).Err() == nil
	})
}

// kill stops the process at once (SIGKILL) and waits for it to exit.
func (s *server) kill() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.client.Close()
	s.cmd = nil
}

func (s *server) stop() {
	if s.t.Failed() && s.out != nil {
		s.t.Logf("redis-server %s output:\n%s", s.addr, s.out.String())
	}
	s.kill()
}

func (s *server) info(section string) map[string]string {
	s.t.Helper()
	txt, err := s.client.Info(context.Background(), section).Result()
	if err != nil {
		s.t.Fatalf("INFO %s on %s: %v", section, s.addr, err)
	}
	out := map[string]string{}
	for line := range strings.SplitSeq(txt, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			out[k] = v
		}
	}
	return out
}

func (s *server) do(args ...any) any {
	s.t.Helper()
	v, err := s.client.Do(context.Background(), args...).Result()
	if err != nil {
		s.t.Fatalf("%v on %s: %v", args, s.addr, err)
	}
	return v
}

// waitReplicated waits until replica has processed everything master
// wrote so far. (WAIT would not do: it counts the acknowledgements of the
// calling connection's own writes, and the index writes on its own.)
func waitReplicated(t *testing.T, master, replica *server) {
	t.Helper()
	want := master.info("replication")["master_repl_offset"]
	waitFor(t, "the replica to reach offset "+want, func() bool {
		r := replica.info("replication")
		return r["master_link_status"] == "up" && r["slave_repl_offset"] == want
	})
}

// waitFor polls cond every 10ms for up to 30s. There is no event to wait on
// for a server's readiness or a replication link, so this is the one place
// the tests poll.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ---- a TCP proxy: the stable address (a Kubernetes Service) ----

type proxy struct {
	ln     net.Listener
	mu     sync.Mutex
	target string
	conns  map[net.Conn]struct{}
	closed bool
}

func startProxy(t *testing.T, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	go p.serve()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.handle(c)
	}
}

func (p *proxy) handle(c net.Conn) {
	// Dial and register under the lock, so a switch never leaves a
	// connection to the old target open.
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		c.Close()
		return
	}
	u, err := net.Dial("tcp", p.target)
	if err != nil {
		p.mu.Unlock()
		c.Close()
		return
	}
	p.conns[c], p.conns[u] = struct{}{}, struct{}{}
	p.mu.Unlock()
	go func() {
		_, _ = io.Copy(u, c)
		u.Close()
		c.Close()
	}()
	_, _ = io.Copy(c, u)
	c.Close()
	u.Close()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, u)
	p.mu.Unlock()
}

// switchTo points new connections at target and drops the existing ones, as
// a Service does when its endpoint moves to the promoted pod.
func (p *proxy) switchTo(target string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.target = target
	for c := range p.conns {
		c.Close()
	}
	clear(p.conns)
}

func (p *proxy) close() {
	p.ln.Close()
	p.switchTo("")
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
}

// ---- the engine's side: a fake socket and a rig ----

// fakeConn is a delivery.Conn that records the message ids queued to it.
type fakeConn struct {
	id, user, device string
	mu               sync.Mutex
	got              []string
	closed           int
}

func (c *fakeConn) ID() string     { return c.id }
func (c *fakeConn) User() string   { return c.user }
func (c *fakeConn) Device() string { return c.device }
func (c *fakeConn) Enqueue(f []byte) bool {
	var m struct {
		Type      string `json:"type"`
		MessageID string `json:"messageId"`
	}
	if err := json.Unmarshal(f, &m); err != nil || m.Type != "message" {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed != 0 {
		return false
	}
	c.got = append(c.got, m.MessageID)
	return true
}
func (c *fakeConn) Close(code int, _ string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed == 0 {
		c.closed = code
	}
}

// received returns how many times each message id was queued.
func (c *fakeConn) received() map[string]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]int{}
	for _, id := range c.got {
		out[id]++
	}
	return out
}

// faultyIndex forwards to the real index, but once frozen keeps answering
// State and/or Identity with what the index said at the freeze, and
// computes SafeLine without the script's own priming check (as the index
// did before it had one): the detection switched off, for the
// counterfactual runs.
type faultyIndex struct {
	waterline.Index
	raw   *goredis.Client // the same server, for the unchecked line
	mu    sync.Mutex
	state *waterline.State
	id    *string
	// blindLine computes SafeLine unchecked even when nothing is frozen.
	blindLine bool
}

// SafeLine, once frozen, is the minimum of the pins and holds of the
// partition as plain reads, with no priming check.
func (f *faultyIndex) SafeLine(ctx context.Context, p int32, identity string) (int64, bool, error) {
	f.mu.Lock()
	blind := f.state != nil || f.id != nil || f.blindLine
	f.mu.Unlock()
	if !blind {
		return f.Index.SafeLine(ctx, p, identity)
	}
	best, ok := int64(0), false
	for _, key := range []string{"tetra:pins:", "tetra:holds:"} {
		zs, err := f.raw.ZRangeWithScores(ctx, key+fmt.Sprint(p), 0, 0).Result()
		if err != nil {
			return 0, false, err
		}
		if len(zs) > 0 && (!ok || int64(zs[0].Score) < best) {
			best, ok = int64(zs[0].Score), true
		}
	}
	return best, ok, nil
}

func (f *faultyIndex) freeze(t *testing.T, state, identity bool) {
	t.Helper()
	ctx := context.Background()
	st, err := f.Index.State(ctx)
	if err != nil {
		t.Fatal(err)
	}
	id, err := f.Index.Identity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if state {
		f.state = &st
	}
	if identity {
		f.id = &id
	}
}

func (f *faultyIndex) State(ctx context.Context) (waterline.State, error) {
	f.mu.Lock()
	st := f.state
	f.mu.Unlock()
	if st != nil {
		return *st, nil
	}
	return f.Index.State(ctx)
}

func (f *faultyIndex) Identity(ctx context.Context) (string, error) {
	f.mu.Lock()
	id := f.id
	f.mu.Unlock()
	if id != nil {
		return *id, nil
	}
	return f.Index.Identity(ctx)
}

// hookLog is the outbox with a hook in Head, which GC reads between its
// priming check and the safe line: an event planted there lands inside a
// GC pass, as a Redis flush during a slow PostgreSQL statement would.
type hookLog struct {
	outbox.Log
	mu   sync.Mutex
	hook func()
}

func (h *hookLog) Head(ctx context.Context, p int32) (int64, error) {
	h.mu.Lock()
	hook := h.hook
	h.hook = nil
	h.mu.Unlock()
	if hook != nil {
		hook()
	}
	return h.Log.Head(ctx, p)
}

// during runs f inside the next GC pass, between the priming check and the
// safe line.
func (r *rig) during(f func()) {
	r.log.mu.Lock()
	r.log.hook = f
	r.log.mu.Unlock()
}

type rig struct {
	t      *testing.T
	ctx    context.Context
	db     *sqlite.DB
	log    *hookLog
	idx    *faultyIndex
	e      *delivery.Engine
	chat   history.Chat
	bob    *fakeConn
	member *delivery.Member
	seq    int
	sent   []string        // every message id, in commit order
	acked  map[string]bool // ids bob acknowledged
}

// newRig starts an engine over a fresh SQLite store and a Redis index at
// redisURL, with a direct chat alice-bob and bob connected. The poller and
// GC loops are set to an hour: the test drives PollOnce and GCOnce itself.
func newRig(t *testing.T, redisURL string) *rig {
	t.Helper()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, sqlite.DefaultConfig(filepath.Join(t.TempDir(), "outbox.db")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ix, err := redis.New(ctx, redis.Config{URL: redisURL, Owner: "pod-0", Timeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ix.Close() })
	tuning := config.Default()
	tuning.GCGrace = 0
	tuning.PollInterval = time.Hour
	tuning.GCInterval = time.Hour
	opt, err := goredis.ParseURL(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	raw := goredis.NewClient(opt)
	t.Cleanup(func() { raw.Close() })
	r := &rig{t: t, ctx: ctx, db: db, idx: &faultyIndex{Index: ix, raw: raw}, acked: map[string]bool{}}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	r.log = &hookLog{Log: db}
	r.e, err = delivery.New(r.log, r.idx, func() config.Tuning { return tuning },
		delivery.Config{Concurrency: 1, HoldTTL: time.Minute, StoreTimeout: 5 * time.Second}, logger)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.e.Stop(context.Background()) })
	if r.chat, _, err = db.CreateDirect(ctx, "alice", "bob"); err != nil {
		t.Fatal(err)
	}
	r.bob = &fakeConn{id: ulid.Make().String(), user: "bob", device: "phone"}
	if r.member, err = r.e.Register(ctx, r.bob); err != nil {
		t.Fatal(err)
	}
	return r
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(b)))
	return len(b), nil
}

// commit stores n messages from alice to bob and returns their ids.
func (r *rig) commit(n int) []string {
	r.t.Helper()
	drafts := make([]history.Draft, n)
	for i := range drafts {
		r.seq++
		drafts[i] = history.Draft{ID: ulid.Make().String(), ChatID: r.chat.ID, SenderID: "alice", SenderDevice: "laptop",
			CorrelationID: fmt.Sprint("k-", r.seq), Body: fmt.Sprint("m", r.seq), SentAt: time.Now().UTC()}
	}
	res, err := r.db.Commit(r.ctx, drafts)
	if err != nil {
		r.t.Fatal(err)
	}
	ids := make([]string, n)
	for i, x := range res {
		if x.Err != nil {
			r.t.Fatal(x.Err)
		}
		ids[i] = x.Message.ID
	}
	r.sent = append(r.sent, ids...)
	return ids
}

func (r *rig) ack(ids ...string) {
	r.t.Helper()
	if err := r.e.Ack(r.ctx, r.member, ids); err != nil {
		r.t.Fatal(err)
	}
	for _, id := range ids {
		r.acked[id] = true
	}
}

func (r *rig) gc() int64 {
	r.t.Helper()
	n, err := r.e.GCOnce(r.ctx)
	if err != nil {
		r.t.Fatalf("GCOnce: %v", err)
	}
	return n
}

// bobRows returns the message ids of bob's rows still in the outbox.
func (r *rig) bobRows() map[string]bool {
	r.t.Helper()
	rows, err := r.db.Scan(r.ctx, 0, -1, 100_000)
	if err != nil {
		r.t.Fatal(err)
	}
	out := map[string]bool{}
	for _, row := range rows {
		if row.Recipient == "bob" {
			out[row.Message.ID] = true
		}
	}
	return out
}

// lostUnacked lists bob's messages that he never acknowledged and whose
// outbox row is gone: the over-delete the waterline exists to prevent.
func (r *rig) lostUnacked() []string {
	r.t.Helper()
	present := r.bobRows()
	var lost []string
	for i, id := range r.sent {
		if !r.acked[id] && !present[id] {
			lost = append(lost, fmt.Sprintf("m%d", i+1))
		}
	}
	return lost
}

func (r *rig) wantNoLoss(when string) {
	r.t.Helper()
	if lost := r.lostUnacked(); len(lost) > 0 {
		r.t.Fatalf("%s: GC deleted bob's unacknowledged rows %v", when, lost)
	}
}

func (r *rig) wantReceived(ids ...string) {
	r.t.Helper()
	got := r.bob.received()
	for _, id := range ids {
		if got[id] == 0 {
			r.t.Fatalf("bob never received %s (got %v)", id, got)
		}
	}
}

func (r *rig) rebuilds() map[string]int64 { return r.e.Stats().Rebuilds }

// ---- the scenarios ----

// TestStaleReplicaFailover: B replicates A; bob acknowledged everything
// (no pin, replicated); B is promoted with that state and the primed flag;
// more messages reach bob with his pin on A only. Then either
//
//   - service-moves: the Service moves to B (a new run_id and replid behind
//     the same address), or
//   - old-master-resyncs: A rejoins as a replica of B, which replaces A's
//     data with B's stale copy, and is promoted back (the same process, so
//     the same run_id: only master_replid tells).
//
// Either way the server the index talks to holds an old, incomplete copy of
// the pins and a primed flag that claims all is well. The next GC must
// notice the identity and rebuild first.
func TestStaleReplicaFailover(t *testing.T) {
	for _, how := range []string{"service-moves", "old-master-resyncs"} {
		t.Run(how+"/detected", func(t *testing.T) {
			r := staleReplica(t, how, false)
			if got := r.rebuilds(); got[delivery.RebuildIdentity] != 1 || got[delivery.RebuildColdStart] != 1 {
				t.Fatalf("Rebuilds = %v; want one cold start and one identity-changed", got)
			}
			r.wantNoLoss("after the failover's GC pass")

			// The rebuild put back exactly what bob holds unacknowledged
			// (m6..m8), within their leases: nothing is re-sent at once,
			// nothing he acknowledged is pinned again. Once he
			// acknowledges everything GC drains his rows.
			unacked := 0
			for _, id := range r.sent {
				if !r.acked[id] {
					unacked++
				}
			}
			if st, err := r.idx.Index.Stats(r.ctx); err != nil || st.Pending != unacked {
				t.Fatalf("index after the rebuild: %+v, %v; want bob's %d unacknowledged entries pending", st, err, unacked)
			}
			before := r.bob.received()
			r.e.PollOnce(r.ctx)
			if after := r.bob.received(); !maps.Equal(before, after) {
				t.Fatalf("the rebuild re-sent frames: before %v, after %v", before, after)
			}
			r.ack(r.sent...)
			r.gc()
			if rows := r.bobRows(); len(rows) != 0 {
				t.Fatalf("%d of bob's rows left after he acknowledged everything", len(rows))
			}
			r.gc()
			if got := r.rebuilds()[delivery.RebuildIdentity]; got != 1 {
				t.Fatalf("identity-changed rebuilds = %d after more passes; want 1", got)
			}
		})

		// The counterfactual: the same story with the identity check
		// blinded. GC trusts the stale pins and deletes rows bob never
		// acknowledged. If this fails, the scenario no longer exercises
		// the check.
		t.Run(how+"/undetected-overdeletes", func(t *testing.T) {
			r := staleReplica(t, how, true)
			if got := r.rebuilds(); got[delivery.RebuildIdentity] != 0 {
				t.Fatalf("Rebuilds = %v; the blinded index should not have rebuilt", got)
			}
			lost := r.lostUnacked()
			if len(lost) == 0 {
				t.Fatal("with the identity check blinded GC deleted nothing unacknowledged: the scenario does not exercise the check")
			}
			t.Logf("without the identity check GC deleted bob's unacknowledged %v", lost)
		})
	}
}

// staleReplica plays the story up to and including the first GC pass after
// the failover. blind freezes the index's Identity before the failover.
func staleReplica(t *testing.T, how string, blind bool) *rig {
	a, b := startServer(t), startServer(t)
	b.do("REPLICAOF", "127.0.0.1", strings.Split(a.addr, ":")[1])
	waitFor(t, "B to replicate A", func() bool { return b.info("replication")["master_link_status"] == "up" })
	svc := startProxy(t, a.addr)

	r := newRig(t, "redis://"+svc.addr())

	// Phase 1, on A, replicated to B: bob gets m1..m4 and acknowledges
	// them, so B holds no pin of his.
	p1 := r.commit(4)
	r.e.PollOnce(r.ctx)
	r.wantReceived(p1...)
	r.ack(p1...)
	if n := r.gc(); n == 0 {
		t.Fatal("GC deleted nothing below bob's pin before the failover")
	}
	r.wantNoLoss("before the failover")
	waitReplicated(t, a, b)

	// B is promoted with that state (no pin of bob's, the primed flag). A
	// goes on serving through the Service for a moment, as an old master
	// does until the endpoint moves.
	b.do("REPLICAOF", "NO", "ONE")
	if role := b.info("replication")["role"]; role != "master" {
		t.Fatalf("B role %q after REPLICAOF NO ONE", role)
	}

	// Phase 2, on A only: bob gets m5..m8 and acknowledges m5, so A, and
	// A only, holds his pin at m6.
	p2 := r.commit(4)
	r.e.PollOnce(r.ctx)
	r.wantReceived(p2...)
	r.ack(p2[0])
	before := identity(t, r.idx.Index)
	runA := a.info("server")["run_id"]
	if blind {
		r.idx.freeze(t, false, true)
	}

	switch how {
	case "service-moves":
		// The Service moves to B; go-redis reconnects there.
		svc.switchTo(b.addr)
	case "old-master-resyncs":
		a.do("REPLICAOF", "127.0.0.1", strings.Split(b.addr, ":")[1])
		waitFor(t, "A to resync from B", func() bool { return a.info("replication")["master_link_status"] == "up" })
		waitReplicated(t, b, a)
		a.do("REPLICAOF", "NO", "ONE")
	default:
		t.Fatalf("unknown failover %q", how)
	}
	after := identity(t, r.idx.Index)
	if after == before {
		t.Fatalf("identity unchanged across the failover: %s", after)
	}
	if run := a.info("server")["run_id"]; how == "old-master-resyncs" && run != runA {
		t.Fatalf("A's run_id changed (%s -> %s); this case is meant to need master_replid", runA, run)
	}
	// The server carries the old primed flag: without the identity check
	// nothing would tell the engine to rebuild.
	if st, err := r.idx.Index.State(r.ctx); err != nil || !st.Primed || st.Identity != before {
		t.Fatalf("State after the failover = %+v, %v; want primed with A's old identity %s", st, err, before)
	}

	// The engine goes on: the poller refreshes its hold and bob
	// acknowledges m7, which leaves his pin at m6, so nothing is written:
	// the process's pins (pending.go) say m6, the server the index talks
	// to has none of bob's. m6 and m8 are pinned nowhere that GC can see.
	r.e.PollOnce(r.ctx)
	r.ack(p2[2])
	r.gc()
	return r
}

func identity(t *testing.T, x waterline.Index) string {
	t.Helper()
	id, err := x.Identity(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// TestRestart: Redis is killed (SIGKILL) and restarts on the same address,
// either empty (no persistence: run_id changes, the primed flag is gone) or
// from a snapshot taken before bob's latest sends (run_id changes; the
// primed flag and an old copy of the pins come back: the paper's "drops
// pending data while keeping primed=1", by restart). Each signal alone must
// make GC rebuild before it deletes; with them blinded GC over-deletes.
func TestRestart(t *testing.T) {
	for _, tc := range []struct {
		name                string
		snapshot            bool
		blindState, blindID bool
		wantReason          string // "" : no rebuild expected, GC over-deletes
	}{
		{"empty/detected", false, false, false, delivery.RebuildColdStart},
		{"empty/primed-flag-alone", false, false, true, delivery.RebuildColdStart},
		{"empty/identity-alone", false, true, false, delivery.RebuildIdentity},
		{"empty/undetected-overdeletes", false, true, true, ""},
		{"snapshot/detected", true, false, false, delivery.RebuildIdentity},
		{"snapshot/undetected-overdeletes", true, false, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := startServer(t)
			r := newRig(t, "redis://"+a.addr)

			// bob gets m1..m4 and acknowledges m1.
			p1 := r.commit(4)
			r.e.PollOnce(r.ctx)
			r.wantReceived(p1...)
			r.ack(p1[0])
			r.gc()
			r.wantNoLoss("before the restart")
			acks := p1[1:2]
			if tc.snapshot {
				// bob acknowledges the rest, so the snapshot holds no pin
				// of his; then he gets m5..m8, pinned (at m5) after it.
				// The pins are the process's (pending.go), written to
				// Redis when they move: what the restart loses is the
				// pin written after the snapshot.
				r.ack(p1[1:]...)
				a.do("SAVE")
				p2 := r.commit(4)
				r.e.PollOnce(r.ctx)
				r.wantReceived(p2...)
				acks = p2[1:2] // m6: his pin stays at m5, nothing is written
			}
			before := identity(t, r.idx.Index)
			r.idx.freeze(t, tc.blindState, tc.blindID)

			a.kill()
			a.start()
			if after := identity(t, r.idx.Index); after == before {
				t.Fatalf("identity unchanged across a restart: %s", after)
			}
			st, err := r.idx.Index.State(r.ctx)
			if err != nil || st.Primed != tc.snapshot {
				t.Fatalf("State after the restart = %+v, %v; want primed %v", st, err, tc.snapshot)
			}

			// Life goes on: the poller holds, bob acknowledges (the
			// empty server ignores it: he is not registered there), two
			// more messages are committed and scanned (the empty server
			// refuses their sends for the same reason).
			r.e.PollOnce(r.ctx)
			r.ack(acks...)
			r.commit(2)
			r.e.PollOnce(r.ctx)
			r.gc()

			got := r.rebuilds()
			if tc.wantReason == "" {
				if len(got) != 1 {
					t.Fatalf("Rebuilds = %v; the blinded index should not have rebuilt", got)
				}
				lost := r.lostUnacked()
				if len(lost) == 0 {
					t.Fatal("with the checks blinded GC deleted nothing unacknowledged: the scenario does not exercise them")
				}
				t.Logf("without the checks GC deleted bob's unacknowledged %v", lost)
				return
			}
			want := map[string]int64{delivery.RebuildColdStart: 1}
			want[tc.wantReason]++
			if !maps.Equal(got, want) {
				t.Fatalf("Rebuilds = %v; want %v", got, want)
			}
			r.wantNoLoss("after the restart's GC pass")
		})
	}
}

// TestGCInFlightAcrossARedisEvent: a flush, an empty restart or a move to a
// stale replica that lands inside a GC pass, after its priming check and
// before its safe line (here: while it reads the outbox's head, as a
// PostgreSQL whose backends stall would), must not delete bob's
// unacknowledged rows: the safe line is refused (ErrNotPrimed) in the same
// script that would read it, and the next pass rebuilds first. Issue 15
// saw 10 of 10 unacknowledged rows deleted this way, and none re-delivered.
// The counterfactual runs the same story with the script's check blinded.
func TestGCInFlightAcrossARedisEvent(t *testing.T) {
	for _, tc := range []struct {
		name  string
		event func(a, b *server, svc *proxy)
	}{
		{"flushall", func(a, b *server, svc *proxy) { a.do("FLUSHALL") }},
		{"restart-empty", func(a, b *server, svc *proxy) { a.kill(); a.start() }},
		{"stale-replica", func(a, b *server, svc *proxy) {
			b.do("REPLICAOF", "NO", "ONE")
			svc.switchTo(b.addr)
		}},
	} {
		for _, blind := range []bool{false, true} {
			name := tc.name
			if blind {
				name += "/unchecked-overdeletes"
			}
			t.Run(name, func(t *testing.T) {
				a, b := startServer(t), startServer(t)
				svc := startProxy(t, a.addr)
				// B is a replica of A (attached first: a master's first
				// replica changes its replication id) that stops following
				// A after the engine primed and before bob's sends.
				b.do("REPLICAOF", "127.0.0.1", strings.Split(a.addr, ":")[1])
				waitFor(t, "B to replicate A", func() bool { return b.info("replication")["master_link_status"] == "up" })
				r := newRig(t, "redis://"+svc.addr())
				waitReplicated(t, a, b)
				b.do("REPLICAOF", "127.0.0.1", "1") // detached: it keeps its copy, gets nothing new

				ids := r.commit(10)
				r.e.PollOnce(r.ctx)
				r.wantReceived(ids...)
				r.gc() // alice's rows below bob's pin go
				before := len(r.bobRows())
				if blind {
					r.idx.freeze(t, false, false)
					r.idx.mu.Lock()
					r.idx.blindLine = true
					r.idx.mu.Unlock()
				}
				r.during(func() {
					tc.event(a, b, svc)
					// The poller goes on meanwhile and holds the outbox
					// at its scan position on the server it now reaches.
					r.e.PollOnce(r.ctx)
				})
				n, err := r.e.GCOnce(r.ctx)
				if blind {
					if lost := r.lostUnacked(); len(lost) == 0 {
						t.Fatalf("with the check blinded the pass deleted nothing of bob's (n=%d, err=%v): the scenario does not exercise it", n, err)
					}
					return
				}
				if !errors.Is(err, waterline.ErrNotPrimed) {
					t.Errorf("GC pass across the %s: err = %v, want ErrNotPrimed", tc.name, err)
				}
				r.wantNoLoss("the GC pass across the " + tc.name)
				if after := len(r.bobRows()); after != before {
					t.Fatalf("bob's rows %d -> %d across the %s", before, after, tc.name)
				}
				r.gc() // the next pass rebuilds from bob's window, then deletes what is safe
				r.wantNoLoss("the pass after the " + tc.name)
				if st, err := r.idx.Index.Stats(r.ctx); err != nil || st.Pending != 10 {
					t.Fatalf("index after the rebuild: %+v, %v; want bob's 10 unacknowledged entries", st, err)
				}
				r.ack(ids...)
				r.e.PollOnce(r.ctx)
				r.gc()
				if rows := r.bobRows(); len(rows) != 0 {
					t.Fatalf("%d of bob's rows left after he acknowledged everything", len(rows))
				}
			})
		}
	}
}

// TestSentinelFailover: in Sentinel mode the index follows a failover to
// the promoted replica, and its Identity changes while the replicated
// primed flag does not, which is what makes the engine rebuild.
func TestSentinelFailover(t *testing.T) {
	ctx := context.Background()
	a, b := startServer(t), startServer(t)
	b.do("REPLICAOF", "127.0.0.1", strings.Split(a.addr, ":")[1])
	waitFor(t, "B to replicate A", func() bool { return b.info("replication")["master_link_status"] == "up" })
	sent := startSentinel(t, a)
	waitFor(t, "Sentinel to discover B", func() bool {
		return sent.info("sentinel")["master0"] != "" && strings.Contains(sent.info("sentinel")["master0"], "slaves=1")
	})

	x, err := redis.New(ctx, redis.Config{SentinelAddrs: []string{sent.addr}, MasterName: "mymaster", Timeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer x.Close()
	idA := identity(t, x)
	if !strings.HasPrefix(idA, a.info("server")["run_id"]+"/") {
		t.Fatalf("Identity %s is not A's (run_id %s)", idA, a.info("server")["run_id"])
	}
	if err := x.Connect(ctx, waterline.Client{ID: "bob"}); err != nil {
		t.Fatal(err)
	}
	if _, err := x.Sent(ctx, "bob", []waterline.Entry{{MessageID: "m1", Pos: 42}}, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if err := x.MarkPrimed(ctx, idA); err != nil {
		t.Fatal(err)
	}
	waitReplicated(t, a, b)

	// Sentinel answers NOGOODSLAVE until it has polled the replica itself.
	waitFor(t, "Sentinel to accept the failover", func() bool {
		return sent.client.Do(ctx, "SENTINEL", "FAILOVER", "mymaster").Err() == nil
	})
	waitFor(t, "Sentinel to promote B", func() bool {
		addr, err := sent.client.Do(ctx, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", "mymaster").StringSlice()
		return err == nil && len(addr) == 2 && net.JoinHostPort(addr[0], addr[1]) == b.addr
	})
	runB := b.info("server")["run_id"]
	waitFor(t, "the index to follow the failover to B", func() bool {
		id, err := x.Identity(ctx)
		return err == nil && strings.HasPrefix(id, runB+"/")
	})
	st, err := x.State(ctx)
	if err != nil || !st.Primed || st.Identity != idA {
		t.Fatalf("State on B = %+v, %v; want primed with A's identity", st, err)
	}
	// Asked for A's identity, B computes no line: the server changed.
	if l, ok, err := x.SafeLine(ctx, 0, idA); !errors.Is(err, waterline.ErrNotPrimed) {
		t.Fatalf("SafeLine on B for A's identity = %d, %v, %v; want ErrNotPrimed", l, ok, err)
	}
	idB := identity(t, x)
	if err := x.MarkPrimed(ctx, idB); err != nil {
		t.Fatal(err)
	}
	if l, ok, err := x.SafeLine(ctx, 0, idB); err != nil || !ok || l != 42 {
		t.Fatalf("SafeLine on B = %d, %v, %v; want bob's pin 42", l, ok, err)
	}
	if _, err := x.Ack(ctx, "bob", []string{"m1"}); err != nil {
		t.Fatalf("Ack on B: %v", err)
	}
}
