package outboxtest

import (
	"strconv"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/history/historytest"
	"github.com/tetra-messenger/tetra/workload/outbox"
)

// RecordStore is a relational store whose outbox keeps one record per
// message (SQLite's schema 7, PostgreSQL's schema 8): its history and its
// single-partition log.
type RecordStore interface {
	history.Store
	outbox.Log
}

// LineInsideARecord: a DeleteBelow line inside a message's record deletes
// the rows below it and no other: Scan, Stats and the counts DeleteBelow
// returns see exactly the rows above it, across reopen (which closes the
// store and opens the same database again), until a later line passes
// the record and deletes it. Head never moves, and the next message takes
// positions above it. records counts the records left in the database.
func LineInsideARecord(t *testing.T, db RecordStore, reopen func() RecordStore, records func(RecordStore) int) {
	t.Helper()
	ctx := t.Context()
	g, err := db.CreateGroup(ctx, "alice", "g", []string{"bob", "carol", "dave"})
	if err != nil {
		t.Fatal(err)
	}
	res := historytest.MustCommit(t, db, historytest.Draft(g.ID, "alice", "1", "x"), historytest.Draft(g.ID, "bob", "2", "y"))
	var rows []history.Delivery
	for _, r := range res {
		rows = append(rows, r.Deliveries...)
	}
	if len(rows) != 8 {
		t.Fatalf("%d rows, want 8", len(rows))
	}
	head, err := db.Head(ctx, 0)
	if err != nil || head != rows[7].Pos {
		t.Fatalf("Head = %d, %v; want %d", head, err, rows[7].Pos)
	}
	check := func(name string, from int) {
		t.Helper()
		got := ScanAll(t, db, 0, 0, 3)
		if len(got) != 8-from {
			t.Fatalf("%s: %d rows, want %d", name, len(got), 8-from)
		}
		for i, r := range got {
			if w := rows[from+i]; r.Pos != w.Pos || r.Recipient != w.Recipient {
				t.Errorf("%s: row %d at %d for %s, want %d for %s", name, i, r.Pos, r.Recipient, w.Pos, w.Recipient)
			}
		}
		st, err := db.Stats(ctx, 0)
		if err != nil || st.Depth != int64(8-from) || st.Head != head {
			t.Errorf("%s: Stats %+v, %v; want depth %d, head %d", name, st, err, 8-from, head)
		}
		if h, err := db.Head(ctx, 0); err != nil || h != head {
			t.Errorf("%s: Head = %d, %v; want %d", name, h, err, head)
		}
	}
	del := func(pos int64, want int64) {
		t.Helper()
		n, err := db.DeleteBelow(ctx, 0, pos)
		if err != nil || n != want {
			t.Fatalf("DeleteBelow(%d) = %d, %v; want %d", pos, n, err, want)
		}
	}
	del(rows[2].Pos, 2) // inside the first record
	check("line inside the first record", 2)
	del(rows[2].Pos, 0)
	del(rows[1].Pos, 0) // under the line: nothing
	del(rows[3].Pos, 1)
	check("line moved up inside the record", 3)
	db = reopen()
	check("reopened", 3)
	del(rows[6].Pos, 3) // the rest of the first record, and into the second
	check("line inside the second record", 6)
	if n := records(db); n != 1 {
		t.Errorf("%d records remain, want 1", n)
	}
	del(head+1, 2) // past the last record
	check("all deleted", 8)
	next := historytest.MustCommit(t, db, historytest.Draft(g.ID, "carol", "3", "z"))
	if p := next[0].Deliveries[0].Pos; p <= head {
		t.Errorf("position %d after deleting all, not above the old head %d", p, head)
	}
}

// DepthFollowsPurge: PurgeHistory takes its messages' records with them,
// and the depth goes down by their rows not already under a line.
func DepthFollowsPurge(t *testing.T, db RecordStore) {
	t.Helper()
	ctx := t.Context()
	g, err := db.CreateGroup(ctx, "alice", "g", []string{"bob", "carol"})
	if err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-48 * time.Hour)
	var drafts []history.Draft
	for i, at := range []time.Time{old, old, time.Now()} {
		d := historytest.Draft(g.ID, "alice", strconv.Itoa(i), "x")
		d.SentAt = at
		drafts = append(drafts, d)
	}
	res := historytest.MustCommit(t, db, drafts...)
	// A line inside the first record: 2 of its 3 rows are gone already.
	if n, err := db.DeleteBelow(ctx, 0, res[0].Deliveries[2].Pos); err != nil || n != 2 {
		t.Fatalf("DeleteBelow = %d, %v; want 2", n, err)
	}
	if n, err := db.PurgeHistory(ctx, time.Now().Add(-24*time.Hour), 100); err != nil || n != 2 {
		t.Fatalf("PurgeHistory = %d, %v; want the 2 old messages", n, err)
	}
	rows := ScanAll(t, db, 0, 0, 10)
	st, err := db.Stats(ctx, 0)
	if err != nil || st.Depth != 3 || len(rows) != 3 {
		t.Errorf("after the purge: Stats %+v, %v, %d rows scanned; want depth 3 and 3 rows (the new message's)", st, err, len(rows))
	}
}
