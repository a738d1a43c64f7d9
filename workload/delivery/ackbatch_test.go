package delivery

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/config"
	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/store/sqlite"
	"github.com/tetra-messenger/tetra/workload/waterline"
	"github.com/tetra-messenger/tetra/workload/waterline/memory"
)

// manyAckIndex is the in-process index with waterline.ManyAcker, as Redis
// has it, counting its calls.
type manyAckIndex struct {
	waterline.Index
	calls, single atomic.Int64
}

func (x *manyAckIndex) AckMany(ctx context.Context, batches []waterline.AckBatch) []error {
	x.calls.Add(1)
	errs := make([]error, len(batches))
	for i, b := range batches {
		_, errs[i] = x.Index.Ack(ctx, b.ClientID, b.MessageIDs)
	}
	return errs
}

func (x *manyAckIndex) Ack(ctx context.Context, client string, ids []string) (int, error) {
	x.single.Add(1)
	return x.Index.Ack(ctx, client, ids)
}

// startedEngine starts an engine over a real SQLite store and idx, with
// ackWait, and a direct chat alice-bob; Stop is the test's.
func startedEngine(t *testing.T, idx waterline.Index, ackWait time.Duration) (*Engine, *sqlite.DB, history.Chat) {
	t.Helper()
	ctx := context.Background()
	db := openTestDB(t)
	e, err := New(db, idx, config.Default, Config{Concurrency: 1, AckWait: ackWait}, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	chat, _, err := db.CreateDirect(ctx, "alice", "bob")
	if err != nil {
		t.Fatal(err)
	}
	return e, db, chat
}

// deliverTo registers n devices of bob, commits msgs messages from alice
// and polls until every device has them all; it returns each device's
// member and message ids.
func deliverTo(t *testing.T, e *Engine, db *sqlite.DB, chat history.Chat, n, msgs int) ([]*Member, []string) {
	t.Helper()
	ctx := context.Background()
	var members []*Member
	var conns []*fakeConn
	for i := range n {
		c := newConn("bob", fmt.Sprintf("d%02d", i))
		m, err := e.Register(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		members, conns = append(members, m), append(conns, c)
	}
	drafts := make([]history.Draft, msgs)
	for i := range drafts {
		drafts[i] = history.Draft{ID: fmt.Sprintf("01M%023d", i), ChatID: chat.ID, SenderID: "alice", SenderDevice: "p",
			CorrelationID: fmt.Sprintf("k%d", i), Body: "hi", SentAt: time.Now()}
	}
	res, err := db.Commit(ctx, drafts)
	if err != nil {
		t.Fatal(err)
	}
	ids := make([]string, len(res))
	for i, r := range res {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		ids[i] = r.Message.ID
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, c := range conns {
		for c.count() < msgs {
			if time.Now().After(deadline) {
				t.Fatalf("device %s got %d of %d messages", c.device, c.count(), msgs)
			}
			e.PollOnce(ctx)
			time.Sleep(5 * time.Millisecond)
		}
	}
	return members, ids
}

func pendingIn(t *testing.T, idx waterline.Index) int {
	t.Helper()
	st, err := idx.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st.Pending
}

// TestAcksAreRecordedTogether: with an index that records many clients'
// acknowledgements at once, a burst of ack frames from many connections is
// recorded in a few calls, not one per frame, and every one of them is
// recorded.
func TestAcksAreRecordedTogether(t *testing.T) {
	idx := &manyAckIndex{Index: memory.New()}
	e, db, chat := startedEngine(t, idx, 20*time.Millisecond)
	defer e.Stop(context.Background())
	members, ids := deliverTo(t, e, db, chat, 20, 5)
	if p := pendingIn(t, idx); p != 100 {
		t.Fatalf("pending before the acks = %d, want 100", p)
	}
	var wg sync.WaitGroup
	for _, m := range members {
		for _, id := range ids {
			wg.Go(func() {
				if err := e.Ack(context.Background(), m, []string{id}); err != nil {
					t.Error(err)
				}
			})
		}
	}
	wg.Wait()
	deadline := time.Now().Add(5 * time.Second)
	for pendingIn(t, idx) != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("pending = %d after 100 acks, want 0", pendingIn(t, idx))
		}
		time.Sleep(5 * time.Millisecond)
	}
	if c, s := idx.calls.Load(), idx.single.Load(); c > 10 || c == 0 {
		t.Errorf("100 ack frames were recorded in %d AckMany calls (and %d Ack calls inside them), want 1 to 10", c, s)
	}
}

// TestStopRecordsQueuedAcks: acknowledgements still gathering when the
// engine stops are recorded by Stop, not dropped.
func TestStopRecordsQueuedAcks(t *testing.T) {
	idx := &manyAckIndex{Index: memory.New()}
	e, db, chat := startedEngine(t, idx, time.Hour)
	members, ids := deliverTo(t, e, db, chat, 3, 2)
	for _, m := range members {
		if err := e.Ack(context.Background(), m, ids); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(20 * time.Millisecond)
	if p := pendingIn(t, idx); p != 6 {
		t.Fatalf("pending while the acks gather for an hour = %d, want 6 (nothing recorded yet)", p)
	}
	e.Stop(context.Background())
	if p := pendingIn(t, idx); p != 0 {
		t.Errorf("pending after Stop = %d, want 0: the queued acks were dropped", p)
	}
}

// TestAckWaitNegativeRecordsEachAck: AckWait < 0 turns the batcher off;
// each Ack is recorded before it returns.
func TestAckWaitNegativeRecordsEachAck(t *testing.T) {
	idx := &manyAckIndex{Index: memory.New()}
	e, db, chat := startedEngine(t, idx, -1)
	defer e.Stop(context.Background())
	members, ids := deliverTo(t, e, db, chat, 1, 2)
	if err := e.Ack(context.Background(), members[0], ids); err != nil {
		t.Fatal(err)
	}
	if p := pendingIn(t, idx); p != 0 || idx.calls.Load() != 0 {
		t.Errorf("pending %d, AckMany calls %d after Ack with AckWait < 0, want 0 and 0", p, idx.calls.Load())
	}
}
