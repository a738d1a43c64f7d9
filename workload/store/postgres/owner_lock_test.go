package postgres

import (
	"testing"
	"time"
)

// LockOwner: one session at a time holds an owner name's lock; another
// asking meanwhile gets taken = false after its wait, and gets it as soon
// as the holder's session ends (release, or the holder's death). Names in
// other namespaces are independent.
func TestLockOwner(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db := newDB(t)
	taken, release, err := db.LockOwner(ctx, "tetra:", "pod-1", time.Second)
	if err != nil || !taken {
		t.Fatalf("first LockOwner = %v, %v", taken, err)
	}
	if again, rel, err := db.LockOwner(ctx, "tetra:", "pod-1", 50*time.Millisecond); err != nil || again {
		t.Fatalf("LockOwner of a held name = %v, %v; want false", again, err)
	} else {
		rel() // a no-op
	}
	other, relOther, err := db.LockOwner(ctx, "other:", "pod-1", time.Second)
	if err != nil || !other {
		t.Fatalf("the same owner name in another namespace = %v, %v; want taken", other, err)
	}
	relOther()
	// The holder's session ends while a successor waits: it gets the lock.
	got := make(chan bool, 1)
	go func() {
		taken, rel, err := db.LockOwner(ctx, "tetra:", "pod-1", 30*time.Second)
		if err == nil && taken {
			defer rel()
		}
		got <- err == nil && taken
	}()
	release()
	if !<-got {
		t.Fatal("the successor did not get the lock after the holder's session ended")
	}
}
