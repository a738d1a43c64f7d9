package postgres

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/history/historytest"
)

// TestRemoveMemberWaitsForACommitInFlight pauses a Commit after its insert
// (the epoch check passed with bob still a member), holding the append
// lock, and removes bob meanwhile. RemoveMember must not return before the
// Commit does: otherwise a message committed after the removal answered
// would carry an outbox row for bob (PROTOCOL.md §2). With the append lock
// in RemoveMember it waits, and the message is at or below its cutoff.
// (Without the lock, the removal returned during the pause and the message
// went to bob above the cutoff: this test failed.)
func TestRemoveMemberWaitsForACommitInFlight(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := newDB(t)
	g := mustGroup(t, db, "alice", "g", "bob")
	removed := make(chan int64, 1)
	returnedDuringPause := false
	res, err := db.commit(ctx, []history.Draft{historytest.Draft(g.ID, "alice", "1", "x")}, &commitHooks{
		beforeCommit: func(ctx context.Context) {
			go func() {
				_, cutoff, err := db.RemoveMember(context.Background(), g.ID, "alice", "bob")
				if err != nil {
					t.Errorf("RemoveMember: %v", err)
				}
				removed <- cutoff
			}()
			select {
			case <-removed:
				returnedDuringPause = true
			case <-time.After(500 * time.Millisecond):
			}
		},
	})
	if err != nil || res[0].Err != nil {
		t.Fatalf("Commit = %+v, %v", res, err)
	}
	if returnedDuringPause {
		t.Fatalf("RemoveMember returned while a Commit delivering to bob held the append lock: that message commits after the removal answered")
	}
	cutoff := <-removed
	if seq := res[0].Message.Seq; seq > cutoff {
		t.Errorf("message Seq %d above the removal's cutoff %d, yet committed with bob", seq, cutoff)
	}
}

// TestCommitAfterRemovalLeavesTheMemberOut removes bob between a Commit's
// reads (bob a member, in the cache) and its write: the write sees the
// epoch moved and the Commit starts over without bob.
func TestCommitAfterRemovalLeavesTheMemberOut(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := newDB(t)
	g := mustGroup(t, db, "alice", "g", "bob", "carol")
	historytest.MustCommit(t, db, historytest.Draft(g.ID, "alice", "0", "warms the member cache"))
	done := false
	var cutoff int64
	res, err := db.commit(ctx, []history.Draft{historytest.Draft(g.ID, "alice", "1", "x")}, &commitHooks{
		afterRead: func(ctx context.Context) {
			if !done {
				done = true
				var err error
				if _, cutoff, err = db.RemoveMember(ctx, g.ID, "alice", "bob"); err != nil {
					t.Errorf("RemoveMember: %v", err)
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
	if want := []string{"alice", "carol"}; !slices.Equal(to, want) || !slices.Equal(res[0].Members, want) {
		t.Errorf("deliveries to %v, members %v; want %v", to, res[0].Members, want)
	}
	if res[0].Message.Seq <= cutoff {
		t.Errorf("message Seq %d at or below the cutoff %d of a removal that came first", res[0].Message.Seq, cutoff)
	}
}

// TestUnreadPlan: the unread count of ChatsOf ranges over history_unread
// and reads sender_id, kind and deleted from the index (an index-only
// scan: no heap, no sequential scan).
func TestUnreadPlan(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := newDB(t)
	g := mustGroup(t, db, "alice", "g", "bob")
	historytest.MustCommit(t, db, historytest.Draft(g.ID, "bob", "1", "x"))
	// A table this small is cheaper to scan; the question is whether the
	// index serves the count when the table is not (the benchmark in
	// docs/benchmarks.md measures a large one).
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer txRollback(tx)
	if _, err := tx.Exec(ctx, `SET LOCAL enable_seqscan = off`); err != nil {
		t.Fatal(err)
	}
	rows, err := tx.Query(ctx, `EXPLAIN `+chatsOfQuery, "alice", int64(history.MaxUnread))
	if err != nil {
		t.Fatal(err)
	}
	var plan []string
	for rows.Next() {
		var line string
		if err := rows.Scan(&line); err != nil {
			t.Fatal(err)
		}
		plan = append(plan, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	text := strings.Join(plan, "\n")
	if !strings.Contains(text, "Index Only Scan using history_unread") || strings.Contains(text, "Seq Scan on history") {
		t.Errorf("ChatsOf's unread count does not range over history_unread:\n%s", text)
	}
}
