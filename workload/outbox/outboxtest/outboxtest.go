package outboxtest

import (
	"cmp"
	"context"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/outbox"
)

// Harness is a backend under test.
type Harness struct {
	// Log is the log under test: fresh, and written by nothing but Append
	// and Hold.
	Log outbox.Log
	// Append commits one message addressed to recipients (distinct,
	// non-empty user ids) in one transaction, the way production appends,
	// and returns once the rows are visible to Scan. It returns one row per
	// recipient with Partition, Pos, Recipient and Message filled (CreatedAt
	// may be zero). It must be safe for concurrent use.
	Append func(ctx context.Context, recipients []string) ([]outbox.Row, error)
	// Hold is optional. It writes one message like Append but leaves its
	// transaction open; commit commits it and returns the rows. While a
	// Hold is open, Append must still complete. Set it for logs whose
	// concurrent transactions can commit out of position order (PostgreSQL
	// BIGSERIAL); leave it nil for logs that serialize appends (SQLite's
	// single writer, a Kafka relay).
	Hold func(ctx context.Context, recipients []string) (commit func(context.Context) ([]outbox.Row, error), err error)
}

// Run runs the conformance suite. newHarness is called once per subtest and
// must return a harness over a fresh, empty log that nothing else uses; it
// registers its own cleanup with t.Cleanup. Subtests run in parallel.
func Run(t *testing.T, newHarness func(t *testing.T) Harness) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, h Harness)
	}{
		{"Empty", testEmpty},
		{"ID", testID},
		{"AppendScan", testAppendScan},
		{"ScanAfterLimit", testScanAfterLimit},
		{"DeleteBelow", testDeleteBelow},
		{"Stats", testStats},
		{"UnknownPartition", testUnknownPartition},
		{"ConcurrentAppendFollower", testConcurrentAppendFollower},
		{"OutOfOrderCommit", testOutOfOrderCommit},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newHarness(t))
		})
	}
}

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func partitions(t testing.TB, log outbox.Log) []int32 {
	t.Helper()
	ps, err := log.Partitions(ctxFor(t))
	if err != nil {
		t.Fatalf("Partitions: %v", err)
	}
	if len(ps) == 0 {
		t.Fatal("Partitions: none")
	}
	if !slices.IsSorted(ps) || len(slices.Compact(slices.Clone(ps))) != len(ps) {
		t.Fatalf("Partitions = %v, want ascending and distinct", ps)
	}
	return ps
}

// Heads reads the head of every partition.
func Heads(t testing.TB, log outbox.Log) map[int32]int64 {
	t.Helper()
	hs := map[int32]int64{}
	for _, p := range partitions(t, log) {
		h, err := log.Head(ctxFor(t), p)
		if err != nil {
			t.Fatalf("Head(%d): %v", p, err)
		}
		hs[p] = h
	}
	return hs
}

// ScanAll returns every row of partition p above after, scanning in pages
// of limit, and checks that positions strictly increase.
func ScanAll(t testing.TB, log outbox.Log, p int32, after int64, limit int) []outbox.Row {
	t.Helper()
	var all []outbox.Row
	for {
		rows, err := log.Scan(ctxFor(t), p, after, limit)
		if err != nil {
			t.Fatalf("Scan(%d, %d, %d): %v", p, after, limit, err)
		}
		if len(rows) > limit {
			t.Fatalf("Scan(limit %d) returned %d rows", limit, len(rows))
		}
		if len(rows) == 0 {
			return all
		}
		for _, r := range rows {
			if r.Partition != p {
				t.Fatalf("Scan(%d) returned a row of partition %d", p, r.Partition)
			}
			if r.Pos <= after {
				t.Fatalf("Scan(%d, after %d) returned position %d", p, after, r.Pos)
			}
			after = r.Pos
		}
		all = append(all, rows...)
	}
}

func appendRows(t testing.TB, h Harness, recipients ...string) []outbox.Row {
	t.Helper()
	rows, err := h.Append(ctxFor(t), recipients)
	if err != nil {
		t.Fatalf("Append(%v): %v", recipients, err)
	}
	checkAppended(t, h.Log, recipients, rows)
	return rows
}

