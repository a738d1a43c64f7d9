package delivery

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/tetra-messenger/tetra/workload/config"
	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/protocol"
	"github.com/tetra-messenger/tetra/workload/store/sqlite"
	"github.com/tetra-messenger/tetra/workload/waterline"
	"github.com/tetra-messenger/tetra/workload/waterline/memory"
)

// fakeConn records what the engine queues and how it closes the
// connection. The engine's contract with a socket is exactly delivery.Conn,
// so this is the whole surface; the socket itself is covered by the
// end-to-end tests in package server.
type fakeConn struct {
	id, user, device string
	mu               sync.Mutex
	frames           [][]byte
	closed           int
	full             bool
}

func newConn(user, device string) *fakeConn {
	return &fakeConn{id: ulid.Make().String(), user: user, device: device}
}

func (c *fakeConn) ID() string     { return c.id }
func (c *fakeConn) User() string   { return c.user }
func (c *fakeConn) Device() string { return c.device }
func (c *fakeConn) Enqueue(f []byte) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed != 0 || c.full {
		return false
	}
	c.frames = append(c.frames, f)
	return true
}
func (c *fakeConn) Close(code int, _ string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed == 0 {
		c.closed = code
	}
}
func (c *fakeConn) count() int { c.mu.Lock(); defer c.mu.Unlock(); return len(c.frames) }
func (c *fakeConn) code() int  { c.mu.Lock(); defer c.mu.Unlock(); return c.closed }

// clock is a settable clock shared by the engine and the index.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time          { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

type rig struct {
	t      testing.TB
	db     *sqlite.DB
	idx    waterline.Index
	e      *Engine
	clk    *clock
	tuning config.Tuning
	chat   history.Chat
	seq    int
}

