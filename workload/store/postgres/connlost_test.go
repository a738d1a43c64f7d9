package postgres

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/history/historytest"
)

// TestCommitSurvivesEndedSessions ends the sessions of every pooled
// connection while they sit idle (pg_terminate_backend, as a restart or a
// failover does) and commits at once, before pgxpool's own ping (for a
// connection idle over a second) would notice: each Commit must succeed
// on a connection the pool replaced, storing each message once. Rounds 1
// (member lists not cached) and 3 commit on the reading attempt, the
// others on the optimistic one. The look at the socket (hasPending) is
// off, as when a session ends without a word reaching the client before
// its statement goes (a network that dropped the connection), so each
// commit meets a dead connection. It fails without the retry of
// DB.commit and DB.noteLost.
func TestCommitSurvivesEndedSessions(t *testing.T) {
	t.Parallel()
	db := newDB(t, func(c *Config) { c.MaxConns = 4 })
	db.peekOff = true
	ctx := t.Context()
	chat := mustDirect(t, db, "alice", "bob")
	raw := rawConn(t, db)
	var all []history.Draft
	var seqs []int64
	for round := 1; round <= 5; round++ {
		if round == 3 {
			db.readFirst.Store(1) // the next Commit reads first
		}
		fillPool(t, db, 4)
		endSessions(t, raw)
		d := historytest.Draft(chat.ID, "alice", fmt.Sprint("round-", round), "hello")
		res, err := db.Commit(ctx, []history.Draft{d})
		if err != nil {
			t.Fatalf("round %d: Commit after the pooled sessions ended: %v", round, err)
		}
		if res[0].Err != nil || res[0].Duplicate {
			t.Fatalf("round %d: %+v, want the message stored", round, res[0])
		}
		all = append(all, d)
		seqs = append(seqs, res[0].Message.Seq)
	}
	// Each message is in history once: a resend of all of them finds
	// every one, at its first Seq.
	res := historytest.MustCommit(t, db, all...)
	for i, r := range res {
		if !r.Duplicate || r.Message.Seq != seqs[i] {
			t.Errorf("resend %d: duplicate %v at %d, want a duplicate at %d", i, r.Duplicate, r.Message.Seq, seqs[i])
		}
	}
	// Round 1 met a dead connection (nothing pinged yet); later rounds
	// may be saved by the pings noteLost asked for.
	if st := db.SessionStats(); st.CommitRetries < 1 || st.CommitRetries > 5 || st.Ended != 0 {
		t.Errorf("SessionStats = %+v, want 1 to 5 commit retries and none found by the socket", st)
	}
}

// TestOperationsSeeEndedSessions ends every pooled session while the
// connections sit idle, as a restart or a failover does, before each of
// the store's operations, reads and writes: each must succeed at once,
// because the pool sees from the socket that the session ended (the FATAL
// the backend sent, or the closed socket: hasPending), pings the
// connection and replaces it before sending a statement on it, so nothing
// is tried twice. It fails with the look at the socket off (peekOff): the
// first operation then meets a dead session (FATAL 57P01) and is tried
// twice.
func TestOperationsSeeEndedSessions(t *testing.T) {
	t.Parallel()
	db := newDB(t, func(c *Config) { c.MaxConns = 4 })
	ops := storeOps(t, db, "seen")
	raw := rawConn(t, db)
	for _, op := range ops {
		fillPool(t, db, 4)
		endSessions(t, raw)
		if err := op.run(); err != nil {
			t.Errorf("%s right after the pooled sessions ended: %v", op.name, err)
		}
	}
	if st := db.SessionStats(); st.Ended < int64(len(ops)) || st.CommitRetries != 0 || st.ReadRetries != 0 {
		t.Errorf("SessionStats = %+v, want at least %d sessions found ended and nothing tried twice", st, len(ops))
	}
}

// TestReadsRetryEndedSessions: with the look at the socket off, as when a
// session ends while its connection is in use or before its FATAL reaches
// the client, a read (or a transaction's BEGIN) sent on a dead session
// fails with FATAL 57P01; it must be tried once more (again) and succeed.
// pingUntil is cleared before each, so each meets a dead connection. It
// fails without again's second try.
func TestReadsRetryEndedSessions(t *testing.T) {
	t.Parallel()
	db := newDB(t, func(c *Config) { c.MaxConns = 4 })
	db.peekOff = true
	raw := rawConn(t, db)
	n := 0
	for _, op := range storeOps(t, db, "retried") {
		if !op.read {
			continue
		}
		n++
		fillPool(t, db, 4)
		endSessions(t, raw)
		db.pingUntil.Store(0)
		if err := op.run(); err != nil {
			t.Errorf("%s right after the pooled sessions ended: %v", op.name, err)
		}
	}
	if st := db.SessionStats(); st.ReadRetries < 1 || st.ReadRetries > int64(n) || st.Ended != 0 {
		t.Errorf("SessionStats = %+v, want 1 to %d reads tried twice and no session seen by the socket", st, n)
	}
}