// checkAppended checks one row per recipient, each in its recipient's
// partition, with a message.
func checkAppended(t testing.TB, log outbox.Log, recipients []string, rows []outbox.Row) {
	t.Helper()
	if len(rows) != len(recipients) {
		t.Fatalf("Append(%v) returned %d rows", recipients, len(rows))
	}
	got := map[string]bool{}
	for _, r := range rows {
		got[r.Recipient] = true
		if p := log.PartitionOf(r.Recipient); r.Partition != p {
			t.Errorf("row for %s in partition %d, PartitionOf says %d", r.Recipient, r.Partition, p)
		}
		if r.Message.ID == "" {
			t.Errorf("row %d/%d has no message", r.Partition, r.Pos)
		}
	}
	for _, rc := range recipients {
		if !got[rc] {
			t.Errorf("Append(%v) returned no row for %s", recipients, rc)
		}
	}
}

type rowKey struct {
	part      int32
	pos       int64
	recipient string
	messageID string
}

func keyOf(r outbox.Row) rowKey { return rowKey{r.Partition, r.Pos, r.Recipient, r.Message.ID} }

// sameRow compares a scanned row with the appended one.
func sameRow(t testing.TB, got, want outbox.Row) {
	t.Helper()
	if keyOf(got) != keyOf(want) {
		t.Errorf("scanned row %+v, want %+v", keyOf(got), keyOf(want))
		return
	}
	g, w := got.Message, want.Message
	if g.ChatID != w.ChatID || g.SenderID != w.SenderID || g.Body != w.Body || !g.SentAt.Equal(w.SentAt) {
		t.Errorf("row %d/%d carries message %+v, want %+v", got.Partition, got.Pos, g, w)
	}
	if got.CreatedAt.IsZero() {
		t.Errorf("row %d/%d has no CreatedAt", got.Partition, got.Pos)
	}
}

func byPartition(rows []outbox.Row) map[int32][]outbox.Row {
	m := map[int32][]outbox.Row{}
	for _, r := range rows {
		m[r.Partition] = append(m[r.Partition], r)
	}
	for _, rs := range m {
		slices.SortFunc(rs, func(a, b outbox.Row) int { return cmp.Compare(a.Pos, b.Pos) })
	}
	return m
}

func testEmpty(t *testing.T, h Harness) {
	ctx := ctxFor(t)
	ps := partitions(t, h.Log)
	if p := h.Log.PartitionOf("alice"); !slices.Contains(ps, p) {
		t.Errorf("PartitionOf(alice) = %d, not among %v", p, ps)
	}
	for p, head := range Heads(t, h.Log) {
		if head > 0 {
			t.Errorf("fresh log: Head(%d) = %d, want the value before the first position", p, head)
		}
		rows, err := h.Log.Scan(ctx, p, head, 10)
		if err != nil || len(rows) != 0 {
			t.Errorf("fresh log: Scan(%d) = %d rows, %v", p, len(rows), err)
		}
		st, err := h.Log.Stats(ctx, p)
		if err != nil {
			t.Fatalf("Stats(%d): %v", p, err)
		}
		if st.Partition != p || st.Depth != 0 || st.Head != head || !st.OldestAt.IsZero() {
			t.Errorf("fresh log: Stats(%d) = %+v, want depth 0, head %d, no OldestAt", p, st, head)
		}
	}
}

func testAppendScan(t *testing.T, h Harness) {
	head0 := Heads(t, h.Log)
	var all []outbox.Row
	recipients := [][]string{{"alice", "bob"}, {"carol"}, {"bob", "carol", "dave"}, {"alice"}, {"erin", "alice"}}
	for _, rs := range recipients {
		before := Heads(t, h.Log)
		rows := appendRows(t, h, rs...)
		after := Heads(t, h.Log)
		for _, r := range rows {
			if r.Pos <= before[r.Partition] {
				t.Errorf("row at %d/%d, not above the Head %d read before the append", r.Partition, r.Pos, before[r.Partition])
			}
			if r.Pos > after[r.Partition] {
				t.Errorf("row at %d/%d, above the Head %d read after the append", r.Partition, r.Pos, after[r.Partition])
			}
		}
		for p := range after {
			if after[p] < before[p] {
				t.Errorf("Head(%d) went back from %d to %d", p, before[p], after[p])
			}
		}
		all = append(all, rows...)
	}
	want := byPartition(all)
	for p, head := range head0 {
		got := ScanAll(t, h.Log, p, head, 100)
		if len(got) != len(want[p]) {
			t.Errorf("partition %d: scanned %d rows, appended %d", p, len(got), len(want[p]))
			continue
		}
		for i := range got {
			sameRow(t, got[i], want[p][i])
		}
		// Paging by one sees the same rows.
		if one := ScanAll(t, h.Log, p, head, 1); len(one) != len(got) {
			t.Errorf("partition %d: scanning by 1 saw %d rows, by 100 saw %d", p, len(one), len(got))
		}
	}
}

