package postgres

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/oklog/ulid/v2"
	"github.com/pressly/goose/v3"

	"github.com/tetra-messenger/tetra/internal/testenv"
	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/history/historytest"
	"github.com/tetra-messenger/tetra/workload/outbox"
	"github.com/tetra-messenger/tetra/workload/outbox/outboxtest"
	"github.com/tetra-messenger/tetra/workload/store/migrations"
)

// openDB opens a store and closes it when the test ends.
func openDB(t testing.TB, cfg Config) *DB {
	t.Helper()
	db, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return db
}

// newDB opens a store on a fresh database of its own.
func newDB(t testing.TB, edit ...func(*Config)) *DB {
	t.Helper()
	cfg := DefaultConfig(testenv.Postgres(t))
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

// TestReferencesHoldWithoutForeignKeys runs the conformance suites on
// stores whose schema declares no foreign key on the message path
// (migration 7) and then looks for every row whose parent is missing: a
// history row's chat and an outbox row's history row (invariant I1) hold
// by construction.
func TestReferencesHoldWithoutForeignKeys(t *testing.T) {
	t.Parallel()
	checked := func(t *testing.T, db *DB) *DB {
		ctx := context.Background()
		var fks []string
		rows, err := db.pool.Query(ctx, `SELECT conname FROM pg_constraint
			WHERE contype = 'f' AND conrelid IN ('history'::regclass, 'outbox_messages'::regclass) ORDER BY 1`)
		if err == nil {
			fks, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
		if err != nil || len(fks) != 0 {
			t.Fatalf("foreign keys on history and outbox: %v, %v; want none (migration 7)", fks, err)
		}
		t.Cleanup(func() { // before openDB's Close: cleanups run last first
			rows, err := db.pool.Query(ctx, `
				SELECT 'history', h.id FROM history AS h
				WHERE NOT EXISTS (SELECT 1 FROM chats AS c WHERE c.id = h.chat_id)
				UNION ALL
				SELECT 'outbox', o.id FROM outbox_messages AS o
				WHERE NOT EXISTS (SELECT 1 FROM history AS h WHERE h.id = o.history_id)`)
			if err != nil {
				t.Fatalf("orphans: %v", err)
			}
			defer rows.Close()
			for rows.Next() {
				var table string
				var id int64
				if err := rows.Scan(&table, &id); err != nil {
					t.Fatal(err)
				}
				t.Errorf("%s row %d refers to a missing parent", table, id)
			}
			if err := rows.Err(); err != nil {
				t.Fatal(err)
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

// newHarness appends through Commit: one group chat per recipient set,
// created on first use, and one message from the first recipient. Hold runs
// a real Commit in a goroutine and pauses it with its reads done (its
// transaction open when it read; an optimistic attempt, with the chat's
// members cached, has opened none yet), just before the round trip that
// takes the append lock, draws the ids and commits; commit lets it go on.
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
	draft := func(ctx context.Context, recipients []string) (history.Draft, error) {
		chatID, err := chatFor(ctx, recipients)
		return historytest.Draft(chatID, recipients[0], ulid.Make().String(), "body"), err
	}
	return outboxtest.Harness{
		Log: db,
		Append: func(ctx context.Context, recipients []string) ([]outbox.Row, error) {
			d, err := draft(ctx, recipients)
			if err != nil {
				return nil, err
			}
			return rowsOf(db.Commit(ctx, []history.Draft{d}))
		},
		Hold: func(ctx context.Context, recipients []string) (func(context.Context) ([]outbox.Row, error), error) {
			d, err := draft(ctx, recipients)
			if err != nil {
				return nil, err
			}
			p := pauseCommit(ctx, db, d, false)
			if err := p.wait(); err != nil {
				return nil, err
			}
			return func(ctx context.Context) ([]outbox.Row, error) {
				res, err := p.finish(ctx)
				return rowsOf(res, err)
			}, nil
		},
	}
}

// rowsOf turns the result of a one-draft Commit into outbox rows.
func rowsOf(res []history.Result, err error) ([]outbox.Row, error) {
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
}

// pausedCommit is a Commit running in a goroutine, stopped at a hook.
type pausedCommit struct {
	paused  chan struct{} // closed when the hook is reached
	release chan struct{} // closed to let the Commit go on
	done    chan struct{} // closed when the Commit returned
	res     []history.Result
	err     error
}

// pauseCommit starts a Commit of d that stops after its reads (before the
// append lock), or, with inLock, after its inserts with the lock held and
// before COMMIT.
func pauseCommit(ctx context.Context, db *DB, d history.Draft, inLock bool) *pausedCommit {
	p := &pausedCommit{paused: make(chan struct{}), release: make(chan struct{}), done: make(chan struct{})}
	var once sync.Once
	hook := func(ctx context.Context) {
		once.Do(func() {
			close(p.paused)
			select {
			case <-p.release:
			case <-ctx.Done():
			}
		})
	}
	hooks := &commitHooks{afterRead: hook}
	if inLock {
		hooks = &commitHooks{beforeCommit: hook}
	}
	go func() {
		defer close(p.done)
		p.res, p.err = db.commit(ctx, []history.Draft{d}, hooks)
	}()
	return p
}

// wait returns once the Commit is paused, or with an error when it ended
// without pausing.
func (p *pausedCommit) wait() error {
	select {
	case <-p.paused:
		return nil
	case <-p.done:
		if p.err != nil {
			return p.err
		}
		return errors.New("the commit finished without reaching its pause point")
	}
}

// finish lets the Commit go on and returns its outcome.
func (p *pausedCommit) finish(ctx context.Context) ([]history.Result, error) {
	close(p.release)
	select {
	case <-p.done:
		return p.res, p.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// rawConn opens a plain connection to the store's database for checks
// behind the store's back.
func rawConn(t testing.TB, db *DB) *pgx.Conn {
	t.Helper()
	conn, err := pgx.ConnectConfig(t.Context(), db.pool.Config().ConnConfig.Copy())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// advisoryWaiters counts the sessions waiting for the append lock in the
// store's database.
func advisoryWaiters(t testing.TB, conn *pgx.Conn) int {
	t.Helper()
	var n int
	err := conn.QueryRow(t.Context(), `SELECT count(*) FROM pg_locks
		WHERE locktype = 'advisory' AND NOT granted AND objsubid = 1
		  AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND classid::bigint = $1 AND objid::bigint = $2`,
		int64(uint64(AppendLockKey)>>32), int64(uint64(AppendLockKey)&0xffffffff)).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// until polls cond (a database observation: PostgreSQL does not announce
// lock waits) until it holds, failing the test after a minute.
func until(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(time.Minute)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-tick.C:
		case <-deadline:
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

func positions(res []history.Result) []int64 {
	var out []int64
	for _, r := range res {
		for _, d := range r.Deliveries {
			out = append(out, d.Pos)
		}
	}
	return out
}

// TestAppendLockOrdersCommits is the hazard the append lock closes, made
// deterministic: Commit A stops with its rows inserted (ids drawn) and not
// committed; Commit B must then wait for the lock, and take ids above A's,
// so a follower that scans while A is open and then goes on from its last
// position sees every row once. Without the lock B commits first with
// higher ids, the follower moves past them, and A's rows are skipped.
func TestAppendLockOrdersCommits(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := newDB(t)
	raw := rawConn(t, db)
	c := mustDirect(t, db, "alice", "bob")
	head0, err := db.Head(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}

	a := pauseCommit(ctx, db, historytest.Draft(c.ID, "alice", "a", "first"), true)
	if err := a.wait(); err != nil {
		t.Fatalf("Commit A: %v", err)
	}
	var bRes []history.Result
	var bErr error
	bDone := make(chan struct{})
	go func() {
		defer close(bDone)
		bRes, bErr = db.Commit(ctx, []history.Draft{historytest.Draft(c.ID, "bob", "b", "second")})
	}()
	bFirst := false
	until(t, "Commit B to wait for the append lock or to finish", func() bool {
		select {
		case <-bDone:
			bFirst = true
			return true
		default:
			return advisoryWaiters(t, raw) > 0
		}
	})
	if bFirst {
		t.Errorf("Commit B finished while Commit A held uncommitted positions: appends are not serialized")
	}
	// A follower scans while A is still open.
	seen := outboxtest.ScanAll(t, db, 0, head0, 100)
	last := head0
	if len(seen) > 0 {
		last = seen[len(seen)-1].Pos
	}
	aRes, err := a.finish(ctx)
	if err != nil {
		t.Fatalf("Commit A: %v", err)
	}
	<-bDone
	if bErr != nil {
		t.Fatalf("Commit B: %v", bErr)
	}
	seen = append(seen, outboxtest.ScanAll(t, db, 0, last, 100)...)

	aPos, bPos := positions(aRes), positions(bRes)
	if len(aPos) != 2 || len(bPos) != 2 {
		t.Fatalf("positions A %v, B %v; want two each", aPos, bPos)
	}
	if slices.Max(aPos) >= slices.Min(bPos) {
		t.Errorf("positions A %v, B %v: B waited for A, so its positions must be above A's", aPos, bPos)
	}
	var got []int64
	for _, r := range seen {
		got = append(got, r.Pos)
	}
	if want := append(slices.Clone(aPos), bPos...); !slices.Equal(got, want) {
		t.Errorf("follower saw positions %v, want %v (each once, in order)", got, want)
	}
	if aRes[0].Message.Seq >= bRes[0].Message.Seq {
		t.Errorf("history Seq A %d, B %d: Seq must follow commit order too", aRes[0].Message.Seq, bRes[0].Message.Seq)
	}
}

// TestHeadWaitsForAppendInFlight checks that Head never names a position
// whose transaction has not committed: with a Commit stopped inside the
// lock, Head waits, and answers the Commit's last position once it is
// committed.
func TestHeadWaitsForAppendInFlight(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := newDB(t)
	raw := rawConn(t, db)
	c := mustDirect(t, db, "alice", "bob")
	historytest.MustCommit(t, db, historytest.Draft(c.ID, "alice", "0", "committed"))
	before, err := db.Head(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}

	a := pauseCommit(ctx, db, historytest.Draft(c.ID, "alice", "1", "in flight"), true)
	if err := a.wait(); err != nil {
		t.Fatal(err)
	}
	var head int64
	var headErr error
	headDone := make(chan struct{})
	go func() {
		defer close(headDone)
		head, headErr = db.Head(ctx, 0)
	}()
	early := false
	until(t, "Head to wait for the append lock or to answer", func() bool {
		select {
		case <-headDone:
			early = true
			return true
		default:
			return advisoryWaiters(t, raw) > 0
		}
	})
	if early && headErr == nil && head > before {
		t.Errorf("Head answered %d while the rows above %d were not committed", head, before)
	}
	res, err := a.finish(ctx)
	if err != nil {
		t.Fatal(err)
	}
	<-headDone
	if headErr != nil {
		t.Fatalf("Head: %v", headErr)
	}
	if last := slices.Max(positions(res)); !early && head != last {
		t.Errorf("Head after the commit = %d, want its last position %d", head, last)
	}
	st, err := db.Stats(ctx, 0)
	if err != nil || st.Head != head || st.Depth != 4 {
		t.Errorf("Stats = %+v, %v; want head %d, depth 4", st, err, head)
	}
}

// TestHoldKeepsTransactionOpen checks that the harness's Hold really holds
// an open transaction while another Commit completes, and that the held
// rows get positions above the other's (they are drawn at commit).
func TestHoldKeepsTransactionOpen(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := newDB(t)
	raw := rawConn(t, db)
	h := newHarness(db)
	commitA, err := h.Hold(ctx, []string{"olga", "oscar"})
	if err != nil {
		t.Fatal(err)
	}
	var open int
	if err := raw.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
		WHERE datname = current_database() AND state = 'idle in transaction'`).Scan(&open); err != nil || open != 1 {
		t.Errorf("sessions idle in transaction while held = %d, %v; want 1", open, err)
	}
	rowsB, err := h.Append(ctx, []string{"olga", "otto"})
	if err != nil {
		t.Fatal(err)
	}
	rowsA, err := commitA(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rowsA[0].Pos <= rowsB[len(rowsB)-1].Pos {
		t.Errorf("held rows at %d.., appended rows up to %d: held rows must be drawn at commit", rowsA[0].Pos, rowsB[len(rowsB)-1].Pos)
	}
}

func mustDirect(t testing.TB, db *DB, a, b string) history.Chat {
	t.Helper()
	c, _, err := db.CreateDirect(t.Context(), a, b)
	if err != nil {
		t.Fatalf("CreateDirect: %v", err)
	}
	return c
}

func mustGroup(t testing.TB, db *DB, creator, title string, members ...string) history.Chat {
	t.Helper()
	c, err := db.CreateGroup(t.Context(), creator, title, members)
	if err != nil {
		t.Fatalf("CreateGroup: %v", err)
	}
	return c
}

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	ok := DefaultConfig("postgres://u@localhost:5432/db")
	for _, tc := range []struct {
		name  string
		edit  func(*Config)
		field string // "" when valid
	}{
		{"default", func(*Config) {}, ""},
		{"dsn", func(c *Config) { c.URL = "host=localhost user=u dbname=db" }, ""},
		{"zero timeout", func(c *Config) { c.ConnectTimeout = 0 }, ""},
		{"explicit conns", func(c *Config) { c.MaxConns = 7 }, ""},
		{"no url", func(c *Config) { c.URL = "" }, "Config.URL"},
		{"blank url", func(c *Config) { c.URL = "  " }, "Config.URL"},
		{"bad url", func(c *Config) { c.URL = "postgres://u:secret@host:notaport/db" }, "Config.URL"},
		{"negative conns", func(c *Config) { c.MaxConns = -1 }, "Config.MaxConns"},
		{"huge conns", func(c *Config) { c.MaxConns = MaxMaxConns + 1 }, "Config.MaxConns"},
		{"negative timeout", func(c *Config) { c.ConnectTimeout = -time.Second }, "Config.ConnectTimeout"},
		{"huge timeout", func(c *Config) { c.ConnectTimeout = time.Hour }, "Config.ConnectTimeout"},
	} {
		c := ok
		tc.edit(&c)
		got, pc, err := c.validate()
		switch {
		case tc.field == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.field != "" && (err == nil || !strings.Contains(err.Error(), tc.field)):
			t.Errorf("%s: err = %v, want one naming %s", tc.name, err, tc.field)
		case tc.field != "" && strings.Contains(err.Error(), "secret"):
			t.Errorf("%s: the error shows the password: %v", tc.name, err)
		case tc.field == "" && (got.MaxConns <= 0 || got.ConnectTimeout <= 0 || pc.MaxConns != got.MaxConns ||
			pc.ConnConfig.ConnectTimeout != got.ConnectTimeout || pc.ConnConfig.RuntimeParams["application_name"] != "tetra"):
			t.Errorf("%s: defaults not applied: %+v", tc.name, got)
		}
	}
	if _, err := Open(context.Background(), Config{}); err == nil || !strings.Contains(err.Error(), "Config.URL") {
		t.Errorf("Open(Config{}): err = %v, want one naming Config.URL", err)
	}
}

func TestOpenUnreachable(t *testing.T) {
	t.Parallel()
	// Nothing listens on port 1.
	cfg := DefaultConfig("postgres://tetra:s3cret-pw@127.0.0.1:1/chatdb?sslmode=disable")
	cfg.ConnectTimeout = 2 * time.Second
	_, err := Open(t.Context(), cfg)
	if !errors.Is(err, history.ErrUnavailable) {
		t.Fatalf("Open(unreachable): err = %v, want ErrUnavailable", err)
	}
	msg := err.Error()
	if !strings.Contains(msg, "tetra@127.0.0.1:1/chatdb") {
		t.Errorf("error %q does not name user, host, port and database", msg)
	}
	if strings.Contains(msg, "s3cret") {
		t.Errorf("error %q shows the password", msg)
	}
}

func TestMigrationsIdempotent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := testenv.Postgres(t)
	// Several processes starting at once on an empty database: one
	// migrates, the others wait for it and find nothing to do.
	dbs := make([]*DB, 3)
	errs := make([]error, len(dbs))
	var wg sync.WaitGroup
	for i := range dbs {
		wg.Go(func() { dbs[i], errs[i] = Open(ctx, DefaultConfig(url)) })
	}
	wg.Wait()
	for i, db := range dbs {
		if errs[i] != nil {
			t.Fatalf("concurrent Open #%d: %v", i, errs[i])
		}
		t.Cleanup(func() { db.Close() })
	}
	c := mustGroup(t, dbs[0], "alice", "kept")
	again := openDB(t, DefaultConfig(url))
	if got, err := again.Chat(ctx, c.ID); err != nil || got.Title != "kept" {
		t.Errorf("after reopening: Chat = %+v, %v", got, err)
	}
	sqlDB := stdlib.OpenDBFromPool(again.pool)
	defer sqlDB.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, sqlDB, migrations.Postgres())
	if err != nil {
		t.Fatalf("NewProvider: %v", err)
	}
	current, target, err := p.GetVersions(ctx)
	if err != nil {
		t.Fatalf("GetVersions: %v", err)
	}
	files, err := fs.Glob(migrations.Postgres(), "*.sql")
	if err != nil {
		t.Fatal(err)
	}
	// Files are numbered from 0001; the highest number is the latest
	// version (numbers may be missing while branches are merged).
	latest, _ := strconv.ParseInt(strings.SplitN(files[len(files)-1], "_", 2)[0], 10, 64)
	if current != target || target != latest {
		t.Errorf("schema version %d, latest %d, newest migration file %s; want all applied", current, target, files[len(files)-1])
	}
	if pending, err := p.HasPending(ctx); err != nil || pending {
		t.Errorf("HasPending = %v, %v; want false", pending, err)
	}
	var applied int
	if err := again.pool.QueryRow(ctx, `SELECT count(*) FROM goose_db_version WHERE version_id > 0`).Scan(&applied); err != nil || applied != len(files) {
		t.Errorf("goose_db_version holds %d applied migrations, %v; want %d (each once)", applied, err, len(files))
	}
}

func TestReopenKeepsDataAndPositions(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := testenv.Postgres(t)
	db, err := Open(ctx, DefaultConfig(url))
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
	if _, err := db.Commit(ctx, []history.Draft{historytest.Draft(g.ID, "alice", "x", "x")}); !errors.Is(err, history.ErrUnavailable) {
		t.Errorf("Commit after Close: err = %v, want ErrUnavailable", err)
	}
	if _, err := db.Scan(ctx, 0, 0, 10); !errors.Is(err, outbox.ErrUnavailable) {
		t.Errorf("Scan after Close: err = %v, want outbox.ErrUnavailable", err)
	}

	db = openDB(t, DefaultConfig(url))
	if got, err := db.Head(ctx, 0); err != nil || got != head {
		t.Errorf("Head after reopen = %d, %v; want %d", got, err, head)
	}
	if got, err := db.Chat(ctx, g.ID); err != nil || !slices.Equal(got.Members, g.Members) || !got.CreatedAt.Equal(g.CreatedAt) {
		t.Errorf("Chat after reopen = %+v, %v", got, err)
	}
	msgs, _, err := db.Page(ctx, g.ID, "", 10)
	if err != nil || len(msgs) != 2 || msgs[1].ID != res[1].Message.ID || !msgs[1].SentAt.Equal(res[1].Message.SentAt) {
		t.Errorf("Page after reopen = %+v, %v", msgs, err)
	}
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
	d := mustDirect(t, db, "alice", "bob")
	before := time.Now()
	res := historytest.MustCommit(t, db, historytest.Draft(d.ID, "alice", "1", "x"), historytest.Draft(d.ID, "bob", "2", "y"))
	after := time.Now()
	if got := positions(res); !slices.Equal(got, []int64{1, 2, 3, 4}) {
		t.Errorf("positions %v, want 1..4 on a fresh database", got)
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
		if m := res[i/2].Message; r.Message != m {
			t.Errorf("row %d carries %+v, want %+v", i, r.Message, m)
		}
	}
}

// TestCommitBigBatchOrder commits a batch of 36 messages to chats of
// different sizes and checks that Seq follows the batch order and that
// positions follow batch order, then member order.
func TestCommitBigBatchOrder(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	big := make([]string, 40)
	for i := range big {
		big[i] = fmt.Sprintf("m%02d", i)
	}
	chats := []history.Chat{
		mustDirect(t, db, "zed", "amy"),
		mustGroup(t, db, "m00", "big", big...),
		mustGroup(t, db, "solo", "alone"),
	}
	senders := []string{"zed", "m17", "solo"}
	var drafts []history.Draft
	for i := range 36 {
		drafts = append(drafts, historytest.Draft(chats[i%3].ID, senders[i%3], fmt.Sprint(i), fmt.Sprint(i)))
	}
	res := historytest.MustCommit(t, db, drafts...)
	var last int64
	var lastSeq int64
	for i, r := range res {
		if r.Message.Seq <= lastSeq {
			t.Errorf("result %d: Seq %d not above %d", i, r.Message.Seq, lastSeq)
		}
		lastSeq = r.Message.Seq
		if !slices.Equal(r.Members, chats[i%3].Members) || len(r.Deliveries) != len(r.Members) {
			t.Fatalf("result %d: members %v, %d deliveries", i, r.Members, len(r.Deliveries))
		}
		for j, d := range r.Deliveries {
			if d.Recipient != r.Members[j] || d.Pos <= last {
				t.Errorf("result %d delivery %d: %+v after position %d, want %s above it", i, j, d, last, r.Members[j])
			}
			last = d.Pos
		}
	}
}

// TestCommitRoundTrips counts what a Commit of 36 messages sends: with
// the member list cached, one pipelined batch (the optimistic attempt: no
// reads) and no single statements; with it not cached, two (the reads,
// then the write). A batch of duplicates loses the optimistic bet on the
// unique key, reads, and ends its transaction; the Commit after it reads
// first (readFirstAfterLoss).
func TestCommitRoundTrips(t *testing.T) {
	t.Parallel()
	tr := &countingTracer{}
	cfg := DefaultConfig(testenv.Postgres(t))
	cfg.MaxConns = 1 // one connection: statements are prepared once
	db, err := open(t.Context(), cfg, func(pc *pgxpool.Config) { pc.ConnConfig.Tracer = tr })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	c := mustDirect(t, db, "alice", "bob")
	batch := func(n int, prefix string) []history.Draft {
		var ds []history.Draft
		for i := range n {
			ds = append(ds, historytest.Draft(c.ID, "alice", fmt.Sprint(prefix, i), "x"))
		}
		return ds
	}
	tr.reset()
	historytest.MustCommit(t, db, batch(36, "cold-")...)
	if q, b := tr.counts(); q != 0 || b != 2 {
		t.Errorf("Commit of 36 messages, members not cached: %d statements and %d batches, want 0 and 2", q, b)
	}
	tr.reset()
	historytest.MustCommit(t, db, batch(36, "counted-")...)
	if q, b := tr.counts(); q != 0 || b != 1 {
		t.Errorf("Commit of 36 messages: %d statements and %d batches, want 0 and 1", q, b)
	}
	tr.reset()
	res := historytest.MustCommit(t, db, batch(36, "counted-")...) // all duplicates
	if q, b := tr.counts(); q != 2 || b != 2 {
		t.Errorf("Commit of 36 duplicates: %d statements and %d batches, want 2 (ROLLBACKs) and 2", q, b)
	}
	for i, r := range res {
		if !r.Duplicate {
			t.Fatalf("resend %d: %+v, want a duplicate", i, r)
		}
	}
	// The lost bet makes the next Commits read first.
	tr.reset()
	historytest.MustCommit(t, db, batch(36, "after-")...)
	if q, b := tr.counts(); q != 0 || b != 2 {
		t.Errorf("Commit of 36 messages after a lost bet: %d statements and %d batches, want 0 and 2", q, b)
	}
}

// countingTracer counts statements sent alone and batches.
type countingTracer struct {
	mu               sync.Mutex
	queries, batches int
}

func (c *countingTracer) reset() { c.mu.Lock(); c.queries, c.batches = 0, 0; c.mu.Unlock() }
func (c *countingTracer) counts() (int, int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.queries, c.batches
}
func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	c.queries++
	c.mu.Unlock()
	return ctx
}
func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *countingTracer) TraceBatchStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.mu.Lock()
	c.batches++
	c.mu.Unlock()
	return ctx
}
func (c *countingTracer) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *countingTracer) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

// TestCommitRetriesWhenMembersChange adds a member between a Commit's
// reads and its writes: the insert sees the epoch moved, writes nothing,
// and the Commit starts over with the new member list.
func TestCommitRetriesWhenMembersChange(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := newDB(t)
	g := mustGroup(t, db, "alice", "g", "bob")
	historytest.MustCommit(t, db, historytest.Draft(g.ID, "alice", "0", "warms the member cache"))
	added := false
	res, err := db.commit(ctx, []history.Draft{historytest.Draft(g.ID, "alice", "1", "x")}, &commitHooks{
		afterRead: func(ctx context.Context) {
			if !added {
				added = true
				if _, err := db.AddMember(ctx, g.ID, "bob", "carol"); err != nil {
					t.Errorf("AddMember: %v", err)
				}
			}
		},
	})
	if err != nil || res[0].Err != nil {
		t.Fatalf("Commit = %+v, %v", res, err)
	}
	var to []string
	for _, d := range res[0].Deliveries {
		to = append(to, d.Recipient)
	}
	if want := []string{"alice", "bob", "carol"}; !slices.Equal(to, want) || !slices.Equal(res[0].Members, want) {
		t.Errorf("deliveries to %v, members %v; want %v", to, res[0].Members, want)
	}
	if rows := outboxtest.ScanAll(t, db, 0, 0, 100); len(rows) != 2+3 {
		t.Errorf("outbox holds %d rows, want 5 (nothing from the abandoned attempt)", len(rows))
	}
}

// TestCommitRetriesWhenKeyTaken commits the same idempotency key from
// another Commit between a Commit's reads and its writes: the insert hits
// the unique key, and the retry answers with what the key now names: a
// Duplicate of the other's message when the chat and body are the same (a
// resend that raced its original), ErrInvalid when the body differs (a
// reused key, PROTOCOL.md §3). The rest of the batch commits either way.
func TestCommitRetriesWhenKeyTaken(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, theirs string
		dup          bool
	}{{"a resend", "mine", true}, {"another body", "theirs", false}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			db := newDB(t)
			c := mustDirect(t, db, "alice", "bob")
			var other []history.Result
			res, err := db.commit(ctx, []history.Draft{historytest.Draft(c.ID, "alice", "k", "mine"), historytest.Draft(c.ID, "alice", "k2", "also mine")},
				&commitHooks{afterRead: func(ctx context.Context) {
					if other == nil {
						other = historytest.MustCommit(t, db, historytest.Draft(c.ID, "alice", "k", tc.theirs))
					}
				}})
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tc.dup && (!res[0].Duplicate || res[0].Message.ID != other[0].Message.ID || !res[0].Message.SentAt.Equal(other[0].Message.SentAt)):
				t.Errorf("result = %+v, want a duplicate of %+v", res[0], other[0].Message)
			case !tc.dup && (!errors.Is(res[0].Err, history.ErrInvalid) || res[0].Duplicate):
				t.Errorf("result = %+v, want ErrInvalid", res[0])
			}
			if res[1].Duplicate || res[1].Err != nil || len(res[1].Deliveries) != 2 {
				t.Errorf("second draft = %+v, want committed", res[1])
			}
			if got := historytest.PageAll(t, db, c.ID, "", 10); len(got) != 2 || got[0].Body != tc.theirs {
				t.Errorf("history = %+v, want the other's message and the second draft", got)
			}
		})
	}
}

func TestCommitFailureRollsBackBatch(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := newDB(t)
	raw := rawConn(t, db)
	g := mustGroup(t, db, "alice", "g", "bob")
	first := historytest.MustCommit(t, db, historytest.Draft(g.ID, "alice", "0", "kept"))

	// Break the outbox insert: the history insert of the same statement
	// must not survive.
	if _, err := raw.Exec(ctx, `ALTER TABLE outbox_messages RENAME TO outbox_away`); err != nil {
		t.Fatal(err)
	}
	_, err := db.Commit(ctx, []history.Draft{historytest.Draft(g.ID, "alice", "1", "lost")})
	if !errors.Is(err, history.ErrUnavailable) {
		t.Errorf("Commit with a broken outbox: err = %v, want ErrUnavailable", err)
	}
	if _, err := db.Scan(ctx, 0, 0, 10); !errors.Is(err, outbox.ErrUnavailable) {
		t.Errorf("Scan with a broken outbox: err = %v, want outbox.ErrUnavailable", err)
	}
	if _, err := raw.Exec(ctx, `ALTER TABLE outbox_away RENAME TO outbox_messages`); err != nil {
		t.Fatal(err)
	}
	msgs, _, err := db.Page(ctx, g.ID, "", 10)
	if err != nil || len(msgs) != 1 || msgs[0].ID != first[0].Message.ID {
		t.Errorf("history after a failed batch = %+v, %v; want only the first message", msgs, err)
	}
	r := historytest.MustCommit(t, db, historytest.Draft(g.ID, "alice", "1", "retried"))[0]
	if r.Duplicate || len(r.Deliveries) != 2 {
		t.Errorf("retry = %+v, want a fresh commit with 2 deliveries", r)
	}

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := db.Commit(canceled, []history.Draft{historytest.Draft(g.ID, "alice", "2", "x")}); !errors.Is(err, history.ErrUnavailable) {
		t.Errorf("Commit with a canceled context: err = %v, want ErrUnavailable", err)
	}
	if _, err := db.Head(canceled, 0); !errors.Is(err, outbox.ErrUnavailable) {
		t.Errorf("Head with a canceled context: err = %v, want outbox.ErrUnavailable", err)
	}
	// The pool recovered: nothing is left in a transaction.
	if err := db.Ping(ctx); err != nil {
		t.Errorf("Ping: %v", err)
	}
	historytest.MustCommit(t, db, historytest.Draft(g.ID, "alice", "3", "after"))
}

// TestTwoHandlesOneDatabase runs two stores (two processes) on one
// database: concurrent CreateDirect calls agree on one chat, and
// concurrent Commits through both, followed by a scanning follower, leave
// no position skipped or repeated.
func TestTwoHandlesOneDatabase(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := testenv.Postgres(t)
	a := openDB(t, DefaultConfig(url))
	b := openDB(t, DefaultConfig(url))

	var wg sync.WaitGroup
	chats := make([]history.Chat, 8)
	created := make([]bool, 8)
	for i := range chats {
		db := a
		if i%2 == 1 {
			db = b
		}
		wg.Go(func() {
			c, cr, err := db.CreateDirect(ctx, "alice", "bob")
			if err != nil {
				t.Errorf("CreateDirect: %v", err)
			}
			chats[i], created[i] = c, cr
		})
	}
	wg.Wait()
	n := 0
	for i, c := range chats {
		if c.ID != chats[0].ID {
			t.Fatalf("two handles created different direct chats %s and %s", c.ID, chats[0].ID)
		}
		if created[i] {
			n++
		}
	}
	if n != 1 {
		t.Errorf("%d CreateDirect calls report created, want 1", n)
	}
	chat := chats[0].ID

	var mu sync.Mutex
	var committed []int64
	done := make(chan struct{})
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
				committed = append(committed, positions(res)...)
				mu.Unlock()
			}
		})
	}
	go func() { wg.Wait(); close(done) }()
	// A follower on the second handle scans forward while they commit.
	var seen []int64
	last := int64(0)
	finished := false
	for {
		rows, err := b.Scan(ctx, 0, last, 16)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rows {
			seen = append(seen, r.Pos)
			last = r.Pos
		}
		if len(rows) > 0 {
			continue
		}
		if finished {
			break
		}
		select {
		case <-done:
			finished = true
		case <-time.After(time.Millisecond):
		}
	}
	slices.Sort(committed)
	if len(committed) != 400 || !slices.Equal(seen, committed) {
		t.Errorf("follower saw %d positions, %d committed; want the same 400", len(seen), len(committed))
	}
}

// TestMemberCacheSeesOtherProcesses checks that a member added through
// another handle (another process) gets outbox rows from this handle's next
// commit, although this handle cached the member list.
func TestMemberCacheSeesOtherProcesses(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url := testenv.Postgres(t)
	a := openDB(t, DefaultConfig(url))
	b := openDB(t, DefaultConfig(url))
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
	if r := historytest.MustCommit(t, a, historytest.Draft(g.ID, "carol", "3", "z"))[0]; r.Err != nil {
		t.Errorf("carol's send: %v", r.Err)
	}
}

// TestTextPostgresCannotStore checks the strings PostgreSQL text cannot
// hold (NUL, invalid UTF-8): rule violations (the shared rule, checked for
// both stores by historytest's TextRules) or lookups that find nothing,
// never a failed batch.
func TestTextPostgresCannotStore(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := newDB(t)
	c := mustDirect(t, db, "alice", "bob")
	nulBody := historytest.Draft(c.ID, "alice", "1", "a\x00b")
	badDevice := historytest.Draft(c.ID, "alice", "2", "x")
	badDevice.SenderDevice = "\xff"
	nulChat := historytest.Draft("c\x00", "alice", "3", "x")
	ok := historytest.Draft(c.ID, "alice", "4", "fine")
	res, err := db.Commit(ctx, []history.Draft{nulBody, badDevice, nulChat, ok})
	if err != nil {
		t.Fatalf("Commit: %v", err)
	}
	for i, want := range []error{history.ErrInvalid, history.ErrInvalid, history.ErrInvalid, nil} {
		if !errors.Is(res[i].Err, want) || (want == nil && res[i].Err != nil) {
			t.Errorf("draft %d: err = %v, want %v", i, res[i].Err, want)
		}
	}
	if _, err := db.Chat(ctx, "c\x00"); !errors.Is(err, history.ErrNotFound) {
		t.Errorf("Chat(NUL): err = %v, want ErrNotFound", err)
	}
	if _, _, err := db.Page(ctx, "c\xff", "", 10); !errors.Is(err, history.ErrNotFound) {
		t.Errorf("Page(invalid UTF-8 chat): err = %v, want ErrNotFound", err)
	}
	if msgs, _, err := db.Page(ctx, c.ID, "m\x00", 10); err != nil || len(msgs) != 1 {
		t.Errorf("Page(since NUL) = %d messages, %v; want the whole chat", len(msgs), err)
	}
	if _, err := db.AddMember(ctx, "g\x00", "alice", "bob"); !errors.Is(err, history.ErrNotFound) {
		t.Errorf("AddMember(NUL chat): err = %v, want ErrNotFound", err)
	}
	if _, err := db.CreateGroup(ctx, "alice", "t\x00", nil); !errors.Is(err, history.ErrInvalid) {
		t.Errorf("CreateGroup(NUL title): err = %v, want ErrInvalid", err)
	}
	if err := db.SaveReads(ctx, []history.Read{{ChatID: c.ID, UserID: "bob", MessageID: "m\x00", At: time.Now()}}); !errors.Is(err, history.ErrInvalid) {
		t.Errorf("SaveReads(NUL): err = %v, want ErrInvalid", err)
	}
}

func TestGroupLimits(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := newDB(t)
	members := make([]string, MaxGroupMembers-2)
	for i := range members {
		members[i] = fmt.Sprintf("m%04d", i)
	}
	g, err := db.CreateGroup(ctx, "boss", "big", members)
	if err != nil || len(g.Members) != MaxGroupMembers-1 {
		t.Fatalf("CreateGroup = %d members, %v", len(g.Members), err)
	}
	// Two concurrent additions to a group one short of the limit: exactly
	// one succeeds.
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Go(func() { _, errs[i] = db.AddMember(ctx, g.ID, "boss", fmt.Sprintf("late%d", i)) })
	}
	wg.Wait()
	if (errs[0] == nil) == (errs[1] == nil) || !errors.Is(errors.Join(errs...), history.ErrInvalid) {
		t.Errorf("concurrent AddMember at the limit: %v; want one success and one ErrInvalid", errs)
	}
	if c, err := db.Chat(ctx, g.ID); err != nil || len(c.Members) != MaxGroupMembers {
		t.Errorf("group has %d members, %v; want %d", len(c.Members), err, MaxGroupMembers)
	}
	if _, err := db.CreateGroup(ctx, "boss3", "too big", append(slices.Clone(members), "x", "y")); !errors.Is(err, history.ErrInvalid) {
		t.Errorf("CreateGroup beyond the limit: err = %v, want ErrInvalid", err)
	}
	// Ids sort by bytes, as Go sorts, whatever the database collation.
	mixed := mustGroup(t, db, "bob", "mixed", "Zed", "alice", "_x", "Émile")
	want := []string{"Zed", "_x", "alice", "bob", "Émile"}
	if got, err := db.Chat(ctx, mixed.ID); err != nil || !slices.Equal(got.Members, want) || !slices.Equal(mixed.Members, want) {
		t.Errorf("members = %v (created %v), %v; want byte order %v", got.Members, mixed.Members, err, want)
	}
	if d := mustDirect(t, db, "bob", "Bob"); !slices.Equal(d.Members, []string{"Bob", "bob"}) {
		t.Errorf("direct members = %v, want [Bob bob]", d.Members)
	}
}

// TestQueryPlans pins the access paths that keep the outbox linear and
// paging keyed, on tables with enough rows (8,000 messages in 200 chats) for
// the planner to care.
func TestQueryPlans(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := newDB(t)
	chats := make([]history.Chat, 200)
	for i := range chats {
		chats[i] = mustDirect(t, db, fmt.Sprint("u", i), fmt.Sprint("v", i))
	}
	for b := range 40 {
		var drafts []history.Draft
		for i, c := range chats {
			drafts = append(drafts, historytest.Draft(c.ID, fmt.Sprint("u", i), fmt.Sprint(b), "x"))
		}
		historytest.MustCommit(t, db, drafts...)
	}
	c := chats[7]
	if _, err := db.pool.Exec(ctx, `ANALYZE`); err != nil {
		t.Fatal(err)
	}
	plan := func(query string, args ...any) string {
		t.Helper()
		rows, err := db.pool.Query(ctx, "EXPLAIN "+query, args...)
		if err != nil {
			t.Fatal(err)
		}
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(lines, "\n")
	}
	scan := plan(scanQuery, int64(1000), int64(100))
	if !strings.Contains(scan, "Index Scan using outbox_messages_pkey") || !strings.Contains(scan, "history_pkey") ||
		strings.Contains(scan, "Seq Scan on outbox_messages") || strings.Contains(scan, "Seq Scan on history") || strings.Contains(scan, "Sort") {
		t.Errorf("Scan plan is not a range of outbox_messages_pkey joined by key to history:\n%s", scan)
	}
	page := plan(pageQuery, c.ID, "nope", int64(10))
	// On small chats the planner may sort a bitmap scan of the range; the
	// range itself must come from history_unread (chat_id, id) INCLUDE (sender_id).
	if !(strings.Contains(page, "on history_unread") || strings.Contains(page, "using history_unread")) || !strings.Contains(page, "Index Cond: ((chat_id = ") ||
		!strings.Contains(page, "AND (id > ") || strings.Contains(page, "Seq Scan") {
		t.Errorf("Page plan does not range over history_unread (chat_id, id):\n%s", page)
	}
}