// storeOp is one operation of the store for the tests of ended sessions;
// read marks the ones again tries twice (reads, and writes whose only
// statement before their transaction is a BEGIN).
type storeOp struct {
	name string
	read bool
	run  func() error
}

// storeOps returns the operations, on data of their own (tag names it).
func storeOps(t *testing.T, db *DB, tag string) []storeOp {
	t.Helper()
	ctx := t.Context()
	chat := mustDirect(t, db, "alice-"+tag, "bob-"+tag)
	first := historytest.MustCommit(t, db, historytest.Draft(chat.ID, "alice-"+tag, "k0", "hello"))[0].Message
	group, err := db.CreateGroup(ctx, "alice-"+tag, "g", []string{"alice-" + tag, "bob-" + tag})
	if err != nil {
		t.Fatal(err)
	}
	return []storeOp{
		{"Chat", true, func() error { _, err := db.Chat(ctx, chat.ID); return err }},
		{"ChatsOf", true, func() error { _, err := db.ChatsOf(ctx, "alice-"+tag); return err }},
		{"IsMember", true, func() error { _, err := db.IsMember(ctx, chat.ID, "bob-"+tag); return err }},
		{"IsAdmin", true, func() error { _, err := db.IsAdmin(ctx, group.ID, "alice-"+tag); return err }},
		{"ReadMarks", true, func() error { _, err := db.ReadMarks(ctx, chat.ID); return err }},
		{"CoMembers", true, func() error { _, err := db.CoMembers(ctx, "alice-"+tag); return err }},
		{"Page", true, func() error { _, _, err := db.Page(ctx, chat.ID, "", 10); return err }},
		{"MessageSeq", true, func() error { _, _, err := db.MessageSeq(ctx, chat.ID, first.ID); return err }},
		{"Messages", true, func() error {
			_, _, err := db.Messages(ctx, history.PageQuery{ChatID: chat.ID, User: "alice-" + tag, Before: history.PageEnd, Limit: 10})
			return err
		}},
		{"HistoryAfter", true, func() error { _, err := db.HistoryAfter(ctx, 0, 10); return err }},
		{"HistoryHead", true, func() error { _, err := db.HistoryHead(ctx); return err }},
		{"Head", true, func() error { _, err := db.Head(ctx, 0); return err }},
		{"Scan", true, func() error { _, err := db.Scan(ctx, 0, 0, 10); return err }},
		{"Stats", true, func() error { _, err := db.Stats(ctx, 0); return err }},
		{"ID", true, func() error { _, err := db.ID(ctx); return err }},
		{"AddMember", true, func() error { _, err := db.AddMember(ctx, group.ID, "alice-"+tag, "carol-"+tag); return err }},
		{"SaveReads", false, func() error {
			return db.SaveReads(ctx, []history.Read{{ChatID: chat.ID, UserID: "bob-" + tag, MessageID: first.ID, Seq: first.Seq}})
		}},
		{"CreateDirect", false, func() error { _, _, err := db.CreateDirect(ctx, "carol-"+tag, "dave-"+tag); return err }},
		{"Commit", false, func() error {
			_, err := db.Commit(ctx, []history.Draft{historytest.Draft(chat.ID, "bob-"+tag, "k1", "hi")})
			return err
		}},
		{"DeleteBelow", false, func() error { _, err := db.DeleteBelow(ctx, 0, 1); return err }},
	}
}

