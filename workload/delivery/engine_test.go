package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
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
func (c *fakeConn) all() [][]byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.frames)
}

// messageIDOf decodes the messageId of a message frame.
func messageIDOf(t testing.TB, frame []byte) string {
	t.Helper()
	var f struct {
		Type      string `json:"type"`
		MessageID string `json:"messageId"`
	}
	if err := json.Unmarshal(frame, &f); err != nil || f.Type != "message" {
		t.Fatalf("not a message frame: %s (%v)", frame, err)
	}
	return f.MessageID
}
func (c *fakeConn) code() int { c.mu.Lock(); defer c.mu.Unlock(); return c.closed }

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
	return newRigOn(t, openTestDB(t), mutate)
}

// openTestDB opens a fresh SQLite store in the test's directory, closed
// when the test ends.
func openTestDB(t testing.TB) *sqlite.DB {
	t.Helper()
	db, err := sqlite.Open(context.Background(), sqlite.DefaultConfig(filepath.Join(t.TempDir(), "t.db")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
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
		e.poller.addPartition(p)
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
	id, err := r.idx.Identity(context.Background())
	if err != nil {
		r.t.Fatal(err)
	}
	l, ok, err := r.idx.SafeLine(context.Background(), 0, id)
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

// The overload reaper judges a full window held over time: a connection
// whose window stays full while messages wait behind it for longer than
// pending-timeout is withdrawn; the window itself keeps it from ever
// holding more than max-pending.
func TestOverloadReaper(t *testing.T) {
	r := newRig(t, func(tu *config.Tuning) { tu.MaxPending = 2; tu.PendingTimeout = time.Second })
	bob := newConn("bob", "phone")
	r.register(bob)
	r.commit(3)
	r.e.PollOnce(context.Background())
	if bob.code() != 0 || bob.count() != 2 {
		t.Fatalf("after a burst of 3: closed %d with %d frames; want open with the window's 2", bob.code(), bob.count())
	}
	r.clk.advance(900 * time.Millisecond)
	r.e.PollOnce(context.Background())
	if bob.code() != 0 {
		t.Fatalf("closed with %d inside pending-timeout", bob.code())
	}
	r.clk.advance(200 * time.Millisecond)
	r.e.PollOnce(context.Background())
	if bob.code() != protocol.ClosePending {
		t.Fatalf("window full past pending-timeout: close code %d, want %d", bob.code(), protocol.ClosePending)
	}
	if bob.count() != 2 {
		t.Fatalf("bob got %d frames, want never more than max-pending 2", bob.count())
	}
}

func TestReconnectGraceSparesYoungConnections(t *testing.T) {
	r := newRig(t, func(tu *config.Tuning) {
		tu.MaxPending = 1
		tu.PendingTimeout = time.Second
		tu.ReconnectGrace = 10 * time.Second
	})
	bob := newConn("bob", "phone")
	r.register(bob)
	r.commit(3)
	r.e.PollOnce(context.Background())
	r.clk.advance(5 * time.Second)
	r.e.PollOnce(context.Background())
	if bob.code() != 0 {
		t.Fatalf("a connection inside the grace was withdrawn with %d", bob.code())
	}
	r.clk.advance(6 * time.Second)
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
	r.e.fastPath.deliver(fastItemsFor(r.e, res))
	r.e.PollOnce(context.Background())
	r.e.fastPath.deliver(fastItemsFor(r.e, res)) // late fast-path items
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
			for _, m := range e.reg.ofUser(d.Recipient) {
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
	r.e.Touch(r.e.reg.get(bob.id))
	if n := r.gc(); n != 3 {
		t.Fatalf("backstop deleted %d rows older than the outbox retention, want the 3 left (pinned or not)", n)
	}
}

// flakyIdentity wraps an index and reports a chosen server identity, as a
// Redis replica promoted in a failover would. The wrapped index knows only
// its own identity, so the chosen one is translated to it on the way in
// (MarkPrimed, SafeLine) and back on the way out (State).
// It stands in for a failover to a replica the in-process index cannot have.
type flakyIdentity struct {
	waterline.Index
	mu sync.Mutex
	id string
}

func (f *flakyIdentity) fake() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.id
}

func (f *flakyIdentity) Identity(ctx context.Context) (string, error) {
	if id := f.fake(); id != "" {
		return id, nil
	}
	return f.Index.Identity(ctx)
}

func (f *flakyIdentity) MarkPrimed(ctx context.Context, id string) error {
	if fake := f.fake(); fake != "" && id == fake {
		return f.Index.MarkPrimed(ctx, "fake:"+fake)
	}
	return f.Index.MarkPrimed(ctx, id)
}

func (f *flakyIdentity) State(ctx context.Context) (waterline.State, error) {
	st, err := f.Index.State(ctx)
	if after, ok := strings.CutPrefix(st.Identity, "fake:"); ok {
		st.Identity = after
	}
	return st, err
}

// SafeLine passes through to the wrapped index's own check until a fake
// identity is set; then the wrapped index cannot know the server changed,
// so the check is made here as a server with that identity would.
func (f *flakyIdentity) SafeLine(ctx context.Context, p int32, id string) (int64, bool, error) {
	fake := f.fake()
	if fake == "" {
		return f.Index.SafeLine(ctx, p, id)
	}
	st, err := f.State(ctx)
	if err != nil {
		return 0, false, err
	}
	if id != fake || !st.Primed || st.Identity != fake {
		return 0, false, waterline.ErrNotPrimed
	}
	real, _ := f.Index.Identity(ctx)
	_ = f.Index.MarkPrimed(ctx, real)
	defer f.Index.MarkPrimed(ctx, "fake:"+fake)
	return f.Index.SafeLine(ctx, p, real)
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
			// The restored entries keep their leases: the rebuild re-sends
			// nothing. Acked, the outbox drains.
			r.e.PollOnce(context.Background())
			if n := bob.count(); n != 3 {
				t.Fatalf("bob got %d frames across the rebuild, want the 3 first sends only", n)
			}
			ids := []string{res[0].Message.ID, res[1].Message.ID, res[2].Message.ID}
			_ = r.e.Ack(context.Background(), r.e.reg.get(bob.id), ids)
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
	maxLag := tu.Lease * time.Duration(tu.MaxDeliveryAttempts)
	if OverloadReaper(tu, 0, 0, 0, time.Hour) || OverloadReaper(tu, tu.PendingTimeout, maxLag, maxLag, time.Hour) {
		t.Error("overload reaper fired on a window that makes progress and a full window within lease x attempts")
	}
	if !OverloadReaper(tu, tu.PendingTimeout+1, 0, 0, time.Hour) {
		t.Error("overload reaper must fire once a full window made no progress for longer than pending-timeout")
	}
	if !OverloadReaper(tu, 0, maxLag+1, maxLag+1, time.Hour) {
		t.Error("overload reaper must fire once the window was full for longer than lease x max-delivery-attempts, all the time behind")
	}
	if OverloadReaper(tu, 0, maxLag+1, 4*maxLag, time.Hour) {
		t.Error("overload reaper fired on a window full for a quarter of the time behind: the server, not the client, held the backlog")
	}
	if AttemptsReaper(tu, tu.MaxDeliveryAttempts-1, time.Hour) || !AttemptsReaper(tu, tu.MaxDeliveryAttempts, time.Hour) {
		t.Error("attempts reaper must fire once a message is due after max-delivery-attempts sends")
	}
	tu.ReconnectGrace = time.Second
	if OverloadReaper(tu, time.Hour, time.Hour, time.Hour, 500*time.Millisecond) || AttemptsReaper(tu, 1000, 500*time.Millisecond) {
		t.Error("grace must spare a young connection")
	}
	now := time.Now()
	if IdleReaper(tu, now.Add(-tu.PingInterval-tu.PingTimeout), now) || !IdleReaper(tu, now.Add(-tu.PingInterval-tu.PingTimeout-1), now) {
		t.Error("idle reaper must fire after ping-interval + ping-timeout of silence")
	}
}

// A burst larger than the push window is paced by it: the connection never
// holds more than max-pending unacknowledged frames, each ack lets the next
// ones go, every message arrives once and in commit order, and a client
// that acknowledges as frames arrive is never withdrawn (issue 15).
func TestPushWindowPacesABurst(t *testing.T) {
	r := newRig(t, func(tu *config.Tuning) { tu.MaxPending = 4; tu.PendingTimeout = time.Second })
	bob := newConn("bob", "phone")
	m := r.register(bob)
	res := r.commit(30)
	ctx := context.Background()
	r.e.fastPath.deliver(fastItemsFor(r.e, res)) // the whole burst at once
	seen := 0
	for round := 0; seen < 30; round++ {
		if round > 40 {
			t.Fatalf("burst not delivered: %d of 30 after %d rounds", seen, round)
		}
		r.e.PollOnce(ctx)
		frames := bob.all()
		if n := len(frames) - seen; n > 4 {
			t.Fatalf("round %d: %d frames unacknowledged, want at most the window of 4", round, n)
		}
		var ids []string
		for _, f := range frames[seen:] {
			ids = append(ids, messageIDOf(t, f))
		}
		for i, id := range ids {
			if want := res[seen+i].Message.ID; id != want {
				t.Fatalf("frame %d is %s, want %s (commit order)", seen+i, id, want)
			}
		}
		seen = len(frames)
		r.clk.advance(500 * time.Millisecond) // slower than a real client, within pending-timeout
		if err := r.e.Ack(ctx, m, ids); err != nil {
			t.Fatal(err)
		}
	}
	if bob.code() != 0 {
		t.Fatalf("a client that acknowledged every frame was closed with %d", bob.code())
	}
	if st := r.e.Stats(); st.Redeliveries != 0 || st.Behind != 0 {
		t.Fatalf("stats after the burst: %d re-deliveries, %d behind; want 0, 0", st.Redeliveries, st.Behind)
	}
	r.gc()
	if d := r.depth(); d != 0 {
		t.Fatalf("outbox depth %d after every ack, want 0", d)
	}
}

// A client that acknowledges, but more slowly than messages come, falls
// further and further behind: once the oldest message waiting for it is
// older than lease x max-delivery-attempts it is withdrawn (4003), though
// its window keeps moving.
func TestOverloadReaperWithdrawsAClientThatCannotKeepUp(t *testing.T) {
	r := newRig(t, func(tu *config.Tuning) {
		tu.MaxPending = 2
		tu.PendingTimeout = 2 * time.Second
		tu.Lease = time.Second
		tu.MaxDeliveryAttempts = 3
	})
	bob := newConn("bob", "phone")
	m := r.register(bob)
	ctx := context.Background()
	acked := 0
	for step := 0; step < 40 && bob.code() == 0; step++ {
		r.commit(4) // 4 messages a step, bob acknowledges 2
		r.e.PollOnce(ctx)
		frames := bob.all()
		var ids []string
		for _, f := range frames[acked:] {
			ids = append(ids, messageIDOf(t, f))
		}
		acked = len(frames)
		r.clk.advance(500 * time.Millisecond)
		_ = r.e.Ack(ctx, m, ids)
	}
	if bob.code() != protocol.ClosePending {
		t.Fatalf("a client falling ever further behind: close code %d, want %d", bob.code(), protocol.ClosePending)
	}
	if r.e.Stats().Redeliveries != 0 {
		t.Fatal("it acknowledged everything it got: nothing should have been re-sent")
	}
}

// Time with room in the window is the server's: a client that acknowledges
// every frame within its round trip is not withdrawn when the server is
// slow to refill its window (a loaded poller, database or CPU), however far
// behind that leaves it in wall-clock time; only time with a full window
// counts against it, and only when the window is full most of the time
// (issue 15: with the acceptance age of the oldest waiting message, the
// time since the last acknowledgement, or the full time alone as the
// measure, this client was withdrawn under load).
func TestOverloadReaperSparesAClientTheServerIsSlowToServe(t *testing.T) {
	r := newRig(t, func(tu *config.Tuning) {
		tu.MaxPending = 2
		tu.PendingTimeout = time.Second
		tu.Lease = time.Second
		tu.MaxDeliveryAttempts = 3
	})
	bob := newConn("bob", "phone")
	m := r.register(bob)
	ctx := context.Background()
	acked, committed := 0, 0
	step := func() {
		r.e.PollOnce(ctx) // the server's turn: refill the window, then judge
		var ids []string
		for _, f := range bob.all()[acked:] {
			ids = append(ids, messageIDOf(t, f))
		}
		acked += len(ids)
		// The client answers within a round trip of 400 ms: the window is
		// full for that long each time, more than lease x attempts in all
		// but about a fifth of the time behind.
		r.clk.advance(400 * time.Millisecond)
		if err := r.e.Ack(ctx, m, ids); err != nil {
			t.Fatal(err)
		}
		r.clk.advance(1500 * time.Millisecond) // the server is slow to come back
	}
	for i := 0; i < 12 && bob.code() == 0; i++ {
		r.commit(3) // more than the window each round: the backlog grows
		committed += 3
		step()
	}
	for i := 0; i < 40 && acked < committed && bob.code() == 0; i++ {
		step()
	}
	if bob.code() != 0 {
		t.Fatalf("a client that acknowledged every frame at once was closed with %d (%d of %d received)", bob.code(), acked, committed)
	}
	if acked != committed {
		t.Fatalf("received %d of %d", acked, committed)
	}
	if st := r.e.Stats(); st.Redeliveries != 0 {
		t.Fatalf("%d re-deliveries; it acknowledged everything at once", st.Redeliveries)
	}
}

// While messages wait behind a full window, GC keeps their rows: the
// poller's hold stays at the first row the connection was not sent.
func TestGCKeepsRowsWaitingBehindAFullWindow(t *testing.T) {
	r := newRig(t, func(tu *config.Tuning) { tu.MaxPending = 2; tu.PendingTimeout = time.Hour })
	bob := newConn("bob", "phone")
	m := r.register(bob)
	res := r.commit(6)
	ctx := context.Background()
	r.e.PollOnce(ctx) // bob gets 2; 4 wait
	if err := r.e.Ack(ctx, m, []string{res[0].Message.ID, res[1].Message.ID}); err != nil {
		t.Fatal(err)
	}
	// Not yet polled again: nothing pins bob's 4 waiting rows but the hold.
	r.gc()
	if l, _ := r.line(); l > bobPos(res[2]) {
		t.Fatalf("safe line %d is above bob's first waiting row %d", l, bobPos(res[2]))
	}
	for i := 0; i < 3; i++ {
		r.e.PollOnce(ctx)
		var ids []string
		for _, f := range bob.all() {
			ids = append(ids, messageIDOf(t, f))
		}
		_ = r.e.Ack(ctx, m, ids)
	}
	if got := bob.count(); got != 6 {
		t.Fatalf("bob got %d frames, want all 6 once", got)
	}
}

// A rebuild puts back what each connection holds unacknowledged, from its
// window: an acknowledgement the index lost (a stale replica) does not pin
// the row again, and nothing is re-sent because of the rebuild (issue 15:
// the rebuild used to re-pin every row above each connection's start, as
// due, and re-sent them all).
func TestRebuildRestoresTheWindowNotTheOutbox(t *testing.T) {
	r := newRig(t, nil)
	f := &flakyIdentity{Index: r.idx}
	r.idx, r.e.idx = f, f
	bob := newConn("bob", "phone")
	m := r.register(bob)
	res := r.commit(3)
	ctx := context.Background()
	r.e.PollOnce(ctx)
	// The replica that will be promoted saw the three sends, not the ack.
	if err := r.e.Ack(ctx, m, []string{res[0].Message.ID}); err != nil {
		t.Fatal(err)
	}
	st, _ := f.Index.State(ctx)
	_ = f.Index.Reset(ctx)
	_ = f.Index.Connect(ctx, m.client)
	entries := []waterline.Entry{}
	for _, x := range res {
		entries = append(entries, waterline.Entry{MessageID: x.Message.ID, Pos: bobPos(x)})
	}
	if _, err := f.Index.Sent(ctx, m.ID(), entries, r.clk.now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	_ = f.Index.MarkPrimed(ctx, st.Identity)
	f.mu.Lock()
	f.id = "promoted-replica"
	f.mu.Unlock()

	r.gc() // detects the new identity and rebuilds first
	if n := r.e.Stats().Rebuilds[RebuildIdentity]; n != 1 {
		t.Fatalf("identity-changed rebuilds = %d, want 1", n)
	}
	if l, _ := r.line(); l != bobPos(res[1]) {
		t.Fatalf("safe line %d after the rebuild, want bob's first unacknowledged row %d (the acknowledged %d must not be pinned again)", l, bobPos(res[1]), bobPos(res[0]))
	}
	r.e.PollOnce(ctx)
	if n := bob.count(); n != 3 {
		t.Fatalf("bob got %d frames, want the 3 first sends: the rebuild re-sent", n)
	}
	// Past the lease, what is still unacknowledged goes again, once.
	r.clk.advance(r.tuning.Lease + time.Second)
	r.e.PollOnce(ctx)
	if n := bob.count(); n != 5 {
		t.Fatalf("bob got %d frames after the lease, want 3 + the 2 unacknowledged", n)
	}
	if bob.code() != 0 {
		t.Fatalf("closed with %d", bob.code())
	}
}

// An entry the index holds as due but the connection's window does not
// (the client acknowledged it; the index missed the ack or a re-send crossed
// it) is dropped from the index, not taken as a stalled message: the old
// code withdrew the client with 4002 "attempts" for it (issue 15).
func TestAcknowledgedEntryDueInTheIndexIsNotAnAttemptsWithdrawal(t *testing.T) {
	r := newRig(t, func(tu *config.Tuning) { tu.MaxDeliveryAttempts = 100 })
	bob := newConn("bob", "phone")
	m := r.register(bob)
	res := r.commit(1)
	ctx := context.Background()
	r.e.PollOnce(ctx)
	if err := r.e.Ack(ctx, m, []string{res[0].Message.ID}); err != nil {
		t.Fatal(err)
	}
	// The index gets the entry back, due (an ack lost in a failover, a
	// re-send recorded after the ack).
	e := waterline.Entry{MessageID: res[0].Message.ID, Pos: bobPos(res[0])}
	if err := r.idx.Restore(ctx, m.ID(), []waterline.Pending{{Entry: e, Attempts: 1}}); err != nil {
		t.Fatal(err)
	}
	r.e.PollOnce(ctx)
	if bob.code() != 0 {
		t.Fatalf("closed with %d for a message it had acknowledged", bob.code())
	}
	if st, _ := r.idx.Stats(ctx); st.Pending != 0 {
		t.Fatalf("index still holds %d entries, want the acknowledged one dropped", st.Pending)
	}
	if n := bob.count(); n != 1 {
		t.Fatalf("bob got %d frames, want 1 (an acknowledged message is not re-sent)", n)
	}
}

// A flush or a failover that lands between GC's priming check and its read
// of the safe line (here: while it reads the outbox's head, as a slow
// PostgreSQL would) must not yield a line from the emptied index: nothing
// is deleted, and the next pass rebuilds (issue 15: the old SafeLine checked
// nothing and every row past the grace went, pinned or not).
func TestGCInFlightDoesNotOverDeleteAfterAFlush(t *testing.T) {
	for _, tc := range []struct {
		name string
		lose func(f *flakyIdentity)
	}{
		{"flush", func(f *flakyIdentity) { _ = f.Index.Reset(context.Background()) }},
		{"failover", func(f *flakyIdentity) {
			ctx := context.Background()
			st, _ := f.Index.State(ctx)
			_ = f.Index.Reset(ctx)
			_ = f.Index.MarkPrimed(ctx, "fake:"+st.Identity) // the stale replica's flag
			f.mu.Lock()
			f.id = "promoted-replica"
			f.mu.Unlock()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, nil)
			f := &flakyIdentity{Index: r.idx}
			r.idx, r.e.idx = f, f
			bob := newConn("bob", "phone")
			r.register(bob)
			r.commit(10)
			ctx := context.Background()
			r.e.PollOnce(ctx) // bob holds 10 unacknowledged (his window is 20)
			r.gc()            // alice's rows below bob's pin go
			before := r.depth()
			fired := false
			r.e.hooks.beforeSafeLine = func() {
				if !fired {
					fired = true
					tc.lose(f)
				}
			}
			n, err := r.e.GCOnce(ctx)
			if !errors.Is(err, waterline.ErrNotPrimed) {
				t.Errorf("GC pass across the %s: err = %v, want ErrNotPrimed", tc.name, err)
			}
			if n != 0 || r.depth() != before {
				t.Fatalf("GC pass across the %s deleted %d rows (depth %d -> %d): bob's unacknowledged rows went", tc.name, n, before, r.depth())
			}
			r.gc() // the next pass rebuilds, then deletes only what is safe
			if r.depth() != before {
				t.Fatalf("after the rebuild: depth %d -> %d", before, r.depth())
			}
		})
	}
}

// TestFastPathWorkersFollowTheIndex: without Config.Concurrency the fast
// path has one worker per core with the in-process index (its sends never
// wait, so more workers only add wake-ups) and 32 with a remote one
// (round trips to hide), and only the in-process index makes index calls
// without a deadline.
func TestFastPathWorkersFollowTheIndex(t *testing.T) {
	db := openTestDB(t)
	for _, c := range []struct {
		name  string
		idx   waterline.Index
		want  int
		local bool
	}{
		{"in-process", memory.New(), runtime.GOMAXPROCS(0), true},
		{"remote", struct{ waterline.Index }{memory.New()}, 32, false},
	} {
		e, err := New(db, c.idx, func() config.Tuning { return config.Default() }, Config{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if got := len(e.fastPath.queues); got != c.want || e.local != c.local {
			t.Errorf("%s index: %d fast-path workers, local %v; want %d, %v", c.name, got, e.local, c.want, c.local)
		}
		ctx, cancel := e.ctx()
		if _, has := ctx.Deadline(); has == c.local {
			t.Errorf("%s index: index call context has a deadline: %v, want %v", c.name, has, !c.local)
		}
		cancel()
	}
	e, err := New(db, memory.New(), func() config.Tuning { return config.Default() }, Config{Concurrency: 5}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := len(e.fastPath.queues); got != 5 {
		t.Errorf("Config.Concurrency 5: %d workers", got)
	}
}

// handoff hands res to the fast path as the committer does (coverage
// included) and delivers what it queued, as the workers would.
func (r *rig) handoff(res []history.Result) {
	r.t.Helper()
	var batch []Committed
	for _, x := range res {
		batch = append(batch, Committed{Message: x.Message, Rows: x.Deliveries})
	}
	r.e.Handoff(batch)
	for _, q := range r.e.fastPath.queues {
		var items []fastItem
		for len(q) > 0 {
			items = append(items, <-q)
		}
		r.e.fastPath.deliver(items)
	}
}

// A member the poller passed through its floor (the commits the fast path
// delivered whole, so the scan never offered it a row) and that then falls
// behind a full window is caught up from the floor, not from its own older
// horizon: the rows under the floor were delivered and acknowledged, their
// fast-path marks dropped, and a catch-up from below would send every one
// again. The marks of rows the poller passed do not pile up either.
func TestFloorBecomesTheHorizonOfAMemberFallingBehind(t *testing.T) {
	r := newRig(t, func(tu *config.Tuning) { tu.MaxPending = 4 })
	ctx := context.Background()
	bob := newConn("bob", "phone")
	m := r.register(bob)
	ack := func(from int) {
		t.Helper()
		var ids []string
		for _, f := range bob.all()[from:] {
			ids = append(ids, messageIDOf(t, f))
		}
		if err := r.e.Ack(ctx, m, ids); err != nil {
			t.Fatal(err)
		}
	}
	// The scan starts with a row it reads; from there on the fast path's
	// coverage lets it pass what was delivered whole.
	r.handoff(r.commit(1))
	r.e.PollOnce(ctx)
	ack(0)
	for i := 0; i < 3*minAheadLimit; i++ {
		r.handoff(r.commit(1))
		ack(bob.count() - 1)
		r.e.PollOnce(ctx)
	}
	p := int32(0)
	m.mu.Lock()
	own, floor, marks := m.horizon[p], r.e.poller.floorOf(p), len(m.ahead)
	m.mu.Unlock()
	if own >= floor {
		t.Fatalf("own horizon %d, floor %d: the scan offered bob rows, the floor was not what passed him", own, floor)
	}
	if marks > minAheadLimit {
		t.Fatalf("%d fast-path marks kept for rows the poller passed, want at most %d", marks, minAheadLimit)
	}
	// Fill the window with the fast path, then one more: the scan meets
	// it with the window full, and bob falls behind there.
	before := bob.count()
	r.handoff(r.commit(4))
	last := r.commit(1)
	r.handoff(last)
	r.e.PollOnce(ctx)
	if st := r.e.Stats(); st.Behind != 1 {
		t.Fatalf("%d members behind, want bob", st.Behind)
	}
	ack(before)
	r.e.PollOnce(ctx) // the catch-up
	seen := map[string]int{}
	for _, f := range bob.all() {
		seen[messageIDOf(t, f)]++
	}
	want := 1 + 3*minAheadLimit + 5
	if bob.count() != want || len(seen) != want {
		t.Fatalf("bob got %d frames of %d messages, want %d of %d (no message twice)", bob.count(), len(seen), want, want)
	}
	if seen[last[0].Message.ID] != 1 {
		t.Fatal("the message bob fell behind at was not delivered by the catch-up")
	}
}

// Fast-path marks above the horizon are what keep the poller from sending
// again a message the fast path sent and the client acknowledged before
// the scan came to its row: dropping stale marks must keep every live one,
// however many there are.
func TestLiveMarksSurviveTheirPruning(t *testing.T) {
	r := newRig(t, nil)
	ctx := context.Background()
	bob := newConn("bob", "phone")
	m := r.register(bob)
	n := 3 * minAheadLimit
	for i := 0; i < n; i++ {
		r.e.fastPath.deliver(fastItemsFor(r.e, r.commit(1))) // no coverage: the scan reads every row
		if err := r.e.Ack(ctx, m, []string{messageIDOf(t, bob.all()[i])}); err != nil {
			t.Fatal(err)
		}
	}
	r.e.PollOnce(ctx)
	if got := bob.count(); got != n {
		t.Fatalf("bob got %d frames, want %d: the scan sent acknowledged messages again", got, n)
	}
}
