package postgres

import (
	"context"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/internal/testenv"
	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/history/historytest"
	"github.com/tetra-messenger/tetra/workload/outbox"
	"github.com/tetra-messenger/tetra/workload/outbox/outboxtest"
)

// TestOneRecordPerMessage: a commit writes one outbox record per message
// (schema 8), whatever the number of its recipients, holding the rows at
// the positions Commit reported, in member order, and moves the depth by
// the rows.
func TestOneRecordPerMessage(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := newDB(t)
	g := mustGroup(t, db, "alice", "g", "bob", "carol", "dave")
	d := mustDirect(t, db, "alice", "erin")
	res := historytest.MustCommit(t, db, historytest.Draft(g.ID, "alice", "1", "x"),
		historytest.Draft(d.ID, "erin", "2", "y"), historytest.Draft(g.ID, "bob", "3", "z"))
	var records int
	if err := db.pool.QueryRow(ctx, `SELECT count(*) FROM outbox_messages`).Scan(&records); err != nil || records != 3 {
		t.Fatalf("%d records (%v), want 3", records, err)
	}
	var want []outbox.Row
	for _, r := range res {
		for _, dl := range r.Deliveries {
			want = append(want, outbox.Row{Pos: dl.Pos, Recipient: dl.Recipient})
		}
	}
	if len(want) != 10 {
		t.Fatalf("%d deliveries, want 10", len(want))
	}
	got := outboxtest.ScanAll(t, db, 0, 0, 3)
	if len(got) != len(want) {
		t.Fatalf("scanned %d rows, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i].Pos != want[i].Pos || got[i].Recipient != want[i].Recipient || (i > 0 && got[i].Pos != got[i-1].Pos+1) {
			t.Errorf("row %d: %d for %s, want %d for %s, positions dense", i, got[i].Pos, got[i].Recipient, want[i].Pos, want[i].Recipient)
		}
	}
	st, err := db.Stats(ctx, 0)
	if err != nil || st.Depth != 10 || st.Head != want[9].Pos {
		t.Errorf("Stats %+v, %v; want depth 10, head %d", st, err, want[9].Pos)
	}
}

