package sqlite

import (
	"bytes"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	msqlite "modernc.org/sqlite"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/history/historytest"
	"github.com/tetra-messenger/tetra/workload/outbox"
	"github.com/tetra-messenger/tetra/workload/outbox/outboxtest"
	"github.com/tetra-messenger/tetra/workload/store/migrations"
)

// TestDeleteBelowInsideARecord: a line inside a message's record deletes
// the rows below it and no other: Scan, Stats and the counts DeleteBelow
// returns see exactly the rows above it, across reopening, until a later
// line passes the record and deletes it. Head never moves.
func TestDeleteBelowInsideARecord(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "tetra.db")
	db := openDB(t, DefaultConfig(path))
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
	check := func(name string, db *DB, from int) {
		t.Helper()
		got := outboxtest.ScanAll(t, db, 0, 0, 3)
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
	check("line inside the first record", db, 2)
	del(rows[2].Pos, 0)
	del(rows[1].Pos, 0) // under the line: nothing
	del(rows[3].Pos, 1)
	check("line moved up inside the record", db, 3)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db = openDB(t, DefaultConfig(path))
	check("reopened", db, 3)
	del(rows[6].Pos, 3) // the rest of the first record, and into the second
	check("line inside the second record", db, 6)
	var records int
	if err := db.r.QueryRowContext(ctx, `SELECT count(*) FROM outbox_messages`).Scan(&records); err != nil || records != 1 {
		t.Errorf("%d records remain (%v), want 1", records, err)
	}
	del(head+1, 2) // past the last record: deleteRecords, not cutRecord
	check("all deleted", db, 8)
	next := historytest.MustCommit(t, db, historytest.Draft(g.ID, "carol", "3", "z"))
	if p := next[0].Deliveries[0].Pos; p <= head {
		t.Errorf("position %d after deleting all, not above the old head %d", p, head)
	}
}