// fillPool has the store's pool hold n open connections, idle.
func fillPool(t *testing.T, db *DB, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for range n {
		wg.Go(func() {
			_, err := db.pool.Exec(t.Context(), `SELECT pg_sleep(0.05)`)
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
}

// endSessions ends every other session of raw's database and waits until
// they are gone.
func endSessions(t *testing.T, raw *pgx.Conn) {
	t.Helper()
	const others = `FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`
	var ended int
	if err := raw.QueryRow(t.Context(), `SELECT count(pg_terminate_backend(pid)) `+others).Scan(&ended); err != nil {
		t.Fatal(err)
	}
	if ended == 0 {
		t.Fatal("no pooled session to end: the test would prove nothing")
	}
	until(t, "the ended sessions are gone", func() bool {
		var n int
		if err := raw.QueryRow(context.Background(), `SELECT count(*) `+others).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n == 0
	})
}

// TestCommitStoredWhenSessionEndsAfterCommit ends the session right after
// COMMIT has answered, in the same round trip (a statement queued after
// COMMIT terminates its own backend, so FATAL comes before the batch's
// final ReadyForQuery): the batch is stored, and Commit must report it
// stored as new messages (with their outbox deliveries), not fail it, nor
// report the originals as duplicates of themselves. It fails when the
// error that follows COMMIT is reported: the retry of DB.commit then
// answers the batch as duplicates of itself, with no deliveries.
func TestCommitStoredWhenSessionEndsAfterCommit(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := t.Context()
	chat := mustDirect(t, db, "alice", "bob")
	hooks := &commitHooks{afterCommit: `SELECT pg_terminate_backend(pg_backend_pid())`}
	for _, attempt := range []string{"reading", "optimistic"} {
		d := historytest.Draft(chat.ID, "alice", "after-commit-"+attempt, "hello")
		res, err := db.commit(ctx, []history.Draft{d}, hooks)
		if err != nil {
			t.Fatalf("%s attempt: Commit with the session ended after COMMIT: %v", attempt, err)
		}
		if r := res[0]; r.Err != nil || r.Duplicate || len(r.Deliveries) != 2 {
			t.Fatalf("%s attempt: %+v, want a new message with 2 deliveries", attempt, r)
		}
		again := historytest.MustCommit(t, db, d)
		if !again[0].Duplicate || again[0].Message.Seq != res[0].Message.Seq {
			t.Fatalf("%s attempt: the resend = %+v, want a duplicate of Seq %d", attempt, again[0], res[0].Message.Seq)
		}
	}
}

// TestPeekWaitsForNoReader: the look at an idle connection's socket
// (hasPending) returns at once while another goroutine is blocked reading
// the same socket, as pgx's background reader can be on an idle pooled
// connection (it starts when a write takes over 15 ms and may be left in
// one more read). A look that took the descriptor's read lock waited for
// that read to end, which only the next statement's reply ends: an
// Acquire hung (it did, once, under a loaded machine), and this test
// fails with it.
func TestPeekWaitsForNoReader(t *testing.T) {
	t.Parallel()
	db := newDB(t, func(c *Config) { c.MaxConns = 1 })
	conn, err := db.pool.Acquire(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	nc := conn.Conn().PgConn().Conn()
	reading := make(chan struct{})
	go func() {
		close(reading)
		var b [1]byte
		_, _ = nc.Read(b[:]) // blocks: an idle session sends nothing
	}()
	<-reading
	time.Sleep(50 * time.Millisecond) // let it block in read(2)
	done := make(chan bool, 1)
	go func() { done <- hasPending(conn.Conn()) }()
	select {
	case pending := <-done:
		if pending {
			t.Errorf("hasPending = true on a live idle session")
		}
	case <-time.After(2 * time.Second):
		t.Fatal("hasPending waited for another goroutine's read of the socket")
	}
	_ = conn.Conn().Close(context.Background()) // ends the blocked read; the pool discards the connection
}

// TestReadTxSurvivesSessionEndedInUse ends the session of a read-only
// transaction while it waits, after its BEGIN, for a lock another session
// holds on members (the peek cannot see a session in use): each of the
// reads that run in one (Messages, ChatFor, Sees, ChatList) must be tried
// whole once more and succeed. It fails when only their BEGIN is retried
// (a helper's runs: HTTP 503s from GET /api/chats and the newest page
// while sessions were ended every 0.2 s).
func TestReadTxSurvivesSessionEndedInUse(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := t.Context()
	chat := mustDirect(t, db, "alice", "bob")
	seq := historytest.MustCommit(t, db, historytest.Draft(chat.ID, "alice", "k0", "hello"))[0].Message.Seq
	raw := rawConn(t, db)
	reads := []struct {
		name string
		run  func() error
	}{
		{"Messages", func() error {
			_, _, err := db.Messages(ctx, history.PageQuery{ChatID: chat.ID, User: "alice", Before: history.PageEnd, Limit: 10})
			return err
		}},
		{"ChatFor", func() error { _, err := db.ChatFor(ctx, chat.ID, "alice"); return err }},
		{"Sees", func() error { _, err := db.Sees(ctx, chat.ID, "alice", seq); return err }},
		{"ChatList", func() error { _, _, err := db.ChatList(ctx, "alice", "", 10); return err }},
	}
	for i, r := range reads {
		lock, err := raw.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := lock.Exec(ctx, `LOCK TABLE members IN ACCESS EXCLUSIVE MODE`); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- r.run() }()
		var waiting int
		until(t, r.name+" waits for the lock", func() bool {
			err := lock.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE datname = current_database() AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()`).Scan(&waiting)
			if err != nil {
				t.Fatal(err)
			}
			return waiting > 0
		})
		if err := lock.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
		if err := <-done; err != nil {
			t.Errorf("%s with its session ended while it waited: %v", r.name, err)
		}
		if got := db.SessionStats().ReadRetries; got != int64(i+1) {
			t.Errorf("after %s: %d reads tried twice, want %d", r.name, got, i+1)
		}
	}
}
