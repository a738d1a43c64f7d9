package postgres

// Commit across processes, resends and concurrent keys, on the optimistic
// attempt (commitRun.optimistic) and the reading one.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/history/historytest"
)

// storePair opens two stores ("processes") on one database.
func storePair(t *testing.T, edit ...func(*Config)) (*DB, *DB) {
	a := newDB(t, edit...)
	b := openDB(t, a.cfg)
	return a, b
}

func recipients(r history.Result) []string {
	var to []string
	for _, d := range r.Deliveries {
		to = append(to, d.Recipient)
	}
	return to
}

func TestCommitSeesMemberChangesOfAnotherProcess(t *testing.T) {
	t.Parallel()
	a, b := storePair(t)
	g := mustGroup(t, a, "alice", "g", "bob")
	historytest.MustCommit(t, a, historytest.Draft(g.ID, "alice", "w", "warm")) // a caches [alice bob]
	if _, _, err := b.RemoveMember(t.Context(), g.ID, "alice", "bob"); err != nil {
		t.Fatal(err)
	}
	r := historytest.MustCommit(t, a, historytest.Draft(g.ID, "alice", "1", "x"))
	if to := recipients(r[0]); !slices.Equal(to, []string{"alice"}) {
		t.Errorf("after removal in b: delivered to %v", to)
	}
	// bob (removed) sends through a, whose cache is now at the new epoch
	res, err := a.Commit(t.Context(), []history.Draft{historytest.Draft(g.ID, "bob", "b1", "x")})
	if err != nil || !errors.Is(res[0].Err, history.ErrNotMember) {
		t.Errorf("removed bob sends: %+v, %v", res, err)
	}
	if _, err := b.AddMember(t.Context(), g.ID, "alice", "carol"); err != nil {
		t.Fatal(err)
	}
	r = historytest.MustCommit(t, a, historytest.Draft(g.ID, "alice", "2", "y"))
	if to := recipients(r[0]); !slices.Equal(to, []string{"alice", "carol"}) {
		t.Errorf("after add in b: delivered to %v", to)
	}
}

func TestCommitAnswersResendsAlike(t *testing.T) {
	t.Parallel()
	for _, outbox := range []bool{true, false} {
		t.Run(fmt.Sprint("outbox=", outbox), func(t *testing.T) {
			t.Parallel()
			db := newDB(t, func(c *Config) { c.Outbox = outbox; c.MaxConns = 1 })
			g := mustGroup(t, db, "alice", "g", "bob")
			h := mustGroup(t, db, "alice", "h", "bob")
			orig := historytest.MustCommit(t, db, historytest.Draft(g.ID, "alice", "k", "body"), historytest.Draft(h.ID, "alice", "w", "warm"))
			for round := 0; round < 3; round++ {
				res, err := db.Commit(t.Context(), []history.Draft{
					historytest.Draft(g.ID, "alice", fmt.Sprint("new", round), "n"),
					historytest.Draft(g.ID, "alice", "k", "body"),  // resend
					historytest.Draft(g.ID, "alice", "k", "other"), // other body
					historytest.Draft(h.ID, "alice", "k", "body"),  // other chat
				})
				if err != nil {
					t.Fatal(err)
				}
				if res[0].Err != nil || res[0].Duplicate {
					t.Errorf("new: %+v", res[0])
				}
				if !res[1].Duplicate || res[1].Message.ID != orig[0].Message.ID {
					t.Errorf("resend: %+v", res[1])
				}
				if !errors.Is(res[2].Err, history.ErrInvalid) || !errors.Is(res[3].Err, history.ErrInvalid) {
					t.Errorf("other body/chat: %+v / %+v", res[2], res[3])
				}
			}
			// the pool's single connection is clean after the failed batches
			var st string
			if err := db.pool.QueryRow(t.Context(), `SELECT current_setting('transaction_isolation')`).Scan(&st); err != nil {
				t.Fatal(err)
			}
			if n := len(historytest.PageAll(t, db, g.ID, "", 100)); n != 4 {
				t.Errorf("history of g: %d messages, want 4", n)
			}
			// removed sender resends: still the original
			if _, _, err := db.RemoveMember(t.Context(), g.ID, "alice", "alice"); err != nil {
				t.Fatal(err)
			}
			res, err := db.Commit(t.Context(), []history.Draft{historytest.Draft(g.ID, "alice", "k", "body")})
			if err != nil || !res[0].Duplicate {
				t.Errorf("resend after leaving: %+v, %v", res, err)
			}
		})
	}
}

// Concurrent sends of the same keys through two processes: one row per key,
// every answer the same message.
func TestCommitConcurrentKeysStoreOneRow(t *testing.T) {
	t.Parallel()
	a, b := storePair(t)
	g := mustGroup(t, a, "alice", "g", "bob")
	historytest.MustCommit(t, a, historytest.Draft(g.ID, "alice", "wa", "warm"))
	historytest.MustCommit(t, b, historytest.Draft(g.ID, "alice", "wb", "warm"))
	const keys, workers = 40, 8
	var mu sync.Mutex
	got := map[string]map[string]bool{}
	var wg sync.WaitGroup
	for w := range workers {
		db := a
		if w%2 == 1 {
			db = b
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range keys {
				var ds []history.Draft
				for j := 0; j < 3; j++ {
					ds = append(ds, historytest.Draft(g.ID, "alice", fmt.Sprint("c", (k+j)%keys), "same"))
				}
				res, err := db.Commit(context.Background(), ds)
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for i, r := range res {
					if r.Err != nil {
						t.Errorf("%v", r.Err)
						continue
					}
					c := ds[i].CorrelationID
					if got[c] == nil {
						got[c] = map[string]bool{}
					}
					got[c][r.Message.ID] = true
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	for c, ids := range got {
		if len(ids) != 1 {
			t.Errorf("key %s answered with %d message ids", c, len(ids))
		}
	}
	if n := len(historytest.PageAll(t, a, g.ID, "", 500)); n != keys+2 {
		t.Errorf("history: %d, want %d", n, keys+2)
	}
}
