package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/pressly/goose/v3"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/history/historytest"
	"github.com/tetra-messenger/tetra/workload/outbox"
	"github.com/tetra-messenger/tetra/workload/outbox/outboxtest"
	"github.com/tetra-messenger/tetra/workload/store/migrations"
)

// openDB opens a store at path and closes it when the test ends.
func openDB(t testing.TB, cfg Config) *DB {
	t.Helper()
	db, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open(%s): %v", cfg.Path, err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return db
}

// newDB opens a fresh store in the test's temporary directory.
func newDB(t testing.TB, edit ...func(*Config)) *DB {
	t.Helper()
	cfg := DefaultConfig(filepath.Join(t.TempDir(), "tetra.db"))
	for _, e := range edit {
		e(&cfg)
	}
	return openDB(t, cfg)
}

func TestHistoryConformance(t *testing.T) {
	t.Parallel()
	historytest.Run(t, func(t *testing.T) history.Store { return newDB(t) })
}

func TestHistoryConformanceWithoutOutbox(t *testing.T) {
	t.Parallel()
	historytest.Run(t, func(t *testing.T) history.Store {
		return newDB(t, func(c *Config) { c.Outbox = false })
	})
}

func TestOutboxConformance(t *testing.T) {
	t.Parallel()
	outboxtest.Run(t, func(t *testing.T) outboxtest.Harness { return newHarness(newDB(t)) })
}

// newHarness appends through Commit: one group chat per recipient set,
// created on first use, and one message from the first recipient.
func newHarness(db *DB) outboxtest.Harness {
	var mu sync.Mutex
	chats := map[string]string{}
	chatFor := func(ctx context.Context, recipients []string) (string, error) {
		key := strings.Join(slices.Sorted(slices.Values(recipients)), "\n")
		mu.Lock()
		defer mu.Unlock()
		if id, ok := chats[key]; ok {
			return id, nil
		}
		c, err := db.CreateGroup(ctx, recipients[0], "", recipients[1:])
		if err != nil {
			return "", err
		}
		chats[key] = c.ID
		return c.ID, nil
	}
	return outboxtest.Harness{
		Log: db,
		Append: func(ctx context.Context, recipients []string) ([]outbox.Row, error) {
			chatID, err := chatFor(ctx, recipients)
			if err != nil {
				return nil, err
			}
			d := historytest.Draft(chatID, recipients[0], ulid.Make().String(), "body")
			res, err := db.Commit(ctx, []history.Draft{d})
			if err != nil {
				return nil, err
			}
			if res[0].Err != nil {
				return nil, res[0].Err
			}
			rows := make([]outbox.Row, len(res[0].Deliveries))
			for i, dl := range res[0].Deliveries {
				rows[i] = outbox.Row{Partition: dl.Partition, Pos: dl.Pos, Recipient: dl.Recipient, Message: res[0].Message}
			}
			return rows, nil
		},
	}
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	ok := DefaultConfig("x.db")
	for _, tc := range []struct {
		name  string
		edit  func(*Config)
		field string // "" when valid
	}{
		{"default", func(*Config) {}, ""},
		{"zero synchronous means FULL", func(c *Config) { c.Synchronous = "" }, ""},
		{"lower case", func(c *Config) { c.Synchronous = "normal" }, ""},
		{"zero busy timeout", func(c *Config) { c.BusyTimeout = 0 }, ""},
		{"no path", func(c *Config) { c.Path = "" }, "Config.Path"},
		{"blank path", func(c *Config) { c.Path = "  " }, "Config.Path"},
		{"memory", func(c *Config) { c.Path = ":memory:" }, "Config.Path"},
		{"uri", func(c *Config) { c.Path = "file:x.db?mode=memory" }, "Config.Path"},
		{"question mark", func(c *Config) { c.Path = "x.db?_pragma=foo" }, "Config.Path"},
		{"synchronous", func(c *Config) { c.Synchronous = "SOMETIMES" }, "Config.Synchronous"},
		{"negative busy timeout", func(c *Config) { c.BusyTimeout = -time.Second }, "Config.BusyTimeout"},
		{"huge busy timeout", func(c *Config) { c.BusyTimeout = time.Hour }, "Config.BusyTimeout"},
		{"negative read conns", func(c *Config) { c.ReadConns = -1 }, "Config.ReadConns"},
		{"huge read conns", func(c *Config) { c.ReadConns = MaxReadConns + 1 }, "Config.ReadConns"},
	} {
		c := ok
		tc.edit(&c)
		got, err := c.validate()
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.field != "" && (err == nil || !strings.Contains(err.Error(), tc.field)):
			t.Errorf("%s: err = %v, want one naming %s", tc.name, err, tc.field)
		case tc.field == "" && (got.Synchronous == "" || got.BusyTimeout <= 0 || got.ReadConns <= 0):
			t.Errorf("%s: defaults not filled in: %+v", tc.name, got)
		}
	}
	if _, err := Open(context.Background(), Config{}); err == nil || !strings.Contains(err.Error(), "Config.Path") {
		t.Errorf("Open(Config{}): err = %v, want one naming Config.Path", err)
	}
}