func testScanAfterLimit(t *testing.T, h Harness) {
	ctx := ctxFor(t)
	var rows []outbox.Row
	for range 10 {
		rows = append(rows, appendRows(t, h, "rita")...)
	}
	p := rows[0].Partition
	head0 := rows[0].Pos - 1
	for i := 1; i < len(rows); i++ {
		if rows[i].Pos <= rows[i-1].Pos {
			t.Fatalf("sequential appends got positions %d then %d", rows[i-1].Pos, rows[i].Pos)
		}
	}
	scan := func(after int64, limit int) []outbox.Row {
		t.Helper()
		got, err := h.Log.Scan(ctx, p, after, limit)
		if err != nil {
			t.Fatalf("Scan(%d, %d, %d): %v", p, after, limit, err)
		}
		return got
	}
	check := func(name string, got, want []outbox.Row) {
		t.Helper()
		if len(got) != len(want) {
			t.Errorf("%s: %d rows, want %d", name, len(got), len(want))
			return
		}
		for i := range got {
			sameRow(t, got[i], want[i])
		}
	}
	check("all", scan(head0, 100), rows)
	check("limit 3", scan(head0, 3), rows[:3])
	check("limit 1", scan(head0, 1), rows[:1])
	check("after the third", scan(rows[2].Pos, 3), rows[3:6])
	check("after the ninth", scan(rows[8].Pos, 3), rows[9:])
	check("after the last", scan(rows[9].Pos, 10), nil)
	check("far beyond", scan(rows[9].Pos+1000, 10), nil)
	// A position between rows (or a deleted one) starts at the next row.
	check("after a gap", scan(rows[4].Pos-1, 2), rows[4:6])
}

func testDeleteBelow(t *testing.T, h Harness) {
	ctx := ctxFor(t)
	var rows []outbox.Row
	for range 6 {
		rows = append(rows, appendRows(t, h, "dora")...)
	}
	p := rows[0].Partition
	from := rows[0].Pos - 1
	head, err := h.Log.Head(ctx, p)
	if err != nil {
		t.Fatalf("Head: %v", err)
	}

	n, err := h.Log.DeleteBelow(ctx, p, rows[0].Pos)
	if err != nil || n != 0 {
		t.Errorf("DeleteBelow(first position) = %d, %v; want 0", n, err)
	}
	n, err = h.Log.DeleteBelow(ctx, p, rows[3].Pos)
	if err != nil || n != 3 {
		t.Fatalf("DeleteBelow(fourth position) = %d, %v; want 3", n, err)
	}
	got := ScanAll(t, h.Log, p, from, 100)
	if len(got) != 3 {
		t.Fatalf("after DeleteBelow: %d rows remain, want 3", len(got))
	}
	for i := range got {
		sameRow(t, got[i], rows[3+i])
	}
	n, err = h.Log.DeleteBelow(ctx, p, rows[3].Pos)
	if err != nil || n != 0 {
		t.Errorf("repeated DeleteBelow = %d, %v; want 0", n, err)
	}
	n, err = h.Log.DeleteBelow(ctx, p, rows[1].Pos)
	if err != nil || n != 0 {
		t.Errorf("DeleteBelow under the floor = %d, %v; want 0", n, err)
	}
	n, err = h.Log.DeleteBelow(ctx, p, head+1)
	if err != nil || n != 3 {
		t.Fatalf("DeleteBelow(head+1) = %d, %v; want 3", n, err)
	}
	if got := ScanAll(t, h.Log, p, from, 100); len(got) != 0 {
		t.Errorf("after deleting everything: %d rows remain", len(got))
	}
	after, err := h.Log.Head(ctx, p)
	if err != nil || after != head {
		t.Errorf("Head after deletes = %d, %v; want %d (heads survive deletes)", after, err, head)
	}
	st, err := h.Log.Stats(ctx, p)
	if err != nil || st.Depth != 0 || st.Head != head || !st.OldestAt.IsZero() {
		t.Errorf("Stats after deletes = %+v, %v; want depth 0, head %d", st, err, head)
	}
	// Positions are never reused.
	again := appendRows(t, h, "dora")
	if again[0].Pos <= head {
		t.Errorf("append after deletes got position %d, not above the old head %d", again[0].Pos, head)
	}
	if got := ScanAll(t, h.Log, p, from, 100); len(got) != 1 || keyOf(got[0]) != keyOf(again[0]) {
		t.Errorf("after a new append: scanned %d rows, want the new one", len(got))
	}
}

