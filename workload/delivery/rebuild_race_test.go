package delivery

import (
	"context"
	"sync"
	"testing"
)

// A GC pass that reads the index while another rebuild runs (a requested
// one, here; after a failover the operator requests one in every pod) sees
// the primed flag that rebuild's reset cleared. It must wait for that
// rebuild and find the index primed, not follow it with a second,
// cold-start rebuild (issue 24: after a SIGKILL of the Redis master one pod
// rebuilt a third time, reason cold-start, 28 ms after the requested
// rebuild, so a failover counted as a cold start). Deterministic: the
// requested rebuild is held right after its reset until the GC pass has
// read the unprimed state.
func TestGCDoesNotFollowARebuildWithAColdStart(t *testing.T) {
	r := newRig(t, nil)
	bob := newConn("bob", "phone")
	r.register(bob)
	r.commit(3)
	ctx := context.Background()
	r.e.PollOnce(ctx)
	before := r.e.Stats().Rebuilds

	resetDone, release, gcSawUnprimed := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var once, gcOnce sync.Once
	r.e.hooks.afterReset = func(reason string) {
		if reason != RebuildRequested {
			return
		}
		once.Do(func() {
			close(resetDone)
			<-release
		})
	}
	r.e.hooks.beforePrimingRebuild = func() { gcOnce.Do(func() { close(gcSawUnprimed) }) }

	var wg sync.WaitGroup
	var reqErr, gcErr error
	wg.Add(1)
	go func() { defer wg.Done(); reqErr = r.e.Rebuild(ctx, RebuildRequested) }()
	<-resetDone
	wg.Add(1)
	go func() { defer wg.Done(); _, gcErr = r.e.GCOnce(ctx) }()
	<-gcSawUnprimed // the GC pass read the flag the reset cleared
	close(release)
	wg.Wait()
	if reqErr != nil || gcErr != nil {
		t.Fatalf("requested rebuild: %v; GC pass: %v", reqErr, gcErr)
	}
	after := r.e.Stats().Rebuilds
	if got := after[RebuildRequested] - before[RebuildRequested]; got != 1 {
		t.Errorf("requested rebuilds: %d, want 1", got)
	}
	if got := after[RebuildColdStart] - before[RebuildColdStart]; got != 0 {
		t.Errorf("the GC pass followed the requested rebuild with %d cold-start rebuild(s), want 0", got)
	}
	// The index is primed and bob's rows are still pinned.
	st, err := r.idx.State(ctx)
	if err != nil || !st.Primed {
		t.Fatalf("index state after both: %+v, %v; want primed", st, err)
	}
	if d := r.depth(); d < 3 {
		t.Fatalf("outbox depth %d after the GC pass, want at least bob's 3 unacknowledged rows", d)
	}
}