func TestOpenCreatesDirectoryAndPragmas(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "a", "b", "tetra.db")
	db := openDB(t, DefaultConfig(path))
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("database file: %v", err)
	}
	ctx := t.Context()
	var mode string
	var sync, fk, busy int
	if err := db.w.QueryRowContext(ctx, `PRAGMA journal_mode`).Scan(&mode); err != nil || mode != "wal" {
		t.Errorf("journal_mode = %q, %v; want wal", mode, err)
	}
	if err := db.w.QueryRowContext(ctx, `PRAGMA synchronous`).Scan(&sync); err != nil || sync != 2 {
		t.Errorf("synchronous = %d, %v; want 2 (FULL)", sync, err)
	}
	if err := db.w.QueryRowContext(ctx, `PRAGMA foreign_keys`).Scan(&fk); err != nil || fk != 0 {
		t.Errorf("writer foreign_keys = %d, %v; want 0 (writerDSN; TestForeignKeysHoldWithoutEnforcement)", fk, err)
	}
	if err := db.w.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&busy); err != nil || busy != 5000 {
		t.Errorf("writer busy_timeout = %d, %v; want 5000", busy, err)
	}
	if err := db.r.QueryRowContext(ctx, `PRAGMA busy_timeout`).Scan(&busy); err != nil || busy != 5000 {
		t.Errorf("reader busy_timeout = %d, %v; want 5000", busy, err)
	}
	if _, err := db.r.ExecContext(ctx, `INSERT INTO chats (id, kind, title, created_at) VALUES ('x', 'group', '', 0)`); err == nil {
		t.Error("the read pool accepted a write")
	}
	if got := db.w.Stats().MaxOpenConnections; got != 1 {
		t.Errorf("writer pool allows %d connections, want 1", got)
	}
}

func TestMigrationsIdempotent(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "tetra.db")
	first := openDB(t, DefaultConfig(path))
	c := mustGroup(t, first, "alice", "kept")
	// A second handle on the same file (another process) migrates nothing
	// and sees the data.
	second := openDB(t, DefaultConfig(path))
	if got, err := second.Chat(t.Context(), c.ID); err != nil || got.Title != "kept" {
		t.Errorf("second handle: Chat = %+v, %v", got, err)
	}
	p, err := goose.NewProvider(goose.DialectSQLite3, second.w, migrations.SQLite())
	if err != nil {
		t.Fatalf("NewProvider: %v", err)
	}
	current, target, err := p.GetVersions(t.Context())
	if err != nil {
		t.Fatalf("GetVersions: %v", err)
	}
	files, err := fs.Glob(migrations.SQLite(), "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	// Files are numbered from 0001; the highest number is the latest
	// version (numbers may be missing while branches are merged).
	latest, _ := strconv.ParseInt(strings.SplitN(files[len(files)-1], "_", 2)[0], 10, 64)
	if current != target || target != latest {
		t.Errorf("schema version %d, latest %d, newest migration file %s; want all applied", current, target, files[len(files)-1])
	}
	if pending, err := p.HasPending(t.Context()); err != nil || pending {
		t.Errorf("HasPending = %v, %v; want false", pending, err)
	}
}

func mustGroup(t testing.TB, db *DB, creator, title string, members ...string) history.Chat {
	t.Helper()
	c, err := db.CreateGroup(t.Context(), creator, title, members)
	if err != nil {
		t.Fatalf("CreateGroup: %v", err)
	}
	return c
}

