package historytest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/history"
)

// FeedStore is a store that also reads history forward for a relay.
type FeedStore interface {
	history.Store
	history.Feed
}

// RunFeed checks history.Feed: Seq order, the after/limit semantics, member
// lists, that rejected drafts and duplicates add nothing, and that a
// follower reading forward from its last Seq while many goroutines commit
// sees every committed message exactly once, in order. newStore returns a
// fresh, empty store per subtest; subtests run in parallel.
func RunFeed(t *testing.T, newStore func(t *testing.T) FeedStore) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(t *testing.T, s FeedStore)
	}{
		{"Empty", testFeedEmpty},
		{"OrderLimitMembers", testFeedOrder},
		{"MembersAddedLater", testFeedMembersAddedLater},
		{"ConcurrentCommitFollower", testFeedFollower},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, newStore(t))
		})
	}
}

// FeedAll reads the whole feed after seq in pages of limit and checks that
// Seq strictly increases.
func FeedAll(t testing.TB, f history.Feed, seq int64, limit int) []history.Committed {
	t.Helper()
	var all []history.Committed
	for {
		page, err := f.HistoryAfter(ctxFor(t), seq, limit)
		if err != nil {
			t.Fatalf("HistoryAfter(%d, %d): %v", seq, limit, err)
		}
		if len(page) > limit {
			t.Fatalf("HistoryAfter(limit %d) returned %d messages", limit, len(page))
		}
		if len(page) == 0 {
			return all
		}
		for _, c := range page {
			if c.Message.Seq <= seq {
				t.Fatalf("HistoryAfter(%d) returned Seq %d", seq, c.Message.Seq)
			}
			seq = c.Message.Seq
		}
		all = append(all, page...)
	}
}

func testFeedEmpty(t *testing.T, s FeedStore) {
	ctx := ctxFor(t)
	got, err := s.HistoryAfter(ctx, 0, 10)
	if err != nil || len(got) != 0 {
		t.Errorf("empty store: HistoryAfter = %d messages, %v", len(got), err)
	}
	if _, err := s.HistoryAfter(ctx, 0, 0); !errors.Is(err, history.ErrInvalid) {
		t.Errorf("HistoryAfter(limit 0) = %v, want ErrInvalid", err)
	}
}

func testFeedOrder(t *testing.T, s FeedStore) {
	g := mustGroup(t, s, "fa", "g", "fc", "fb")
	d := mustDirect(t, s, "fd", "fa")
	var want []history.Result
	want = append(want, MustCommit(t, s, Draft(g.ID, "fa", "k1", "one"), Draft(d.ID, "fd", "k2", "two"))...)
	// A duplicate and rule violations store nothing and add nothing.
	res := commit(t, s, Draft(g.ID, "fb", "k3", "three"), Draft(g.ID, "fa", "k1", "dup"),
		Draft(g.ID, "zz", "k4", "not a member"), Draft("no-such-chat", "fa", "k5", "x"))
	want = append(want, res[0])
	want = append(want, MustCommit(t, s, Draft(d.ID, "fa", "k6", "six"))...)

	all := FeedAll(t, s, 0, 100)
	if len(all) != len(want) {
		t.Fatalf("feed has %d messages, committed %d", len(all), len(want))
	}
	for i, c := range all {
		sameMessage(t, fmt.Sprintf("feed[%d]", i), c.Message, want[i].Message)
		if !slices.Equal(c.Members, want[i].Members) {
			t.Errorf("feed[%d].Members = %v, want %v", i, c.Members, want[i].Members)
		}
	}
	if !slices.Equal(all[0].Members, []string{"fa", "fb", "fc"}) {
		t.Errorf("group members = %v, want sorted [fa fb fc]", all[0].Members)
	}
	if by1 := FeedAll(t, s, 0, 1); len(by1) != len(all) {
		t.Errorf("paging by 1 read %d messages, by 100 read %d", len(by1), len(all))
	}
	// After a given Seq, and past the end.
	if rest := FeedAll(t, s, all[1].Message.Seq, 100); len(rest) != 2 || rest[0].Message.ID != all[2].Message.ID {
		t.Errorf("after the second: %d messages", len(rest))
	}
	if after := FeedAll(t, s, all[3].Message.Seq, 100); len(after) != 0 {
		t.Errorf("after the last: %d messages", len(after))
	}
}

