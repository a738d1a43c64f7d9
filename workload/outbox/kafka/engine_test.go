package kafka

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/tetra-messenger/tetra/workload/config"
	"github.com/tetra-messenger/tetra/workload/delivery"
	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/waterline/memory"
)

// fakeConn is a socket as the delivery engine sees it: it keeps the
// message frames queued on it.
type fakeConn struct {
	id, user string
	mu       sync.Mutex
	frames   int
}

func (c *fakeConn) ID() string     { return c.id }
func (c *fakeConn) User() string   { return c.user }
func (c *fakeConn) Device() string { return "d" }
func (c *fakeConn) Enqueue([]byte) bool {
	c.mu.Lock()
	c.frames++
	c.mu.Unlock()
	return true
}
func (c *fakeConn) Close(int, string) {}
func (c *fakeConn) count() int        { c.mu.Lock(); defer c.mu.Unlock(); return c.frames }

// usersOnDistinctPartitions returns n user ids in n different partitions.
func usersOnDistinctPartitions(t testing.TB, l *Log, n int, prefix string) []string {
	seen := map[int32]bool{}
	var out []string
	for i := 0; len(out) < n; i++ {
		if i == 10_000 {
			t.Fatalf("PartitionOf put 10000 users on %d partitions only", len(seen))
		}
		u := fmt.Sprintf("%s%d", prefix, i)
		if p := l.PartitionOf(u); !seen[p] {
			seen[p] = true
			out = append(out, u)
		}
	}
	return out
}

// TestStuckClientHoldsOnlyItsPartition is the paper's "rehearsal for the
// log" made real: the waterline is per partition. Two recipients on
// different partitions are connected; one acknowledges everything, the
// other never does. The acknowledged recipient's partition is reclaimed
// by GC (DeleteRecords below its line) while the stuck recipient's rows
// stay, pinned, in its own partition. Delivery runs the real engine, fed
// by the relay's hand-off (the fast path) and the poller, over the Kafka
// log.
func TestStuckClientHoldsOnlyItsPartition(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil, 4)
	users := usersOnDistinctPartitions(t, r.log, 3, "u")
	fine, stuck, sender := users[0], users[1], users[2]
	pFine, pStuck := r.log.PartitionOf(fine), r.log.PartitionOf(stuck)

	tuning := config.Default()
	tuning.GCGrace = 0
	tuning.GCInterval = time.Hour // GC runs when the test says
	tuning.Lease = time.Hour      // no re-delivery, no attempts reaper
	tuning.MaxPending = 1000
	tuning.PollInterval = 20 * time.Millisecond
	eng, err := delivery.New(r.log, memory.New(), func() config.Tuning { return tuning }, delivery.Config{}, r.logger)
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxFor(t)
	if err := eng.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Stop(context.Background()) })
	r.onHand = eng.Handoff
	rl := r.relay()
	rl.Start()

	cFine := &fakeConn{id: ulid.Make().String(), user: fine}
	cStuck := &fakeConn{id: ulid.Make().String(), user: stuck}
	mFine, err := eng.Register(ctx, cFine)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Register(ctx, cStuck); err != nil {
		t.Fatal(err)
	}

	const n = 5
	var toFine, toStuck []history.Message
	for range n {
		toFine = append(toFine, r.mustCommit(1, sender, fine)...)
		toStuck = append(toStuck, r.mustCommit(1, sender, stuck)...)
	}
	rl.Wake()
	waitFor(t, "both recipients to receive every message", 30*time.Second, func() bool {
		return cFine.count() == n && cStuck.count() == n
	})
	if st := eng.Stats(); st.FastDeliveries == 0 {
		t.Errorf("no fast-path deliveries (%+v): the relay's hand-off did not reach the engine", st)
	}
	var ids []string
	for _, m := range toFine {
		ids = append(ids, m.ID)
	}
	if err := eng.Ack(ctx, mFine, ids); err != nil {
		t.Fatal(err)
	}

	rowsTo := func(p int32, user string) int {
		rows, err := r.log.Scan(ctx, p, -1, 1000)
		if err != nil {
			t.Fatal(err)
		}
		k := 0
		for _, row := range rows {
			if row.Recipient == user {
				k++
			}
		}
		return k
	}
	// GC needs the poller's hold past the rows (it scans every 20 ms) and
	// a head sample at least GCGrace (0) old: a few passes.
	waitFor(t, "GC to reclaim the acknowledged partition", 30*time.Second, func() bool {
		if _, err := eng.GCOnce(ctx); err != nil {
			t.Fatalf("GCOnce: %v", err)
		}
		return rowsTo(pFine, fine) == 0
	})
	if got := rowsTo(pStuck, stuck); got != n {
		t.Fatalf("stuck recipient's partition %d holds %d of its %d rows after GC; want all, pinned", pStuck, got, n)
	}
	st, err := r.log.Stats(ctx, pStuck)
	if err != nil {
		t.Fatal(err)
	}
	if st.Depth < n {
		t.Errorf("stuck partition depth %d, want at least %d", st.Depth, n)
	}
	rows, err := r.log.Scan(ctx, pStuck, -1, 1000)
	if err != nil {
		t.Fatal(err)
	}
	first := int64(-1)
	for _, row := range rows {
		if row.Recipient == stuck {
			first = row.Pos
			break
		}
	}
	line := eng.Stats().SafeLine
	if line[pStuck] > first {
		t.Errorf("safe line of the stuck partition %d is %d, above its first pinned row %d", pStuck, line[pStuck], first)
	}
	t.Logf("safe lines: fine partition %d at %d (reclaimed), stuck partition %d at %d (first pinned row %d)",
		pFine, line[pFine], pStuck, line[pStuck], first)
}