// newRig builds an engine over a real SQLite store and the in-process
// index, not started (the tests drive PollOnce and GCOnce themselves),
// with a direct chat alice-bob.
func newRig(t testing.TB, mutate func(*config.Tuning)) *rig {
	t.Helper()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, sqlite.DefaultConfig(filepath.Join(t.TempDir(), "t.db")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return newRigOn(t, db, mutate)
}

func newRigOn(t testing.TB, db *sqlite.DB, mutate func(*config.Tuning)) *rig {
	t.Helper()
	ctx := context.Background()
	clk := &clock{t: time.Now()}
	r := &rig{t: t, db: db, clk: clk, tuning: config.Default()}
	r.tuning.GCGrace = 0
	if mutate != nil {
		mutate(&r.tuning)
	}
	r.idx = memory.NewWithClock(clk.now)
	e, err := New(db, r.idx, func() config.Tuning { return r.tuning }, Config{Concurrency: 1}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	e.now = clk.now
	r.e = e
	// Start's synchronous part only: partitions, hold, priming.
	parts, err := db.Partitions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e.partitions = parts
	for _, p := range parts {
		e.scanPos[p] = new(atomic.Int64)
		e.scanPos[p].Store(-1)
		if err := r.idx.Hold(ctx, e.cfg.Holder, p, 0, time.Hour); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := e.ensurePrimed(ctx); err != nil {
		t.Fatal(err)
	}
	r.chat, _, err = db.CreateDirect(ctx, "alice", "bob")
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// commit stores n messages from alice to the chat and returns the results.
func (r *rig) commit(n int) []history.Result {
	r.t.Helper()
	drafts := make([]history.Draft, n)
	for i := range drafts {
		r.seq++
		drafts[i] = history.Draft{ID: ulid.Make().String(), ChatID: r.chat.ID, SenderID: "alice", SenderDevice: "phone",
			CorrelationID: fmt.Sprintf("k-%d", r.seq), Body: fmt.Sprintf("m%d", r.seq), SentAt: time.Now().UTC()}
	}
	res, err := r.db.Commit(context.Background(), drafts)
	if err != nil {
		r.t.Fatal(err)
	}
	for _, x := range res {
		if x.Err != nil {
			r.t.Fatal(x.Err)
		}
	}
	return res
}

func (r *rig) register(c *fakeConn) *Member {
	r.t.Helper()
	m, err := r.e.Register(context.Background(), c)
	if err != nil {
		r.t.Fatal(err)
	}
	return m
}

// bobPos returns the outbox position of bob's row of a result.
func bobPos(res history.Result) int64 {
	for _, d := range res.Deliveries {
		if d.Recipient == "bob" {
			return d.Pos
		}
	}
	panic("no row for bob")
}

func (r *rig) line() (int64, bool) {
	r.t.Helper()
	l, ok, err := r.idx.SafeLine(context.Background(), 0)
	if err != nil {
		r.t.Fatal(err)
	}
	return l, ok
}

func (r *rig) depth() int64 {
	r.t.Helper()
	st, err := r.db.Stats(context.Background(), 0)
	if err != nil {
		r.t.Fatal(err)
	}
	return st.Depth
}

func (r *rig) gc() int64 {
	r.t.Helper()
	n, err := r.e.GCOnce(context.Background())
	if err != nil {
		r.t.Fatal(err)
	}
	return n
}

func TestPollerDeliversAndAckReleases(t *testing.T) {
	r := newRig(t, nil)
	bob := newConn("bob", "phone")
	m := r.register(bob)
	res := r.commit(3)
	r.e.PollOnce(context.Background())
	if got := bob.count(); got != 3 {
		t.Fatalf("bob got %d frames, want 3", got)
	}
	// Rows interleave alice1 bob1 alice2 bob2 ...; bob pins bob1, so the
	// prefix delete takes alice1 only.
	if n := r.gc(); n != 1 {
		t.Fatalf("gc deleted %d rows; want 1 (the prefix below bob's pin)", n)
	}
	ids := []string{res[0].Message.ID, res[1].Message.ID, res[2].Message.ID}
	if err := r.e.Ack(context.Background(), m, ids); err != nil {
		t.Fatal(err)
	}
	r.e.PollOnce(context.Background())
	r.gc()
	if d := r.depth(); d != 0 {
		t.Fatalf("outbox depth %d after all acks, want 0", d)
	}
}

func TestOutOfOrderAckKeepsPin(t *testing.T) {
	r := newRig(t, nil)
	bob := newConn("bob", "phone")
	m := r.register(bob)
	res := r.commit(3) // bob's rows p1 < p2 < p3
	r.e.PollOnce(context.Background())
	p1, p2 := bobPos(res[0]), bobPos(res[1])
	// Ack the newest first: the pin must stay at the oldest outstanding.
	if err := r.e.Ack(context.Background(), m, []string{res[2].Message.ID}); err != nil {
		t.Fatal(err)
	}
	r.gc()
	if l, _ := r.line(); l != p1 {
		t.Fatalf("safe line %d after acking the newest, want the pin %d", l, p1)
	}
	if r.depth() < 3 {
		t.Fatalf("GC deleted a row bob has not acknowledged")
	}
	if err := r.e.Ack(context.Background(), m, []string{res[0].Message.ID}); err != nil {
		t.Fatal(err)
	}
	r.gc()
	if l, _ := r.line(); l != p2 {
		t.Fatalf("safe line %d after acking the oldest, want %d (the gap at p2 holds it)", l, p2)
	}
}

func TestAttemptsReaperWithdrawsAndIsNotAnAck(t *testing.T) {
	r := newRig(t, func(tu *config.Tuning) { tu.Lease = time.Second; tu.MaxDeliveryAttempts = 3 })
	bob := newConn("bob", "phone")
	r.register(bob)
	r.commit(2)
	ctx := context.Background()
	r.e.PollOnce(ctx)
	for i := 0; i < 5 && bob.code() == 0; i++ {
		r.clk.advance(1100 * time.Millisecond)
		r.e.PollOnce(ctx)
	}
	if bob.code() != protocol.CloseAttempts {
		t.Fatalf("close code %d, want %d", bob.code(), protocol.CloseAttempts)
	}
	// Two messages, three sends each, no more.
	if got := bob.count(); got != 6 {
		t.Fatalf("bob got %d frames before withdrawal, want 2 messages x 3 attempts = 6", got)
	}
	st, _ := r.idx.Stats(ctx)
	if st.Clients != 0 || st.Pending != 0 {
		t.Fatalf("withdrawal left index state: %+v", st)
	}
	// The rows are reclaimable now, but history keeps every message (I3).
	r.gc()
	if d := r.depth(); d != 0 {
		t.Fatalf("outbox depth %d after withdrawal, want 0", d)
	}
	msgs, _, err := r.db.Page(ctx, r.chat.ID, "", 100)
	if err != nil || len(msgs) != 2 {
		t.Fatalf("history after withdrawal: %d messages, err %v; want 2", len(msgs), err)
	}
}

func TestOverloadReaper(t *testing.T) {
	r := newRig(t, func(tu *config.Tuning) { tu.MaxPending = 2 })
	bob := newConn("bob", "phone")
	r.register(bob)
	r.commit(2)
	r.e.PollOnce(context.Background())
	if bob.code() != 0 {
		t.Fatalf("closed with %d at pending == max-pending", bob.code())
	}
	r.commit(1)
	r.e.PollOnce(context.Background())
	if bob.code() != protocol.ClosePending {
		t.Fatalf("close code %d, want %d", bob.code(), protocol.ClosePending)
	}
}

func TestReconnectGraceSparesYoungConnections(t *testing.T) {
	r := newRig(t, func(tu *config.Tuning) { tu.MaxPending = 1; tu.ReconnectGrace = 10 * time.Second })
	bob := newConn("bob", "phone")
	r.register(bob)
	r.commit(3)
	r.e.PollOnce(context.Background())
	if bob.code() != 0 {
		t.Fatalf("a connection inside the grace was withdrawn with %d", bob.code())
	}
	r.clk.advance(11 * time.Second)
	r.commit(1)
	r.e.PollOnce(context.Background())
	if bob.code() != protocol.ClosePending {
		t.Fatalf("after the grace: close code %d, want %d", bob.code(), protocol.ClosePending)
	}
}

func TestIdleReaper(t *testing.T) {
	r := newRig(t, func(tu *config.Tuning) { tu.PingInterval = time.Second; tu.PingTimeout = time.Second })
	bob, carol := newConn("bob", "phone"), newConn("carol", "phone")
	r.register(bob)
	mc := r.register(carol)
	r.clk.advance(1500 * time.Millisecond)
	r.e.Touch(mc)
	r.clk.advance(1000 * time.Millisecond)
	r.e.ReapIdle()
	if bob.code() != protocol.CloseIdle {
		t.Fatalf("silent connection: close code %d, want %d", bob.code(), protocol.CloseIdle)
	}
	if carol.code() != 0 {
		t.Fatalf("a connection that showed life was closed with %d", carol.code())
	}
}

func TestStaleVerdictAgainstSupersededConnectionIsNoop(t *testing.T) {
	r := newRig(t, nil)
	old := newConn("bob", "phone")
	mOld := r.register(old)
	r.commit(1)
	r.e.PollOnce(context.Background())
	cur := newConn("bob", "phone")
	mCur := r.register(cur)
	if old.code() != protocol.CloseSuperseded {
		t.Fatalf("old connection close code %d, want %d", old.code(), protocol.CloseSuperseded)
	}
	r.commit(1)
	r.e.PollOnce(context.Background())
	if cur.count() != 1 {
		t.Fatalf("new connection got %d frames, want 1", cur.count())
	}
	// A verdict decided against the old connection executes late.
	if r.e.Withdraw(mOld, protocol.CloseAttempts, "stale") {
		t.Fatal("withdrawing a superseded connection reported success")
	}
	if cur.code() != 0 {
		t.Fatalf("stale verdict closed the current connection with %d", cur.code())
	}
	st, _ := r.idx.Stats(context.Background())
	if st.Clients != 1 || st.Pending != 1 {
		t.Fatalf("stale verdict touched the current connection's pending state: %+v", st)
	}
	if !r.e.Registered(mCur) {
		t.Fatal("current connection unregistered")
	}
}

func TestFastPathAndPollerNeverBothDeliver(t *testing.T) {
	r := newRig(t, nil)
	bob := newConn("bob", "phone")
	r.register(bob)
	res := r.commit(5)
	r.e.deliverFast(fastItemsFor(r.e, res))
	r.e.PollOnce(context.Background())
	r.e.deliverFast(fastItemsFor(r.e, res)) // late fast-path items
	if got := bob.count(); got != 5 {
		t.Fatalf("bob got %d frames, want exactly 5", got)
	}
}

// fastItemsFor builds the fast-path items Handoff would queue.
func fastItemsFor(e *Engine, res []history.Result) []fastItem {
	var out []fastItem
	for _, r := range res {
		frame := MessageFrame(r.Message)
		for _, d := range r.Deliveries {
			for _, m := range e.membersOf(d.Recipient) {
				out = append(out, fastItem{m: m, item: item{entry: waterline.Entry{MessageID: r.Message.ID, Partition: d.Partition, Pos: d.Pos}, frame: frame}})
			}
		}
	}
	return out
}

func TestGCNeverDeletesUnscannedRows(t *testing.T) {
	r := newRig(t, nil)
	bob := newConn("bob", "phone")
	r.register(bob)
	r.commit(3) // committed, not yet scanned, no fast path
	if n := r.gc(); n != 0 {
		t.Fatalf("GC deleted %d rows the poller had not examined", n)
	}
	r.e.PollOnce(context.Background())
	if bob.count() != 3 {
		t.Fatalf("bob got %d frames, want 3", bob.count())
	}
}

func TestGraceKeepsYoungRows(t *testing.T) {
	r := newRig(t, func(tu *config.Tuning) { tu.GCGrace = 5 * time.Second })
	r.commit(2) // nobody connected: nothing pins these rows
	r.e.PollOnce(context.Background())
	if n := r.gc(); n != 0 {
		t.Fatalf("GC deleted %d rows younger than the grace", n)
	}
	r.clk.advance(6 * time.Second)
	if n := r.gc(); n != 4 {
		t.Fatalf("GC deleted %d rows past the grace, want 4", n)
	}
}

func TestAgeBackstopDeletesPinnedRows(t *testing.T) {
	r := newRig(t, nil)
	bob := newConn("bob", "phone")
	r.register(bob)
	r.commit(2)
	r.e.PollOnce(context.Background())
	if n := r.gc(); n != 1 { // alice1, below bob's pin
		t.Fatalf("deleted %d, want 1", n)
	}
	r.clk.advance(r.tuning.OutboxRetention + time.Minute)
	r.e.Touch(r.e.member(bob.id))
	if n := r.gc(); n != 3 {
		t.Fatalf("backstop deleted %d rows older than the outbox retention, want the 3 left (pinned or not)", n)
	}
}

// flakyIdentity wraps an index and reports a chosen server identity, as a
// Redis replica promoted in a failover would.
type flakyIdentity struct {
	waterline.Index
	mu sync.Mutex
	id string
}

func (f *flakyIdentity) Identity(ctx context.Context) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.id == "" {
		return f.Index.Identity(ctx)
	}
	return f.id, nil
}

func TestGCRebuildsBeforeDeletingAfterIndexLoss(t *testing.T) {
	for _, tc := range []struct {
		name   string
		lose   func(r *rig, f *flakyIdentity)
		reason string
	}{
		{"flushed", func(r *rig, f *flakyIdentity) { _ = f.Index.Reset(context.Background()) }, RebuildColdStart},
		{"failover", func(r *rig, f *flakyIdentity) {
			// The new server lost bob's pending entries but kept the
			// primed flag: only the identity tells.
			ctx := context.Background()
			st, _ := f.Index.State(ctx)
			_ = f.Index.Reset(ctx)
			_ = f.Index.MarkPrimed(ctx, st.Identity)
			f.mu.Lock()
			f.id = "promoted-replica"
			f.mu.Unlock()
		}, RebuildIdentity},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, nil)
			f := &flakyIdentity{Index: r.idx}
			r.idx = f
			r.e.idx = f
			bob := newConn("bob", "phone")
			r.register(bob)
			res := r.commit(3)
			r.e.PollOnce(context.Background())
			r.gc() // alice's rows go
			before := r.depth()
			rebuilds := r.e.Stats().Rebuilds[tc.reason]
			tc.lose(r, f)
			r.gc()
			if d := r.depth(); d != before {
				t.Fatalf("GC after index loss deleted bob's unacknowledged rows: depth %d -> %d", before, d)
			}
			if n := r.e.Stats().Rebuilds[tc.reason] - rebuilds; n != 1 {
				t.Fatalf("rebuilds[%s] grew by %d, want 1", tc.reason, n)
			}
			if l, _ := r.line(); l != bobPos(res[0]) {
				t.Fatalf("line after rebuild %d, want bob's oldest row %d", l, bobPos(res[0]))
			}
			// The restored entries are re-delivered at once (due) and then
			// acked; the outbox drains.
			r.e.PollOnce(context.Background())
			ids := []string{res[0].Message.ID, res[1].Message.ID, res[2].Message.ID}
			_ = r.e.Ack(context.Background(), r.e.member(bob.id), ids)
			r.gc()
			if d := r.depth(); d != 0 {
				t.Fatalf("depth %d after acks, want 0", d)
			}
		})
	}
}