func testStats(t *testing.T, h Harness) {
	ctx := ctxFor(t)
	start := time.Now()
	var rows []outbox.Row
	for range 3 {
		rows = append(rows, appendRows(t, h, "stan")...)
	}
	p := rows[0].Partition
	head, err := h.Log.Head(ctx, p)
	if err != nil {
		t.Fatalf("Head: %v", err)
	}
	st, err := h.Log.Stats(ctx, p)
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	if st.Partition != p || st.Depth != 3 || st.Head != head {
		t.Errorf("Stats = %+v, want partition %d, depth 3, head %d", st, p, head)
	}
	const slack = time.Minute // clocks of a remote broker may differ a little
	if st.OldestAt.Before(start.Add(-slack)) || st.OldestAt.After(time.Now().Add(slack)) {
		t.Errorf("Stats.OldestAt = %v, want about %v", st.OldestAt, start)
	}
	first := st.OldestAt
	if _, err := h.Log.DeleteBelow(ctx, p, rows[1].Pos); err != nil {
		t.Fatalf("DeleteBelow: %v", err)
	}
	st, err = h.Log.Stats(ctx, p)
	if err != nil {
		t.Fatalf("Stats: %v", err)
	}
	if st.Depth != 2 || st.Head != head || st.OldestAt.Before(first) {
		t.Errorf("Stats after deleting one = %+v, want depth 2, head %d, OldestAt not before %v", st, head, first)
	}
}

func testUnknownPartition(t *testing.T, h Harness) {
	ctx := ctxFor(t)
	ps := partitions(t, h.Log)
	bad := ps[len(ps)-1] + 1
	if _, err := h.Log.Scan(ctx, bad, 0, 10); err == nil {
		t.Errorf("Scan(unknown partition %d): no error", bad)
	}
	if _, err := h.Log.Head(ctx, bad); err == nil {
		t.Errorf("Head(unknown partition %d): no error", bad)
	}
	if _, err := h.Log.DeleteBelow(ctx, bad, 10); err == nil {
		t.Errorf("DeleteBelow(unknown partition %d): no error", bad)
	}
	if _, err := h.Log.Stats(ctx, bad); err == nil {
		t.Errorf("Stats(unknown partition %d): no error", bad)
	}
	if _, err := h.Log.Scan(ctx, -1, 0, 10); err == nil {
		t.Error("Scan(partition -1): no error")
	}
}

