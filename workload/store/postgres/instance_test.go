package postgres

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/history/historytest"
	"github.com/tetra-messenger/tetra/workload/outbox"
)

// TestInstanceLockKeptAcrossEndedSession: PostgreSQL ends the session
// holding a process's instance lock while the process lives on, and a
// process of another namespace starts in that gap (its start-up checks
// pass: the lock is gone). The first process's keeper finds its session
// gone, takes its locks again and finds the other one; from then on
// neither process's DeleteBelow deletes anything (each would delete rows
// the other's clients have not acknowledged), until the newcomer stops.
// A newcomer is refused at start by its second look; one that skips it
// (as when the first process's keeper is late) runs into the guard.
// Without the guard in DeleteBelow the newcomer deletes every row. Both
// modes: a shared index met by one of another namespace, and an
// in-process index met by another in-process one (which takes the
// instance lock exclusively, so the first sees ErrInstanceLocked and
// holds only the presence lock).
func TestInstanceLockKeptAcrossEndedSession(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		aExclusive bool // the first process's index is in process
		bExclusive bool // the newcomer's
		conflict   error
	}{
		{"shared then shared", false, false, ErrOtherNamespace},
		{"in-process then in-process", true, true, ErrInstanceLocked},
		{"in-process then shared", true, false, ErrInstanceLocked},
		{"shared then in-process", false, true, ErrInstanceLocked},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			testInstanceLockKept(t, tc.aExclusive, tc.bExclusive, tc.conflict)
		})
	}
}

func testInstanceLockKept(t *testing.T, exclusive, bExclusive bool, conflict error) {
	ctx := t.Context()
	a := newDB(t)
	var mu sync.Mutex
	var states []error
	changed := make(chan struct{}, 16)
	a.settleOff = true // only the newcomer's start is under test
	relA, err := a.LockInstance(ctx, exclusive, "ns-a:", "fleet-a", func(s error) {
		mu.Lock()
		states = append(states, s)
		mu.Unlock()
		changed <- struct{}{}
	})
	if err != nil {
		t.Fatal(err)
	}
	defer relA()
	waitState := func(want error) {
		t.Helper()
		deadline := time.After(10 * InstanceKeepEvery)
		for {
			mu.Lock()
			got := len(states) > 0 && (errors.Is(states[len(states)-1], want) || (want == nil && states[len(states)-1] == nil))
			mu.Unlock()
			if got {
				return
			}
			select {
			case <-changed:
			case <-deadline:
				mu.Lock()
				defer mu.Unlock()
				t.Fatalf("instance lock states %v; want %v last", states, want)
			}
		}
	}
	d := mustDirect(t, a, "alice", "bob")
	res := historytest.MustCommit(t, a, historytest.Draft(d.ID, "alice", "1", "x"), historytest.Draft(d.ID, "alice", "2", "y"))
	first := res[0].Deliveries[0].Pos
	if n, err := a.DeleteBelow(ctx, 0, first+1); err != nil || n != 1 {
		t.Fatalf("DeleteBelow holding the lock = %d, %v; want 1", n, err)
	}

	// The database ends the lock's session; a process of another
	// namespace starts before the keeper notices.
	if _, err := a.pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, a.inst.Load().pid.Load()); err != nil {
		t.Fatal(err)
	}
	b := openDB(t, a.cfg)
	if rel, err := b.LockInstance(ctx, bExclusive, "ns-b:", "fleet-b", nil); !isConflict(err) {
		if err == nil {
			rel()
		}
		t.Fatalf("the newcomer's LockInstance in the gap = %v; want a conflict (its second look sees the first process's locks, taken again)", err)
	}
	// A newcomer that started before the first process took its locks
	// again (its second look skipped, as when the keeper is late):
	b.settleOff = true
	bConflict := make(chan error, 16)
	var relB func()
	for try := 0; ; try++ { // the gap is one keeper tick at most: end the session again until b lands in it
		if _, err := a.pool.Exec(ctx, `SELECT pg_terminate_backend($1)`, a.inst.Load().pid.Load()); err != nil {
			t.Fatal(err)
		}
		relB, err = b.LockInstance(ctx, bExclusive, "ns-b:", "fleet-b", func(s error) { bConflict <- s })
		if err == nil {
			break
		}
		if !isConflict(err) || try == 20 {
			t.Fatalf("the newcomer's LockInstance (no second look) in the gap = %v after %d tries; want it to pass", err, try+1)
		}
		time.Sleep(3 * InstanceKeepEvery) // a has its locks again
	}
	waitState(conflict)
	select {
	case s := <-bConflict:
		if !isConflict(s) {
			t.Errorf("the newcomer's first change of state: %v; want a conflict", s)
		}
	case <-time.After(10 * InstanceKeepEvery):
		t.Error("the newcomer never learnt of the conflict")
	}
	for name, db := range map[string]*DB{"the first process": a, "the newcomer": b} {
		if n, err := db.DeleteBelow(ctx, 0, 1<<40); !errors.Is(err, ErrLockLost) || !errors.Is(err, outbox.ErrUnavailable) || n != 0 {
			t.Errorf("%s's DeleteBelow during the conflict = %d, %v; want 0 and ErrLockLost", name, n, err)
		}
	}
	if st, err := a.Stats(ctx, 0); err != nil || st.Depth != 3 {
		t.Fatalf("outbox depth %d, %v; want the 3 rows left", st.Depth, err)
	}

	// The newcomer stops: the first process holds its locks alone again.
	relB()
	waitState(nil)
	if n, err := a.DeleteBelow(ctx, 0, 1<<40); err != nil || n != 3 {
		t.Errorf("DeleteBelow after the newcomer stopped = %d, %v; want 3", n, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(states) < 3 || !errors.Is(states[0], ErrLockLost) {
		t.Errorf("instance lock states %v; want ErrLockLost, %v, nil", states, conflict)
	}
}