// TestMigration7PacksTheOutbox: the outbox rows of schema version 6 come
// through migration 7 as one record per message, in the same order, for
// the same recipients and messages; Head does not go back (the old
// AUTOINCREMENT counter, deleted rows included), and new messages get
// positions above it.
func TestMigration7PacksTheOutbox(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path, raw := atVersion(t, 6)
	for _, stmt := range []string{
		`INSERT INTO chats (id, kind, title, created_by, created_at) VALUES ('g1', 'group', 'one', 'alice', 1000)`,
		`INSERT INTO members (chat_id, user_id, joined_at, admin_at) VALUES ('g1', 'alice', 1000, 1000), ('g1', 'bob', 1000, 0), ('g1', 'carol', 1000, 0)`,
		`INSERT INTO history (message_id, chat_id, sender_id, correlation_id, body, sent_at) VALUES
			('m1', 'g1', 'alice', 'k1', 'one', 2000), ('m2', 'g1', 'bob', 'k2', 'two', 3000), ('m3', 'g1', 'bob', 'k3', 'three', 4000)`,
		// m1's rows were reclaimed but alice's; m2 and m3 wait for all.
		`INSERT INTO outbox (recipient, history_id, created_at) VALUES
			('alice', 1, 2000), ('bob', 1, 2000), ('carol', 1, 2000),
			('alice', 2, 3000), ('bob', 2, 3000), ('carol', 2, 3000),
			('alice', 3, 4000), ('bob', 3, 4000), ('carol', 3, 4000)`,
		`DELETE FROM outbox WHERE id IN (2, 3)`,
	} {
		if _, err := raw.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	raw.Close()
	db := openDB(t, DefaultConfig(path))
	got := outboxtest.ScanAll(t, db, 0, -1, 2)
	want := []struct {
		to, msg string
	}{{"alice", "m1"}, {"alice", "m2"}, {"bob", "m2"}, {"carol", "m2"}, {"alice", "m3"}, {"bob", "m3"}, {"carol", "m3"}}
	if len(got) != len(want) {
		t.Fatalf("%d rows after migration 7, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		if got[i].Recipient != w.to || got[i].Message.ID != w.msg || got[i].Message.Body == "" || got[i].CreatedAt.IsZero() {
			t.Errorf("row %d: %s gets %s (%q, created %v), want %s gets %s", i, got[i].Recipient, got[i].Message.ID,
				got[i].Message.Body, got[i].CreatedAt, w.to, w.msg)
		}
	}
	head, err := db.Head(ctx, 0)
	if err != nil || head != 9 {
		t.Errorf("Head = %d, %v; want the old counter 9", head, err)
	}
	for i, w := range []int64{1, 4, 5, 6, 7, 8, 9} { // the rows' old ids
		if got[i].Pos != w {
			t.Errorf("row %d at position %d, want its old id %d", i, got[i].Pos, w)
		}
	}
	next := historytest.MustCommit(t, db, historytest.Draft("g1", "carol", "k4", "four"))
	if p := next[0].Deliveries[0].Pos; p <= head {
		t.Errorf("new position %d, not above the head %d", p, head)
	}
	var _ outbox.Log = db
}

// TestCommitsWithFdatasync: on Linux an open store has switched SQLite's
// commits to fdatasync(2) (useFdatasync).
func TestCommitsWithFdatasync(t *testing.T) {
	newDB(t)
	if runtime.GOOS == "linux" && !msqlite.FdatasyncEnabled() {
		t.Fatal("SQLite still syncs with fsync(2) after Open")
	}
}

// TestRefusesANewerSchema: a database migrated by a newer binary (its
// goose version above every migration this one embeds, as a downgrade
// leaves it) is refused at Open with both versions named, instead of
// failing later on a table this binary does not know.
func TestRefusesANewerSchema(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tetra.db")
	db := openDB(t, DefaultConfig(path))
	if _, err := db.w.ExecContext(t.Context(), `INSERT INTO goose_db_version (version_id, is_applied) VALUES (99, 1)`); err != nil {
		t.Fatal(err)
	}
	_, err := Open(t.Context(), DefaultConfig(path))
	if err == nil || !strings.Contains(err.Error(), "version 99, newer than this binary's") {
		t.Fatalf("Open of a schema-99 database: %v, want a refusal naming version 99", err)
	}
}

// TestDepthFollowsPurge: the outbox depth Stats reports (outbox_line.depth,
// schema version 8) goes down with the records PurgeHistory deletes, the
// rows under a line not counted twice, and stays equal to the rows Scan
// returns.
func TestDepthFollowsPurge(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := newDB(t)
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
	rows := outboxtest.ScanAll(t, db, 0, 0, 10)
	st, err := db.Stats(ctx, 0)
	if err != nil || st.Depth != 3 || len(rows) != 3 {
		t.Errorf("after the purge: Stats %+v, %v, %d rows scanned; want depth 3 and 3 rows (the new message's)", st, err, len(rows))
	}
}

// TestMigration8CountsTheOutbox: a schema-7 outbox, its oldest record cut
// by a line, comes through migration 8 with the depth Stats reports equal
// to the rows present.
func TestMigration8CountsTheOutbox(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path, raw := atVersion(t, 7)
	for _, stmt := range []string{
		`INSERT INTO chats (id, kind, title, created_by, created_at) VALUES ('g1', 'group', 'one', 'alice', 1000)`,
		`INSERT INTO members (chat_id, user_id, joined_at, admin_at) VALUES ('g1', 'alice', 1000, 1000), ('g1', 'bob', 1000, 0), ('g1', 'carol', 1000, 0)`,
		`INSERT INTO history (message_id, chat_id, sender_id, correlation_id, body, sent_at) VALUES
			('m1', 'g1', 'alice', 'k1', 'one', 2000), ('m2', 'g1', 'bob', 'k2', 'two', 3000)`,
		`INSERT INTO outbox_messages (id, history_id, recipients, n, created_at) VALUES
			(3, 1, '["alice","bob","carol"]', 3, 2000), (6, 2, '["alice","bob","carol"]', 3, 3000)`,
		`UPDATE outbox_line SET below = 3`, // rows 1 and 2 are gone
	} {
		if _, err := raw.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	raw.Close()
	db := openDB(t, DefaultConfig(path))
	if st, err := db.Stats(ctx, 0); err != nil || st.Depth != 4 {
		t.Errorf("after migration 8: Stats %+v, %v; want depth 4", st, err)
	}
	if rows := outboxtest.ScanAll(t, db, 0, 0, 10); len(rows) != 4 {
		t.Errorf("%d rows scanned, want 4", len(rows))
	}
}

// TestOpenLogsMigrations: Open logs the migrations it applied on slog's
// default logger (the version reached and each one applied), and a second
// Open of the same database, with nothing left to apply, logs nothing:
// an upgrade shows in the server's log. Not parallel: it swaps the
// default logger.
func TestOpenLogsMigrations(t *testing.T) {
	var buf bytes.Buffer
	old := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	t.Cleanup(func() { slog.SetDefault(old) })

	path := filepath.Join(t.TempDir(), "tetra.db")
	openDB(t, DefaultConfig(path)).Close()
	newest := len(mustGlob(t)) // one file per version, numbered from 1
	want := fmt.Sprintf(`msg="schema migrated" store=sqlite to=%d applied="[1 `, newest)
	if got := buf.String(); !strings.Contains(got, want) {
		t.Fatalf("log of a fresh Open = %q, want a line containing %q", got, want)
	}
	buf.Reset()
	openDB(t, DefaultConfig(path))
	if got := buf.String(); strings.Contains(got, "schema migrated") {
		t.Fatalf("log of a second Open = %q, want no migration logged", got)
	}
}

func mustGlob(t *testing.T) []string {
	t.Helper()
	m, err := fs.Glob(migrations.SQLite(), "*.sql")
	if err != nil || len(m) == 0 {
		t.Fatalf("migration files: %v, %v", m, err)
	}
	return m
}