// testConcurrentAppendFollower appends from many goroutines while a
// follower scans every partition forward from its last position. The
// follower must see every appended row exactly once, in position order.
func testConcurrentAppendFollower(t *testing.T, h Harness) {
	ctx := ctxFor(t)
	const producers, perProducer = 8, 40
	users := []string{"u0", "u1", "u2", "u3", "u4", "u5"}
	head0 := Heads(t, h.Log)

	var mu sync.Mutex
	var appended []outbox.Row
	var wg sync.WaitGroup
	// Producers stop, and are waited for, before the test returns, even
	// when the follower fails it early.
	pctx, stop := context.WithCancel(ctx)
	defer func() { stop(); wg.Wait() }()
	for w := range producers {
		wg.Go(func() {
			for i := range perProducer {
				// One to three distinct recipients, varying per append.
				n := 1 + (w+i)%3
				var rs []string
				for k := range n {
					rs = append(rs, users[(w*7+i*5+k)%len(users)])
				}
				before := map[int32]int64{}
				for _, r := range rs {
					p := h.Log.PartitionOf(r)
					hd, err := h.Log.Head(pctx, p)
					if err != nil {
						if pctx.Err() == nil {
							t.Errorf("Head(%d): %v", p, err)
						}
						return
					}
					before[p] = hd
				}
				rows, err := h.Append(pctx, rs)
				if err != nil {
					if pctx.Err() == nil {
						t.Errorf("Append(%v): %v", rs, err)
					}
					return
				}
				for _, r := range rows {
					if b, ok := before[r.Partition]; ok && r.Pos <= b {
						t.Errorf("row %d/%d not above the Head %d read before its append", r.Partition, r.Pos, b)
					}
				}
				mu.Lock()
				appended = append(appended, rows...)
				mu.Unlock()
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	seen := map[rowKey]int{}
	total := 0
	last := maps.Clone(head0)
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	finished := false
	for {
		progress := false
		for p := range last {
			rows, err := h.Log.Scan(ctx, p, last[p], 16)
			if err != nil {
				t.Fatalf("follower: Scan(%d, %d): %v", p, last[p], err)
			}
			for _, r := range rows {
				if r.Pos <= last[p] {
					t.Fatalf("follower: Scan(%d, after %d) returned position %d", p, last[p], r.Pos)
				}
				last[p] = r.Pos
				seen[keyOf(r)]++
				total++
				progress = true
			}
		}
		if progress {
			continue
		}
		if finished {
			// Every append returned before done closed, so its rows are
			// visible: a pass without progress means the follower is at
			// the end of every partition.
			break
		}
		select {
		case <-done:
			finished = true
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("follower: saw %d rows before the deadline", total)
		}
	}
	if t.Failed() {
		return
	}
	if len(appended) < producers*perProducer {
		t.Fatalf("%d rows appended, want at least one per append (%d)", len(appended), producers*perProducer)
	}
	for _, r := range appended {
		switch n := seen[keyOf(r)]; n {
		case 1:
		case 0:
			t.Errorf("follower skipped row %+v", keyOf(r))
		default:
			t.Errorf("follower saw row %+v %d times", keyOf(r), n)
		}
		delete(seen, keyOf(r))
	}
	for k := range seen {
		t.Errorf("follower saw row %+v that was never appended", k)
	}
}

// testOutOfOrderCommit opens a transaction (Hold), commits a later one
// (Append) while it is open, and only then commits the first. Scans before
// and after must together return every row exactly once, in order: a log
// must not show the later rows before the earlier position is settled (or
// must give the earlier transaction higher positions). The Head read while
// the first transaction is open must stay below its rows.
func testOutOfOrderCommit(t *testing.T, h Harness) {
	if h.Hold == nil {
		t.Skip("Harness.Hold is nil: this log serializes appends")
	}
	ctx := ctxFor(t)
	head0 := Heads(t, h.Log)
	commitA, err := h.Hold(ctx, []string{"olga", "oscar"})
	if err != nil {
		t.Fatalf("Hold: %v", err)
	}
	bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	rowsB, err := h.Append(bctx, []string{"olga", "otto"})
	cancel()
	if err != nil {
		_, _ = commitA(ctx)
		t.Fatalf("Append while a Hold is open: %v (set Harness.Hold to nil for logs that serialize appends)", err)
	}
	// Scan while A is open, from each partition's start.
	last := maps.Clone(head0)
	var seen []outbox.Row
	for p := range last {
		for _, r := range ScanAll(t, h.Log, p, last[p], 100) {
			seen = append(seen, r)
			last[p] = r.Pos
		}
	}
	headsOpen := Heads(t, h.Log)
	rowsA, err := commitA(ctx)
	if err != nil {
		t.Fatalf("commit of the held transaction: %v", err)
	}
	checkAppended(t, h.Log, []string{"olga", "oscar"}, rowsA)
	for _, r := range rowsA {
		if r.Pos <= headsOpen[r.Partition] {
			t.Errorf("held row %d/%d is not above the Head %d read before it committed", r.Partition, r.Pos, headsOpen[r.Partition])
		}
	}
	for p := range last {
		seen = append(seen, ScanAll(t, h.Log, p, last[p], 100)...)
	}
	count := map[rowKey]int{}
	for _, r := range seen {
		count[keyOf(r)]++
	}
	for _, r := range append(rowsA, rowsB...) {
		if n := count[keyOf(r)]; n != 1 {
			t.Errorf("row %+v seen %d times by a follower, want once", keyOf(r), n)
		}
	}
	if len(seen) != len(rowsA)+len(rowsB) {
		t.Errorf("follower saw %d rows, want %d", len(seen), len(rowsA)+len(rowsB))
	}
}

// testID: the log names itself, the same way every time.
func testID(t *testing.T, h Harness) {
	ctx := ctxFor(t)
	id, err := h.Log.ID(ctx)
	if err != nil || id == "" {
		t.Fatalf("ID = %q, %v; want a non-empty name", id, err)
	}
	if _, err := h.Append(ctx, []string{"u"}); err != nil {
		t.Fatal(err)
	}
	if again, err := h.Log.ID(ctx); err != nil || again != id {
		t.Fatalf("ID changed from %q to %q (%v)", id, again, err)
	}
}