func TestRestartWithSameOutboxPrimesBeforeGC(t *testing.T) {
	ctx := context.Background()
	db, err := sqlite.Open(ctx, sqlite.DefaultConfig(filepath.Join(t.TempDir(), "t.db")))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r1 := newRigOn(t, db, nil)
	r1.commit(4)
	// A new process: new engine, new (empty, unprimed) index, same outbox.
	r2 := newRigOn(t, db, nil)
	if n := r2.e.Stats().Rebuilds[RebuildColdStart]; n != 1 {
		t.Fatalf("new engine primed with %d cold-start rebuilds, want 1", n)
	}
	bob := newConn("bob", "phone")
	r2.register(bob)
	r2.e.PollOnce(ctx)
	if bob.count() != 0 {
		t.Fatalf("rows committed before bob connected were pushed live (%d); they are his to recover from history", bob.count())
	}
}

func TestPolicies(t *testing.T) {
	tu := config.Default()
	if OverloadReaper(tu, tu.MaxPending, time.Hour) || !OverloadReaper(tu, tu.MaxPending+1, time.Hour) {
		t.Error("overload reaper must fire strictly above max-pending")
	}
	if AttemptsReaper(tu, tu.MaxDeliveryAttempts-1, time.Hour) || !AttemptsReaper(tu, tu.MaxDeliveryAttempts, time.Hour) {
		t.Error("attempts reaper must fire once a message is due after max-delivery-attempts sends")
	}
	tu.ReconnectGrace = time.Second
	if OverloadReaper(tu, 1000, 500*time.Millisecond) || AttemptsReaper(tu, 1000, 500*time.Millisecond) {
		t.Error("grace must spare a young connection")
	}
	now := time.Now()
	if IdleReaper(tu, now.Add(-tu.PingInterval-tu.PingTimeout), now) || !IdleReaper(tu, now.Add(-tu.PingInterval-tu.PingTimeout-1), now) {
		t.Error("idle reaper must fire after ping-interval + ping-timeout of silence")
	}
}

func TestOverloadReaperSparesABurstAckedBeforeTheTick(t *testing.T) {
	r := newRig(t, func(tu *config.Tuning) { tu.MaxPending = 2 })
	bob := newConn("bob", "phone")
	m := r.register(bob)
	res := r.commit(5)
	// The fast path pushes a burst of 5 > max-pending ...
	r.e.deliverFast(fastItemsFor(r.e, res))
	// ... and bob acknowledges it within a round trip, before the tick.
	var ids []string
	for _, x := range res {
		ids = append(ids, x.Message.ID)
	}
	if err := r.e.Ack(context.Background(), m, ids); err != nil {
		t.Fatal(err)
	}
	r.e.PollOnce(context.Background())
	if bob.code() != 0 {
		t.Fatalf("a burst acknowledged in time was withdrawn with %d", bob.code())
	}
}
