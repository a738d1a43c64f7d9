package sqlite

import (
	"bytes"
	"fmt"
	"io/fs"
	"log/slog"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	msqlite "modernc.org/sqlite"

	"github.com/tetra-messenger/tetra/workload/history/historytest"
	"github.com/tetra-messenger/tetra/workload/outbox"
	"github.com/tetra-messenger/tetra/workload/outbox/outboxtest"
	"github.com/tetra-messenger/tetra/workload/store/migrations"
)

// TestDeleteBelowInsideARecord: outboxtest.LineInsideARecord on SQLite.
func TestDeleteBelowInsideARecord(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tetra.db")
	db := openDB(t, DefaultConfig(path))
	outboxtest.LineInsideARecord(t, db, func() outboxtest.RecordStore {
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		db = openDB(t, DefaultConfig(path))
		return db
	}, func(s outboxtest.RecordStore) int {
		var n int
		if err := s.(*DB).r.QueryRowContext(t.Context(), `SELECT count(*) FROM outbox_messages`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	})
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

// TestDepthFollowsPurge: outboxtest.DepthFollowsPurge on SQLite.
func TestDepthFollowsPurge(t *testing.T) {
	t.Parallel()
	outboxtest.DepthFollowsPurge(t, newDB(t))
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

// TestMigration9ReordersTheKey: history comes through migration 9's
// rebuild with every row and id, its AUTOINCREMENT counter (a purged top
// id is not reused), its indexes, and the idempotency key ordered by
// correlationId first; a resend of a message stored before the upgrade is
// still answered with the original, and outbox_messages still refers to
// history.
func TestMigration9ReordersTheKey(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path, raw := atVersion(t, 8)
	for _, stmt := range []string{
		`INSERT INTO chats (id, kind, title, created_by, created_at) VALUES ('g1', 'group', 'one', 'alice', 1000)`,
		`INSERT INTO members (chat_id, user_id, joined_at, admin_at) VALUES ('g1', 'alice', 1000, 1000), ('g1', 'bob', 1000, 0)`,
		`INSERT INTO history (id, message_id, chat_id, sender_id, correlation_id, body, sent_at) VALUES
			(1, 'm1', 'g1', 'alice', 'k1', 'one', 2000), (2, 'm2', 'g1', 'bob', 'k2', 'two', 3000), (5, 'm5', 'g1', 'alice', 'k5', 'five', 4000)`,
		`UPDATE sqlite_sequence SET seq = 9 WHERE name = 'history'`, // 6 to 9 were purged
		`INSERT INTO outbox_messages (id, history_id, recipients, n, created_at) VALUES (2, 5, '["alice","bob"]', 2, 4000)`,
	} {
		if _, err := raw.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	raw.Close()
	db := openDB(t, DefaultConfig(path))
	msgs, _, err := db.Page(ctx, "g1", "", 10)
	if err != nil || len(msgs) != 3 || msgs[2].ID != "m5" || msgs[2].Seq != 5 || msgs[2].Body != "five" {
		t.Fatalf("history after migration 9: %+v, %v", msgs, err)
	}
	var cols []string
	rows, err := db.r.QueryContext(ctx, `SELECT x.name FROM pragma_index_list('history') AS l, pragma_index_xinfo(l.name) AS x
		WHERE l."unique" AND x.key AND l.origin = 'u' AND x.name <> 'message_id' ORDER BY x.seqno`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var c string
		if err := rows.Scan(&c); err != nil {
			t.Fatal(err)
		}
		cols = append(cols, c)
	}
	if err := rows.Err(); err != nil || !slices.Equal(cols, []string{"correlation_id", "sender_id"}) {
		t.Errorf("the idempotency key's columns: %v, %v; want correlation_id, sender_id", cols, err)
	}
	res := historytest.MustCommit(t, db, historytest.Draft("g1", "alice", "k5", "five"), historytest.Draft("g1", "bob", "k6", "six"))
	if !res[0].Duplicate || res[0].Message.ID != "m5" {
		t.Errorf("resend of k5: %+v, want the original m5 as a duplicate", res[0])
	}
	if res[1].Message.Seq != 10 {
		t.Errorf("new message at Seq %d, want 10 (ids 6 to 9 were used once)", res[1].Message.Seq)
	}
	if got := outboxtest.ScanAll(t, db, 0, 0, 10); len(got) != 4 || got[0].Message.ID != "m5" {
		t.Errorf("outbox after migration 9: %+v", got)
	}
	var fk string
	if err := db.r.QueryRowContext(ctx, `SELECT "table" FROM pragma_foreign_key_list('outbox_messages')`).Scan(&fk); err != nil || fk != "history" {
		t.Errorf("outbox_messages refers to %q (%v), want history", fk, err)
	}
}