// testFeedMembersAddedLater: a message lists the members it was committed
// to, however late the feed is read (PROTOCOL.md §7.6): not a member
// added after it, nor one removed before it and added again after it;
// still one removed after it.
func testFeedMembersAddedLater(t *testing.T, s FeedStore) {
	ctx := ctxFor(t)
	g := mustGroup(t, s, "ma", "g", "mb", "md")
	MustCommit(t, s, Draft(g.ID, "ma", "k1", "before"))
	if _, _, err := s.RemoveMember(ctx, g.ID, "ma", "mb"); err != nil {
		t.Fatalf("RemoveMember: %v", err)
	}
	MustCommit(t, s, Draft(g.ID, "ma", "k2", "while mb is away"))
	for _, u := range []string{"mb", "mc"} {
		if _, err := s.AddMember(ctx, g.ID, "ma", u); err != nil {
			t.Fatalf("AddMember %s: %v", u, err)
		}
	}
	if _, _, err := s.RemoveMember(ctx, g.ID, "ma", "md"); err != nil {
		t.Fatalf("RemoveMember: %v", err)
	}
	MustCommit(t, s, Draft(g.ID, "ma", "k3", "after"))
	all := FeedAll(t, s, 0, 10)
	want := [][]string{{"ma", "mb", "md"}, {"ma", "md"}, {"ma", "mb", "mc"}}
	if len(all) != len(want) {
		t.Fatalf("feed = %+v, want %d messages", all, len(want))
	}
	for i, c := range all {
		if !slices.Equal(c.Members, want[i]) {
			t.Errorf("message %d (%q): members %v, want %v (those it was committed to)", i+1, c.Message.Body, c.Members, want[i])
		}
	}
	// Read from the middle: the same lists.
	if rest := FeedAll(t, s, all[0].Message.Seq, 10); len(rest) != 2 || !slices.Equal(rest[0].Members, want[1]) || !slices.Equal(rest[1].Members, want[2]) {
		t.Errorf("feed after the first = %+v, want members %v and %v", rest, want[1], want[2])
	}
}

// testFeedFollower commits from many goroutines while a follower reads
// forward from its last Seq: it must see every committed message exactly
// once, in Seq order, and never a Seq at or below one it already saw.
func testFeedFollower(t *testing.T, s FeedStore) {
	ctx := ctxFor(t)
	const writers, perWriter = 6, 25
	chats := make([]history.Chat, writers)
	for w := range chats {
		chats[w] = mustGroup(t, s, fmt.Sprintf("w%d", w), "g", "reader")
	}
	var mu sync.Mutex
	committed := map[string]int64{}
	var wg sync.WaitGroup
	wctx, stop := context.WithCancel(ctx)
	defer func() { stop(); wg.Wait() }()
	for w := range writers {
		wg.Go(func() {
			for i := range perWriter {
				// Batches of one to three drafts.
				var ds []history.Draft
				for k := range 1 + i%3 {
					ds = append(ds, Draft(chats[w].ID, fmt.Sprintf("w%d", w), fmt.Sprintf("w%d-%d-%d", w, i, k), "b"))
				}
				res, err := s.Commit(wctx, ds)
				if err != nil {
					if wctx.Err() == nil {
						t.Errorf("Commit: %v", err)
					}
					return
				}
				mu.Lock()
				for _, r := range res {
					if r.Err == nil {
						committed[r.Message.ID] = r.Message.Seq
					}
				}
				mu.Unlock()
			}
		})
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()

	seen := map[string]int{}
	var last int64
	finished := false
	tick := time.NewTicker(time.Millisecond)
	defer tick.Stop()
	for {
		page, err := s.HistoryAfter(ctx, last, 7)
		if err != nil {
			t.Fatalf("follower: HistoryAfter(%d): %v", last, err)
		}
		for _, c := range page {
			if c.Message.Seq <= last {
				t.Fatalf("follower: Seq %d after %d", c.Message.Seq, last)
			}
			last = c.Message.Seq
			seen[c.Message.ID]++
		}
		if len(page) > 0 {
			continue
		}
		if finished {
			break
		}
		select {
		case <-done:
			finished = true
		case <-tick.C:
		case <-ctx.Done():
			t.Fatalf("follower: saw %d messages before the deadline", len(seen))
		}
	}
	if t.Failed() {
		return
	}
	if len(committed) < writers*perWriter {
		t.Fatalf("%d messages committed, want at least %d", len(committed), writers*perWriter)
	}
	for id := range committed {
		if n := seen[id]; n != 1 {
			t.Errorf("follower saw message %s (Seq %d) %d times, want once", id, committed[id], n)
		}
		delete(seen, id)
	}
	for id := range seen {
		t.Errorf("follower saw message %s that no Commit reported", id)
	}
}
