package postgres

import (
	"context"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/history/historytest"
)

// The feed is what a Kafka relay follows, in Kafka mode, where the store
// writes history only.
func TestFeedConformance(t *testing.T) {
	t.Parallel()
	historytest.RunFeed(t, func(t *testing.T) historytest.FeedStore {
		return newDB(t, func(c *Config) { c.Outbox = false })
	})
}

// TestFeedSkipsNothingBehindAnOpenCommit holds a history-only Commit (A)
// inside the append lock, its history row inserted and its id drawn but not
// committed, while a second Commit (B) runs: B must wait for the lock, so
// it cannot draw a higher id and become visible first. A follower reading
// forward while A is open sees neither, then sees A before B.
func TestFeedSkipsNothingBehindAnOpenCommit(t *testing.T) {
	t.Parallel()
	db := newDB(t, func(c *Config) { c.Outbox = false })
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	g, err := db.CreateGroup(ctx, "fa", "g", []string{"fb"})
	if err != nil {
		t.Fatal(err)
	}
	a := pauseCommit(ctx, db, historytest.Draft(g.ID, "fa", ulid.Make().String(), "A"), true)
	if err := a.wait(); err != nil {
		t.Fatalf("commit A: %v", err)
	}
	type outcome struct {
		res []history.Result
		err error
	}
	doneB := make(chan outcome, 1)
	go func() {
		res, err := db.Commit(ctx, []history.Draft{historytest.Draft(g.ID, "fb", ulid.Make().String(), "B")})
		doneB <- outcome{res, err}
	}()
	select {
	case o := <-doneB:
		t.Fatalf("commit B finished (%v) while A held the append lock", o.err)
	case <-time.After(200 * time.Millisecond):
	}
	if got, err := db.HistoryAfter(ctx, 0, 10); err != nil || len(got) != 0 {
		t.Fatalf("while A is open: feed = %d messages, %v; want none", len(got), err)
	}
	resA, err := a.finish(ctx)
	if err != nil || resA[0].Err != nil {
		t.Fatalf("commit A: %v %v", err, resA)
	}
	ob := <-doneB
	if ob.err != nil || ob.res[0].Err != nil {
		t.Fatalf("commit B: %v %v", ob.err, ob.res)
	}
	if sa, sb := resA[0].Message.Seq, ob.res[0].Message.Seq; sb <= sa {
		t.Fatalf("B committed after A but got Seq %d, not above A's %d", sb, sa)
	}
	all := historytest.FeedAll(t, db, 0, 10)
	if len(all) != 2 || all[0].Message.Body != "A" || all[1].Message.Body != "B" {
		t.Fatalf("feed = %+v, want A then B", all)
	}
}