func TestReopenKeepsDataAndPositions(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "tetra.db")
	db, err := Open(ctx, DefaultConfig(path))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	g := mustGroup(t, db, "alice", "g", "bob")
	res := historytest.MustCommit(t, db,
		historytest.Draft(g.ID, "alice", "1", "one"), historytest.Draft(g.ID, "bob", "2", "two"))
	head, err := db.Head(ctx, 0)
	if err != nil || head != res[1].Deliveries[1].Pos {
		t.Fatalf("Head = %d, %v; want the last delivery %d", head, err, res[1].Deliveries[1].Pos)
	}
	if n, err := db.DeleteBelow(ctx, 0, head+1); err != nil || n != 4 {
		t.Fatalf("DeleteBelow = %d, %v; want 4", n, err)
	}
	if err := db.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := db.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := db.Ping(ctx); !errors.Is(err, history.ErrUnavailable) {
		t.Errorf("Ping after Close: err = %v, want ErrUnavailable", err)
	}

	db = openDB(t, DefaultConfig(path))
	if got, err := db.Head(ctx, 0); err != nil || got != head {
		t.Errorf("Head after reopen = %d, %v; want %d", got, err, head)
	}
	if got, err := db.Chat(ctx, g.ID); err != nil || !slices.Equal(got.Members, g.Members) {
		t.Errorf("Chat after reopen = %+v, %v", got, err)
	}
	msgs, _, err := db.Page(ctx, g.ID, "", 10)
	if err != nil || len(msgs) != 2 || msgs[1].ID != res[1].Message.ID || !msgs[1].SentAt.Equal(res[1].Message.SentAt) {
		t.Errorf("Page after reopen = %+v, %v", msgs, err)
	}
	// The idempotency key survives too.
	dup := historytest.MustCommit(t, db, historytest.Draft(g.ID, "alice", "1", "one"))[0]
	if !dup.Duplicate || dup.Message.ID != res[0].Message.ID {
		t.Errorf("resend after reopen = %+v, want the original", dup)
	}
	next := historytest.MustCommit(t, db, historytest.Draft(g.ID, "alice", "3", "three"))[0]
	if next.Message.Seq <= res[1].Message.Seq {
		t.Errorf("Seq after reopen %d, not above %d", next.Message.Seq, res[1].Message.Seq)
	}
	if next.Deliveries[0].Pos <= head {
		t.Errorf("outbox position after reopen %d, not above the old head %d", next.Deliveries[0].Pos, head)
	}
}