// TestDeleteBelowInsideARecord: outboxtest.LineInsideARecord on
// PostgreSQL.
func TestDeleteBelowInsideARecord(t *testing.T) {
	t.Parallel()
	url := testenv.Postgres(t)
	db := openDB(t, DefaultConfig(url))
	outboxtest.LineInsideARecord(t, db, func() outboxtest.RecordStore {
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		db = openDB(t, DefaultConfig(url))
		return db
	}, func(s outboxtest.RecordStore) int {
		var n int
		if err := s.(*DB).pool.QueryRow(t.Context(), `SELECT count(*) FROM outbox_messages`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	})
}

// TestDeleteBelowInChunks: a prefix longer than deleteChunk positions is
// deleted whole, over several transactions, and counted once.
func TestDeleteBelowInChunks(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := newDB(t)
	d := mustDirect(t, db, "alice", "bob")
	var drafts []history.Draft
	for i := range deleteChunk + 500 { // 2 rows a message: 2.5 chunks
		drafts = append(drafts, historytest.Draft(d.ID, "alice", strconv.Itoa(i), "x"))
	}
	res := historytest.MustCommit(t, db, drafts...)
	last := res[len(res)-1].Deliveries[1].Pos
	n, err := db.DeleteBelow(ctx, 0, last) // all but the last row
	if want := int64(2*len(drafts) - 1); err != nil || n != want {
		t.Fatalf("DeleteBelow = %d, %v; want %d", n, err, want)
	}
	if st, err := db.Stats(ctx, 0); err != nil || st.Depth != 1 {
		t.Errorf("Stats %+v, %v; want depth 1", st, err)
	}
	if rows := outboxtest.ScanAll(t, db, 0, 0, 100); len(rows) != 1 || rows[0].Pos != last {
		t.Errorf("rows left %v, want the one at %d", rows, last)
	}
}

// TestDepthFollowsPurge: outboxtest.DepthFollowsPurge on PostgreSQL.
func TestDepthFollowsPurge(t *testing.T) {
	t.Parallel()
	outboxtest.DepthFollowsPurge(t, newDB(t))
}

// TestDepthUnderConcurrency: commits, DeleteBelow and PurgeHistory from
// several goroutines at once leave the depth Stats reports equal to the
// rows a Scan finds (each takes the line's row lock, so none counts
// against a line another moved).
func TestDepthUnderConcurrency(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := newDB(t)
	g := mustGroup(t, db, "alice", "g", "bob", "carol")
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for w := range 4 {
		wg.Go(func() {
			for i := range 40 {
				d := historytest.Draft(g.ID, "alice", strconv.Itoa(w*1000+i), "x")
				if i%5 == 0 {
					d.SentAt = time.Now().Add(-48 * time.Hour)
				}
				if _, err := db.Commit(ctx, []history.Draft{d}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	for range 2 {
		wg.Go(func() {
			for range 30 {
				head, err := db.Head(ctx, 0)
				if err == nil {
					// Lines inside and between records.
					_, err = db.DeleteBelow(ctx, 0, head-head%7)
				}
				if err == nil {
					_, err = db.PurgeHistory(ctx, time.Now().Add(-24*time.Hour), 3)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	rows := outboxtest.ScanAll(t, db, 0, 0, 50)
	st, err := db.Stats(ctx, 0)
	if err != nil || st.Depth != int64(len(rows)) {
		t.Errorf("Stats %+v, %v; want depth %d (the rows scanned)", st, err, len(rows))
	}
}

// TestMigration8PacksTheOutbox: the outbox rows of schema version 7 come
// through migration 8 as one record per message, at the same positions,
// for the same recipients and messages, with the depth counted; Head does
// not go back (the sequence, deleted rows included), and new messages get
// positions above it.
func TestMigration8PacksTheOutbox(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url, raw := atVersion(t, 7)
	for _, stmt := range []string{
		`INSERT INTO chats (id, kind, title, created_by, created_at) VALUES ('g1', 'group', 'one', 'alice', 1000)`,
		`INSERT INTO members (chat_id, user_id, joined_at, admin_at) VALUES ('g1', 'alice', 1000, 1000), ('g1', 'bob', 1000, 0), ('g1', 'carol', 1000, 0)`,
		`INSERT INTO history (message_id, chat_id, sender_id, correlation_id, body, sent_at) VALUES
			('m1', 'g1', 'alice', 'k1', 'one', 2000), ('m2', 'g1', 'bob', 'k2', 'two', 3000)`,
		// m1's rows 1-3, of which GC deleted 1 and 2; m2's 4-6; 7 drawn
		// by a commit that failed.
		`INSERT INTO outbox (id, recipient, history_id, created_at) VALUES
			(3, 'carol', 1, 2000), (4, 'alice', 2, 3000), (5, 'bob', 2, 3000), (6, 'carol', 2, 3000)`,
		`SELECT setval('outbox_id_seq', 7)`,
	} {
		if _, err := raw.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	raw.Close()
	db := openDB(t, DefaultConfig(url))
	rows := outboxtest.ScanAll(t, db, 0, 0, 10)
	var got []string
	for _, r := range rows {
		got = append(got, strconv.FormatInt(r.Pos, 10)+":"+r.Recipient+":"+r.Message.ID)
	}
	if want := []string{"3:carol:m1", "4:alice:m2", "5:bob:m2", "6:carol:m2"}; !slices.Equal(got, want) {
		t.Errorf("rows after migration 8: %v, want %v", got, want)
	}
	if st, err := db.Stats(ctx, 0); err != nil || st.Depth != 4 || st.Head != 7 {
		t.Errorf("Stats %+v, %v; want depth 4, head 7", st, err)
	}
	next := historytest.MustCommit(t, db, historytest.Draft("g1", "alice", "k3", "three"))
	if ps := positions(next); !slices.Equal(ps, []int64{8, 9, 10}) {
		t.Errorf("new message at %v, want 8, 9, 10", ps)
	}
}

// TestCommitDoesNotWaitForTheLine: a Commit goes through while another
// transaction holds the line's row lock (as DeleteBelow and PurgeHistory
// do, through their fsync): commits count their rows in a row of their
// own, so GC never stalls the group commit.
func TestCommitDoesNotWaitForTheLine(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := newDB(t)
	d := mustDirect(t, db, "alice", "bob")
	historytest.MustCommit(t, db, historytest.Draft(d.ID, "alice", "0", "warm"))
	raw := rawConn(t, db)
	tx, err := raw.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, lockLineSQL); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if _, err := db.Commit(cctx, []history.Draft{historytest.Draft(d.ID, "alice", "1", "x")}); err != nil {
		t.Fatalf("Commit while the line is locked: %v", err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if st, err := db.Stats(ctx, 0); err != nil || st.Depth != 4 {
		t.Errorf("Stats %+v, %v; want depth 4", st, err)
	}
}

// TestScanPagesBigRecords: Scan reads records in pages sized by the rows
// per record seen (scanPage), and still returns exactly the rows above
// after, in order, up to limit, from anywhere in a log of big and small
// records.
func TestScanPagesBigRecords(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := newDB(t)
	members := make([]string, 39)
	for i := range members {
		members[i] = "m" + strconv.Itoa(i)
	}
	g := mustGroup(t, db, "alice", "big", members...)
	d := mustDirect(t, db, "alice", "bob")
	var want []outbox.Row
	for b := range 10 {
		var drafts []history.Draft
		for i := range 30 {
			chat := g.ID
			if i%3 == 0 {
				chat = d.ID
			}
			drafts = append(drafts, historytest.Draft(chat, "alice", strconv.Itoa(b*100+i), "x"))
		}
		for _, r := range historytest.MustCommit(t, db, drafts...) {
			for _, dl := range r.Deliveries {
				want = append(want, outbox.Row{Pos: dl.Pos, Recipient: dl.Recipient})
			}
		}
	}
	if len(want) != 10*(20*40+10*2) {
		t.Fatalf("%d rows, want %d", len(want), 10*(20*40+10*2))
	}
	for _, from := range []int{0, 1, 17, 500, len(want) - 3} {
		after := want[from].Pos - 1
		for _, limit := range []int{1, 7, 300, 2000, 100000} {
			got, err := db.Scan(ctx, 0, after, limit)
			if err != nil {
				t.Fatal(err)
			}
			exp := want[from:min(from+limit, len(want))]
			if len(got) != len(exp) {
				t.Errorf("Scan(after %d, limit %d): %d rows, want %d", after, limit, len(got), len(exp))
				continue
			}
			for i := range exp {
				if got[i].Pos != exp[i].Pos || got[i].Recipient != exp[i].Recipient {
					t.Errorf("Scan(after %d, limit %d): row %d at %d for %s, want %d for %s", after, limit, i, got[i].Pos, got[i].Recipient, exp[i].Pos, exp[i].Recipient)
					break
				}
			}
		}
	}
}

// TestMigration8WaitsForOldWriters: a process of the previous build that
// commits while migration 8 runs (a rolling upgrade) neither loses its
// outbox rows nor skews the depth: the migration locks the old outbox
// first, so it packs the rows of a transaction that was open when it began
// once that transaction commits. Without the lock, the pack missed them
// and the DROP that followed deleted them.
func TestMigration8WaitsForOldWriters(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url, raw := atVersion(t, 7)
	for _, stmt := range []string{
		`INSERT INTO chats (id, kind, title, created_by, created_at) VALUES ('g1', 'group', 'one', 'alice', 1000)`,
		`INSERT INTO members (chat_id, user_id, joined_at, admin_at) VALUES ('g1', 'alice', 1000, 1000), ('g1', 'bob', 1000, 0)`,
	} {
		if _, err := raw.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	old, err := raw.BeginTx(ctx, nil) // the old build's commit, still open
	if err != nil {
		t.Fatal(err)
	}
	defer old.Rollback()
	for _, stmt := range []string{
		`INSERT INTO history (id, message_id, chat_id, sender_id, correlation_id, body, sent_at) VALUES (1, 'm1', 'g1', 'alice', 'k1', 'one', 2000)`,
		`INSERT INTO outbox (recipient, history_id, created_at) VALUES ('alice', 1, 2000), ('bob', 1, 2000)`,
	} {
		if _, err := old.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	opened := make(chan *DB, 1)
	go func() {
		db, err := Open(ctx, DefaultConfig(url))
		if err != nil {
			t.Errorf("Open: %v", err)
		}
		opened <- db
	}()
	time.Sleep(500 * time.Millisecond) // the migration is under way, waiting or not
	if err := old.Commit(); err != nil {
		t.Fatal(err)
	}
	db := <-opened
	if db == nil {
		return
	}
	defer db.Close()
	rows := outboxtest.ScanAll(t, db, 0, 0, 10)
	st, err := db.Stats(ctx, 0)
	if err != nil || len(rows) != 2 || st.Depth != 2 {
		t.Errorf("after migration 8: %d rows scanned, Stats %+v, %v; want the old commit's 2 rows, depth 2", len(rows), st, err)
	}
}
