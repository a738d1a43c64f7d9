package ingest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/store/sqlite"
)

// recording wraps a real store and records batch sizes; it can be made to
// fail or to block.
type recording struct {
	history.Store
	mu      sync.Mutex
	batches []int
	entered int // Commit calls begun (before the gate)
	fail    bool
	gate    chan struct{}
}

func (r *recording) Commit(ctx context.Context, d []history.Draft) ([]history.Result, error) {
	r.mu.Lock()
	r.entered++
	r.mu.Unlock()
	if r.gate != nil {
		<-r.gate
	}
	r.mu.Lock()
	r.batches = append(r.batches, len(d))
	fail := r.fail
	r.mu.Unlock()
	if fail {
		return nil, fmt.Errorf("%w: injected", history.ErrUnavailable)
	}
	return r.Store.Commit(ctx, d)
}

func setup(t *testing.T) (*recording, string) {
	t.Helper()
	db, err := sqlite.Open(context.Background(), sqlite.DefaultConfig(filepath.Join(t.TempDir(), "i.db")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	chat, _, err := db.CreateDirect(context.Background(), "alice", "bob")
	if err != nil {
		t.Fatal(err)
	}
	return &recording{Store: db}, chat.ID
}

func draft(chat string, i int) history.Draft {
	return history.Draft{ID: ulid.Make().String(), ChatID: chat, SenderID: "alice", SenderDevice: "d",
		CorrelationID: fmt.Sprint("k", i), Body: "b", SentAt: time.Now().UTC()}
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func TestGroupCommitBatchesBySizeAndOrdersAckBeforeHandoff(t *testing.T) {
	st, chat := setup(t)
	st.gate = make(chan struct{})
	var mu sync.Mutex
	var events []string
	p, err := New(st, Config{BatchSize: 4, MaxBatch: 4, BatchWait: time.Hour}, func(rs []history.Result) {
		mu.Lock()
		events = append(events, fmt.Sprintf("handoff %d", len(rs)))
		mu.Unlock()
	}, nil, Hooks{}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	p.Start()
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		if err := p.Submit(Request{Draft: draft(chat, i), Done: func(res history.Result, err error) {
			defer wg.Done()
			if err != nil || res.Err != nil {
				t.Errorf("send failed: %v %v", err, res.Err)
			}
			mu.Lock()
			events = append(events, "ack")
			mu.Unlock()
		}}); err != nil {
			t.Fatal(err)
		}
	}
	close(st.gate)
	wg.Wait()
	if err := p.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(st.batches) != "[4 4]" {
		t.Fatalf("batches %v, want [4 4] (size-bound, BatchWait is an hour)", st.batches)
	}
	want := "[ack ack ack ack handoff 4 ack ack ack ack handoff 4]"
	if fmt.Sprint(events) != want {
		t.Fatalf("events %v, want %s: every sender is answered before the hand-off", events, want)
	}
}

func TestGroupCommitFlushesAfterWait(t *testing.T) {
	st, chat := setup(t)
	p, _ := New(st, Config{BatchSize: 100, BatchWait: 20 * time.Millisecond}, nil, nil, Hooks{}, quiet)
	p.Start()
	defer p.Stop(context.Background())
	done := make(chan error, 1)
	start := time.Now()
	_ = p.Submit(Request{Draft: draft(chat, 1), Done: func(_ history.Result, err error) { done <- err }})
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 20*time.Millisecond || took > 5*time.Second {
		t.Fatalf("a lone send committed after %v, want about the 20 ms wait", took)
	}
}

// TestSparseSendsCommitWithoutWaiting: once sends arrive BatchWait or more
// apart, a lone send is committed at once, not after a wait that would
// gather nothing; and a fresh pipeline (no history of gaps) still waits.
func TestSparseSendsCommitWithoutWaiting(t *testing.T) {
	st, chat := setup(t)
	const wait = 100 * time.Millisecond
	p, _ := New(st, Config{BatchSize: 100, BatchWait: wait}, nil, nil, Hooks{}, quiet)
	p.Start()
	defer p.Stop(context.Background())
	send := func(i int) time.Duration {
		done := make(chan error, 1)
		start := time.Now()
		_ = p.Submit(Request{Draft: draft(chat, i), Done: func(_ history.Result, err error) { done <- err }})
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		return time.Since(start)
	}
	if took := send(0); took < wait {
		t.Fatalf("the first send committed after %v: a fresh pipeline should wait %v for company", took, wait)
	}
	// Six more gaps of over 2 x BatchWait bring the average gap past
	// BatchWait (each gap counts at most 2 x BatchWait, weight 1/8).
	for i := 1; i <= 7; i++ {
		time.Sleep(2*wait + 20*time.Millisecond)
		if took := send(i); i == 7 && took >= wait {
			t.Fatalf("send %d, after %d sends %v apart, committed after %v: it waited for company that was not coming", i, i, 2*wait, took)
		}
	}
}

func TestArrivalGaps(t *testing.T) {
	const wait = 10 * time.Millisecond
	var g arrivalGaps
	at := time.Unix(0, 0)
	g.observe(at, wait)
	if g.sparse(wait) {
		t.Fatal("one send: sparse, want busy")
	}
	for i := 0; i < 5; i++ { // gaps far longer than the wait count as 2 x wait
		at = at.Add(time.Hour)
		g.observe(at, wait)
	}
	if g.sparse(wait) {
		t.Fatalf("five long gaps: average %v, want still under the wait", g.avg)
	}
	at = at.Add(time.Hour)
	g.observe(at, wait)
	if !g.sparse(wait) {
		t.Fatalf("six long gaps: average %v, want sparse", g.avg)
	}
	for i := 0; i < 6; i++ { // a burst: sends 100 µs apart, or reordered
		at = at.Add(100 * time.Microsecond)
		g.observe(at, wait)
		g.observe(at.Add(-time.Millisecond), wait)
	}
	if g.sparse(wait) {
		t.Fatalf("a burst of 12 sends: average %v, want busy again", g.avg)
	}
}

func TestFullQueueShedsAndFailedCommitAnswersEverySend(t *testing.T) {
	st, chat := setup(t)
	st.gate = make(chan struct{})
	st.fail = true
	p, _ := New(st, Config{QueueSize: 2, BatchSize: 1, MaxBatch: 1, BatchWait: time.Millisecond}, nil, nil, Hooks{}, quiet)
	p.Start()
	var wg sync.WaitGroup
	var mu sync.Mutex
	failed := 0
	accepted := 0
	for i := 0; i < 10; i++ {
		wg.Add(1)
		err := p.Submit(Request{Draft: draft(chat, i), Done: func(_ history.Result, err error) {
			defer wg.Done()
			mu.Lock()
			defer mu.Unlock()
			if errors.Is(err, history.ErrUnavailable) {
				failed++
			}
		}})
		if errors.Is(err, ErrOverloaded) {
			wg.Done()
			continue
		}
		accepted++
	}
	// One in the committer's hands plus two queued.
	if accepted > 3 {
		t.Fatalf("%d sends queued with a queue of 2", accepted)
	}
	close(st.gate)
	wg.Wait()
	p.Stop(context.Background())
	if failed != accepted {
		t.Fatalf("%d of %d queued sends were answered with the commit failure", failed, accepted)
	}
	msgs, _, _ := st.Page(context.Background(), chat, "", 100)
	if len(msgs) != 0 {
		t.Fatalf("%d messages stored by failed commits", len(msgs))
	}
	if err := p.Submit(Request{Draft: draft(chat, 99), Done: func(history.Result, error) {}}); !errors.Is(err, ErrOverloaded) {
		t.Fatalf("submit after Stop: %v, want ErrOverloaded", err)
	}
}

func TestReadReceiptsAreBatched(t *testing.T) {
	st, chat := setup(t)
	got := make(chan []history.Read, 10)
	p, _ := New(st, Config{ReadBatchSize: 3, ReadBatchWait: time.Hour}, nil, func(r []history.Read) { got <- r }, Hooks{}, quiet)
	p.Start()
	for i := 0; i < 3; i++ {
		_ = p.SubmitRead(ReadRequest{Read: history.Read{ChatID: chat, UserID: "bob", MessageID: fmt.Sprint("m", i), At: time.Now()}})
	}
	select {
	case b := <-got:
		if len(b) != 3 {
			t.Fatalf("read batch of %d, want 3", len(b))
		}
	case <-time.After(10 * time.Second):
		t.Fatal("read batch not flushed at its size")
	}
	p.Stop(context.Background())
}

func TestBacklogIsDrainedIntoOneTransaction(t *testing.T) {
	st, chat := setup(t)
	st.gate = make(chan struct{})
	p, _ := New(st, Config{BatchSize: 4, MaxBatch: 10, BatchWait: 50 * time.Millisecond}, nil, nil, Hooks{}, quiet)
	p.Start()
	var wg sync.WaitGroup
	// The first batch of 4 blocks in Commit; 13 more queue up behind it.
	for i := 0; i < 17; i++ {
		wg.Add(1)
		if err := p.Submit(Request{Draft: draft(chat, i), Done: func(history.Result, error) { wg.Done() }}); err != nil {
			t.Fatal(err)
		}
		if i == 3 {
			// Wait until the first batch is inside Commit (so it is 4,
			// whatever the machine's load), then queue the backlog.
			eventually(t, func() bool { st.mu.Lock(); defer st.mu.Unlock(); return st.entered == 1 })
		}
	}
	close(st.gate)
	wg.Wait()
	p.Stop(context.Background())
	if fmt.Sprint(st.batches) != "[4 10 3]" {
		t.Fatalf("batches %v, want [4 10 3]: the backlog behind a slow commit is taken up to MaxBatch", st.batches)
	}
}

func eventually(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not reached")
		}
		time.Sleep(time.Millisecond)
	}
}

// readGate wraps a store and holds every SaveReads call until release is
// closed, so the test decides what one batch holds.
type readGate struct {
	history.Store
	release chan struct{}
	mu      sync.Mutex
	calls   []int // batch sizes, in order
}

func (g *readGate) SaveReads(ctx context.Context, reads []history.Read) error {
	<-g.release
	g.mu.Lock()
	g.calls = append(g.calls, len(reads))
	g.mu.Unlock()
	return g.Store.SaveReads(ctx, reads)
}

// One bad receipt (here a NUL in its messageId, which every store refuses
// with ErrInvalid) fails only itself: the other receipts of its batch are
// saved and forwarded, its own Done gets the error, and the Hooks count it.
// Before, the whole batch was dropped with a WARN and nothing else (issue
// 13, point 1).
func TestBadReadReceiptIsIsolated(t *testing.T) {
	st, chat := setup(t)
	g := &readGate{Store: st.Store, release: make(chan struct{})}
	var mu sync.Mutex
	var forwarded []history.Read
	var failed []error
	p, err := New(g, Config{ReadBatchSize: 31, ReadBatchWait: time.Hour}, nil, func(rs []history.Read) {
		mu.Lock()
		forwarded = append(forwarded, rs...)
		mu.Unlock()
	}, Hooks{ReadFailed: func(err error) {
		mu.Lock()
		failed = append(failed, err)
		mu.Unlock()
	}}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	p.Start()
	var wg sync.WaitGroup
	outcome := make([]error, 31)
	submit := func(i int, r history.Read) {
		wg.Add(1)
		if err := p.SubmitRead(ReadRequest{Read: r, Done: func(err error) { outcome[i] = err; wg.Done() }}); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now()
	for i := range 15 {
		submit(i, history.Read{ChatID: chat, UserID: "bob", MessageID: fmt.Sprint("m", i), At: now})
	}
	submit(15, history.Read{ChatID: chat, UserID: "mallory", MessageID: "x\x00y", At: now})
	for i := 16; i < 31; i++ {
		submit(i, history.Read{ChatID: chat, UserID: "alice", MessageID: fmt.Sprint("m", i), At: now})
	}
	close(g.release)
	wg.Wait()
	if err := p.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, err := range outcome {
		if i == 15 {
			if !errors.Is(err, history.ErrInvalid) {
				t.Errorf("the bad receipt's Done got %v, want ErrInvalid", err)
			}
		} else if err != nil {
			t.Errorf("receipt %d failed: %v", i, err)
		}
	}
	if len(forwarded) != 30 {
		t.Errorf("%d receipts forwarded, want the 30 good ones", len(forwarded))
	}
	for _, r := range forwarded {
		if r.UserID == "mallory" {
			t.Errorf("the bad receipt was forwarded: %+v", r)
		}
	}
	if len(failed) != 1 || !errors.Is(failed[0], history.ErrInvalid) {
		t.Errorf("ReadFailed hook saw %v, want one ErrInvalid", failed)
	}
	t.Logf("SaveReads batches: %v", g.calls)
}

// deadlineStore records each Commit's context deadline and holds the first
// Commit until release is closed (ignoring its context: a store that
// hangs).
type deadlineStore struct {
	history.Store
	release   chan struct{}
	mu        sync.Mutex
	deadlines []time.Time
	drafts    []string // correlation ids, in commit order
}

func (s *deadlineStore) Commit(ctx context.Context, d []history.Draft) ([]history.Result, error) {
	dl, _ := ctx.Deadline()
	s.mu.Lock()
	first := len(s.deadlines) == 0
	s.deadlines = append(s.deadlines, dl)
	for _, x := range d {
		s.drafts = append(s.drafts, x.CorrelationID)
	}
	s.mu.Unlock()
	if first {
		<-s.release
		return nil, fmt.Errorf("%w: hung", history.ErrUnavailable)
	}
	return s.Store.Commit(ctx, d)
}

// A send waits at most StoreTimeout from the moment it is queued: one that
// reached its deadline behind a hung commit is answered ErrTimeout without
// being tried, and a transaction runs until its oldest send's deadline, not
// a full timeout from its start. Before, every transaction had a fresh 10 s
// (CommitTimeout), so sends queued behind a hung one waited for it and then
// for their own (issue 13, point 5).
func TestSendWaitsAtMostTheStoreTimeout(t *testing.T) {
	st, chat := setup(t)
	ds := &deadlineStore{Store: st.Store, release: make(chan struct{})}
	const timeout = 50 * time.Millisecond
	p, err := New(ds, Config{BatchSize: 1, MaxBatch: 1, StoreTimeout: timeout}, nil, nil, Hooks{}, quiet)
	if err != nil {
		t.Fatal(err)
	}
	p.Start()
	defer p.Stop(context.Background())
	hung, queued := make(chan error, 1), make(chan error, 1)
	if err := p.Submit(Request{Draft: draft(chat, 1), Done: func(_ history.Result, err error) { hung <- err }}); err != nil {
		t.Fatal(err)
	}
	// The first commit holds the committer; the second send queues behind
	// it until its deadline has passed.
	if err := p.Submit(Request{Draft: draft(chat, 2), Done: func(_ history.Result, err error) { queued <- err }}); err != nil {
		t.Fatal(err)
	}
	<-time.After(2 * timeout)
	close(ds.release)
	if err := <-hung; !errors.Is(err, history.ErrUnavailable) {
		t.Fatalf("the hung commit's send got %v", err)
	}
	if err := <-queued; !errors.Is(err, ErrTimeout) || !errors.Is(err, history.ErrUnavailable) {
		t.Fatalf("the send queued past its deadline got %v, want ErrTimeout (overloaded)", err)
	}
	// A fresh send commits, with its own deadline.
	done := make(chan error, 1)
	before := time.Now()
	if err := p.Submit(Request{Draft: draft(chat, 3), Done: func(res history.Result, err error) { done <- errors.Join(err, res.Err) }}); err != nil {
		t.Fatal(err)
	}
	after := time.Now()
	if err := <-done; err != nil {
		t.Fatalf("fresh send: %v", err)
	}
	ds.mu.Lock()
	defer ds.mu.Unlock()
	if fmt.Sprint(ds.drafts) != "[k1 k3]" {
		t.Errorf("committed %v, want [k1 k3]: the expired send must not be tried", ds.drafts)
	}
	if dl := ds.deadlines[len(ds.deadlines)-1]; dl.Before(before.Add(timeout)) || dl.After(after.Add(timeout)) {
		t.Errorf("transaction deadline %v, want the send's own: queued between %v and %v plus %v", dl, before, after, timeout)
	}
}