func TestHeadAndStatsExact(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := newDB(t)
	d, _, err := db.CreateDirect(ctx, "alice", "bob")
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	res := historytest.MustCommit(t, db, historytest.Draft(d.ID, "alice", "1", "x"), historytest.Draft(d.ID, "bob", "2", "y"))
	after := time.Now()
	var want []int64
	for _, r := range res {
		for _, dl := range r.Deliveries {
			want = append(want, dl.Pos)
		}
	}
	if !slices.Equal(want, []int64{1, 2, 3, 4}) {
		t.Errorf("positions %v, want 1..4 on a fresh database", want)
	}
	st, err := db.Stats(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	if st.Depth != 4 || st.Head != 4 || st.OldestAt.Before(before.Truncate(0)) || st.OldestAt.After(after) {
		t.Errorf("Stats = %+v, want depth 4, head 4, OldestAt within the commit", st)
	}
	rows, err := db.Scan(ctx, 0, 0, 10)
	if err != nil || len(rows) != 4 {
		t.Fatalf("Scan = %d rows, %v", len(rows), err)
	}
	for i, r := range rows {
		m := res[i/2].Message
		if r.Message != m {
			t.Errorf("row %d carries %+v, want %+v", i, r.Message, m)
		}
	}
}

func TestOutboxOff(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := newDB(t, func(c *Config) { c.Outbox = false })
	g := mustGroup(t, db, "alice", "g", "bob")
	res := historytest.MustCommit(t, db, historytest.Draft(g.ID, "alice", "1", "x"))
	if len(res[0].Deliveries) != 0 || !slices.Equal(res[0].Members, []string{"alice", "bob"}) {
		t.Errorf("result = %+v, want members and no deliveries", res[0])
	}
	if h, err := db.Head(ctx, 0); err != nil || h != 0 {
		t.Errorf("Head = %d, %v; want 0", h, err)
	}
	if st, err := db.Stats(ctx, 0); err != nil || st.Depth != 0 {
		t.Errorf("Stats = %+v, %v; want empty", st, err)
	}
}

func TestCommitFailureRollsBackBatch(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := newDB(t)
	g := mustGroup(t, db, "alice", "g", "bob")
	first := historytest.MustCommit(t, db, historytest.Draft(g.ID, "alice", "0", "kept"))

	// Break the outbox insert: the history insert before it in the same
	// batch must not survive.
	if _, err := db.w.ExecContext(ctx, `ALTER TABLE outbox_messages RENAME TO outbox_away`); err != nil {
		t.Fatal(err)
	}
	_, err := db.Commit(ctx, []history.Draft{historytest.Draft(g.ID, "alice", "1", "lost")})
	if !errors.Is(err, history.ErrUnavailable) {
		t.Errorf("Commit with a broken outbox: err = %v, want ErrUnavailable", err)
	}
	if _, err := db.w.ExecContext(ctx, `ALTER TABLE outbox_away RENAME TO outbox_messages`); err != nil {
		t.Fatal(err)
	}
	msgs, _, err := db.Page(ctx, g.ID, "", 10)
	if err != nil || len(msgs) != 1 || msgs[0].ID != first[0].Message.ID {
		t.Errorf("history after a failed batch = %+v, %v; want only the first message", msgs, err)
	}
	// The key of the failed batch is free, and commits work again.
	r := historytest.MustCommit(t, db, historytest.Draft(g.ID, "alice", "1", "retried"))[0]
	if r.Duplicate || len(r.Deliveries) != 2 {
		t.Errorf("retry = %+v, want a fresh commit with 2 deliveries", r)
	}

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := db.Commit(canceled, []history.Draft{historytest.Draft(g.ID, "alice", "2", "x")}); !errors.Is(err, history.ErrUnavailable) {
		t.Errorf("Commit with a canceled context: err = %v, want ErrUnavailable", err)
	}
}

func TestReadsDoNotWaitForWriter(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := newDB(t)
	g := mustGroup(t, db, "alice", "g", "bob")
	historytest.MustCommit(t, db, historytest.Draft(g.ID, "alice", "1", "x"))

	// Hold the writer, with an uncommitted write, for the whole check.
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `INSERT INTO members (chat_id, user_id) VALUES (?, 'zed')`, g.ID); err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if msgs, _, err := db.Page(rctx, g.ID, "", 10); err != nil || len(msgs) != 1 {
		t.Errorf("Page while the writer is busy = %d, %v", len(msgs), err)
	}
	if c, err := db.Chat(rctx, g.ID); err != nil || c.HasMember("zed") {
		t.Errorf("Chat while the writer is busy = %+v, %v (uncommitted member must not show)", c, err)
	}
	if _, err := db.ChatsOf(rctx, "alice"); err != nil {
		t.Errorf("ChatsOf while the writer is busy: %v", err)
	}
	if rows, err := db.Scan(rctx, 0, 0, 10); err != nil || len(rows) != 2 {
		t.Errorf("Scan while the writer is busy = %d, %v", len(rows), err)
	}
	if _, err := db.Head(rctx, 0); err != nil {
		t.Errorf("Head while the writer is busy: %v", err)
	}
	if _, err := db.Stats(rctx, 0); err != nil {
		t.Errorf("Stats while the writer is busy: %v", err)
	}
}

func TestTwoHandlesOneFile(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "tetra.db")
	a := openDB(t, DefaultConfig(path))
	b := openDB(t, DefaultConfig(path))

	var wg sync.WaitGroup
	chats := make([]history.Chat, 8)
	for i := range chats {
		db := a
		if i%2 == 1 {
			db = b
		}
		wg.Go(func() {
			c, _, err := db.CreateDirect(ctx, "alice", "bob")
			if err != nil {
				t.Errorf("CreateDirect: %v", err)
			}
			chats[i] = c
		})
	}
	wg.Wait()
	for _, c := range chats {
		if c.ID != chats[0].ID {
			t.Fatalf("two handles created different direct chats %s and %s", c.ID, chats[0].ID)
		}
	}
	chat := chats[0].ID
	var mu sync.Mutex
	var positions []int64
	for i := range 4 {
		db := a
		if i%2 == 1 {
			db = b
		}
		wg.Go(func() {
			for n := range 10 {
				var drafts []history.Draft
				for k := range 5 {
					drafts = append(drafts, historytest.Draft(chat, "alice", fmt.Sprintf("%d-%d-%d", i, n, k), "x"))
				}
				res, err := db.Commit(ctx, drafts)
				if err != nil {
					t.Errorf("Commit: %v", err)
					return
				}
				mu.Lock()
				for _, r := range res {
					for _, d := range r.Deliveries {
						positions = append(positions, d.Pos)
					}
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(positions)
	if len(positions) != 400 || len(slices.Compact(slices.Clone(positions))) != 400 {
		t.Errorf("%d positions, %d distinct; want 400 distinct", len(positions), len(slices.Compact(positions)))
	}
	rows := outboxtest.ScanAll(t, b, 0, 0, 64)
	if len(rows) != 400 {
		t.Errorf("Scan saw %d rows, want 400", len(rows))
	}
}

// TestMemberCacheSeesOtherProcesses checks that a member added through
// another handle on the same file (another process) gets outbox rows from
// this handle's next commit, although this handle cached the member list.
func TestMemberCacheSeesOtherProcesses(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "tetra.db")
	a := openDB(t, DefaultConfig(path))
	b := openDB(t, DefaultConfig(path))
	g := mustGroup(t, a, "alice", "g", "bob")
	r := historytest.MustCommit(t, a, historytest.Draft(g.ID, "alice", "1", "x"))[0]
	if len(r.Deliveries) != 2 {
		t.Fatalf("first commit: %d deliveries, want 2", len(r.Deliveries))
	}
	if _, err := b.AddMember(ctx, g.ID, "bob", "carol"); err != nil {
		t.Fatal(err)
	}
	r = historytest.MustCommit(t, a, historytest.Draft(g.ID, "alice", "2", "y"))[0]
	var got []string
	for _, d := range r.Deliveries {
		got = append(got, d.Recipient)
	}
	if !slices.Equal(got, []string{"alice", "bob", "carol"}) || !slices.Equal(r.Members, got) {
		t.Errorf("after another handle added carol: deliveries to %v, members %v", got, r.Members)
	}
	// carol may now send through the first handle.
	if r := historytest.MustCommit(t, a, historytest.Draft(g.ID, "carol", "3", "z"))[0]; r.Err != nil {
		t.Errorf("carol's send: %v", r.Err)
	}
}

func TestGroupLimits(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := newDB(t)
	members := make([]string, MaxGroupMembers-1)
	for i := range members {
		members[i] = fmt.Sprintf("m%04d", i)
	}
	g, err := db.CreateGroup(ctx, "boss", "big", members)
	if err != nil || len(g.Members) != MaxGroupMembers {
		t.Fatalf("CreateGroup at the limit = %d members, %v", len(g.Members), err)
	}
	if _, err := db.AddMember(ctx, g.ID, "boss", "one-too-many"); !errors.Is(err, history.ErrInvalid) {
		t.Errorf("AddMember beyond the limit: err = %v, want ErrInvalid", err)
	}
	if _, err := db.CreateGroup(ctx, "boss2", "big", members[:MaxGroupMembers-1]); err != nil {
		t.Errorf("CreateGroup of exactly the limit: %v", err)
	}
	if _, err := db.CreateGroup(ctx, "boss3", "too big", append(slices.Clone(members), "extra")); !errors.Is(err, history.ErrInvalid) {
		t.Errorf("CreateGroup beyond the limit: err = %v, want ErrInvalid", err)
	}
	if _, err := db.CreateGroup(ctx, "boss", strings.Repeat("t", MaxTitleBytes+1), nil); !errors.Is(err, history.ErrInvalid) {
		t.Errorf("CreateGroup with a long title: err = %v, want ErrInvalid", err)
	}
	if _, _, err := db.CreateDirect(ctx, "alice", "bad\x00id"); !errors.Is(err, history.ErrInvalid) {
		t.Errorf("CreateDirect with a NUL in an id: err = %v, want ErrInvalid", err)
	}
}

// TestQueryPlans pins the access paths that keep the outbox linear and
// paging keyed: a range of the outbox primary key joined by key to history,
// and the (chat_id, id) index for Page.
func TestQueryPlans(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := newDB(t)
	plan := func(query string, args ...any) string {
		t.Helper()
		rows, err := db.r.QueryContext(ctx, "EXPLAIN QUERY PLAN "+query, args...)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var lines []string
		for rows.Next() {
			var id, parent, notused int
			var detail string
			if err := rows.Scan(&id, &parent, &notused, &detail); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, detail)
		}
		return strings.Join(lines, "\n")
	}
	scan := plan(scanQuery, 0, 10)
	for _, want := range []string{"SEARCH o USING INTEGER PRIMARY KEY (rowid>?)", "SEARCH h USING INTEGER PRIMARY KEY (rowid=?)"} {
		if !strings.Contains(scan, want) {
			t.Errorf("Scan plan lacks %q:\n%s", want, scan)
		}
	}
	if strings.Contains(scan, "TEMP B-TREE") {
		t.Errorf("Scan plan sorts:\n%s", scan)
	}
	page := plan(pageQuery, "c", "m", 10)
	if !strings.Contains(page, "INDEX history_unread (chat_id=? AND id>?)") || strings.Contains(page, "TEMP B-TREE") {
		t.Errorf("Page plan does not range over history_unread:\n%s", page)
	}
}

// TestDeleteBelowInChunks: a prefix far larger than one delete statement
// (deleteChunk) goes whole, and nothing at or above the line is touched.
func TestDeleteBelowInChunks(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := newDB(t)
	g, err := db.CreateGroup(ctx, "alice", "g", []string{"bob", "carol", "dave"})
	if err != nil {
		t.Fatal(err)
	}
	var drafts []history.Draft
	for i := range 1500 { // 6,000 rows: four members each
		drafts = append(drafts, historytest.Draft(g.ID, "alice", fmt.Sprint("k", i), "x"))
	}
	res := historytest.MustCommit(t, db, drafts...)
	line := res[1200].Deliveries[0].Pos // well past 2 x deleteChunk
	n, err := db.DeleteBelow(ctx, 0, line)
	if err != nil {
		t.Fatal(err)
	}
	if want := line - res[0].Deliveries[0].Pos; n != want {
		t.Fatalf("deleted %d rows, want the %d below the line", n, want)
	}
	rows, err := db.Scan(ctx, 0, -1, 1)
	if err != nil || len(rows) != 1 || rows[0].Pos != line {
		t.Fatalf("first row after the delete: %+v, %v; want position %d", rows, err, line)
	}
	st, _ := db.Stats(ctx, 0)
	if st.Depth != 6000-n {
		t.Fatalf("depth %d after deleting %d of 6000", st.Depth, n)
	}
}

// TestUnreadPlan: ChatsOf's unread count ranges over the covering index
// history_unread and never reads the table or sorts.
func TestUnreadPlan(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	rows, err := db.r.QueryContext(t.Context(), `EXPLAIN QUERY PLAN `+unreadQuery, "c", int64(0), "u", 1000)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var plan []string
	for rows.Next() {
		var id, parent, unused int
		var detail string
		if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, detail)
	}
	text := strings.Join(plan, "\n")
	if !strings.Contains(text, "COVERING INDEX history_unread (chat_id=? AND id>?)") || strings.Contains(text, "TEMP B-TREE") {
		t.Errorf("unread count plan is not a range of the covering index history_unread:\n%s", text)
	}
}

// TestForeignKeysHoldWithoutEnforcement runs the conformance suites on
// stores whose writer does not enforce foreign keys (writerDSN) and then
// asks SQLite for every row whose parent is missing: the references the
// schema declares (a history row's chat, an outbox row's history row:
// invariant I1, a member's chat) hold by construction.
func TestForeignKeysHoldWithoutEnforcement(t *testing.T) {
	t.Parallel()
	checked := func(t *testing.T, db *DB) *DB {
		t.Cleanup(func() { // before openDB's Close: cleanups run last first
			rows, err := db.w.QueryContext(context.Background(), `PRAGMA foreign_key_check`)
			if err != nil {
				t.Fatalf("foreign_key_check: %v", err)
			}
			defer rows.Close()
			for rows.Next() {
				var table, parent string
				var rowid sql.NullInt64
				var fk int
				if err := rows.Scan(&table, &rowid, &parent, &fk); err != nil {
					t.Fatal(err)
				}
				t.Errorf("%s row %v refers to a missing %s row", table, rowid.Int64, parent)
			}
		})
		return db
	}
	t.Run("history", func(t *testing.T) {
		historytest.Run(t, func(t *testing.T) history.Store { return checked(t, newDB(t)) })
	})
	t.Run("outbox", func(t *testing.T) {
		outboxtest.Run(t, func(t *testing.T) outboxtest.Harness { return newHarness(checked(t, newDB(t))) })
	})
}
