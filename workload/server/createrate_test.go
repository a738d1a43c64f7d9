package server

import (
	"testing"
	"time"
)

// TestCreateBudget: a user's bucket holds perMinute creations at once and
// refills at perMinute a minute; over it reserve says how long to wait,
// and a creation is allowed again after exactly that; a cancelled
// reservation gives its token back; users do not share a bucket; a lower
// setting applies at once.
func TestCreateBudget(t *testing.T) {
	var b createBudgets
	now := time.Unix(1700000000, 0)
	for i := range 3 {
		if _, _, ok := b.take("alice", 3, now); !ok {
			t.Fatalf("creation %d of 3 refused", i+1)
		}
	}
	if _, wait, ok := b.take("alice", 3, now); ok || wait != 20000 {
		t.Fatalf("the 4th at once: ok %v, wait %d ms; want refused, 20000 ms (3 a minute)", ok, wait)
	}
	if _, _, ok := b.take("bob", 3, now); !ok {
		t.Error("bob refused: users share a bucket")
	}
	if _, wait, ok := b.take("alice", 3, now.Add(19999*time.Millisecond)); ok || wait != 1 {
		t.Errorf("1 ms before the wait it named: ok %v, wait %d; want refused, 1 ms", ok, wait)
	}
	later := now.Add(20 * time.Second)
	giveBack, _, ok := b.take("alice", 3, later)
	if !ok {
		t.Fatal("refused after the wait it named")
	}
	giveBack()
	if _, _, ok := b.take("alice", 3, later); !ok {
		t.Error("a token given back is not there")
	}
	if _, _, ok := b.take("alice", 3, later); ok {
		t.Error("two creations from one token")
	}
	if _, wait, ok := b.take("carol", 1, now); !ok || wait != 0 {
		t.Fatalf("carol's first: %v, %d", ok, wait)
	}
	if _, wait, _ := b.take("carol", 1, now); wait != 60000 {
		t.Errorf("carol at 1 a minute: wait %d ms, want 60000", wait)
	}
	// A full bucket never holds more than perMinute, however long idle.
	for i := range 3 {
		if _, _, ok := b.take("dave", 3, now.Add(time.Hour)); !ok {
			t.Fatalf("dave's creation %d after an hour refused", i+1)
		}
	}
	if _, _, ok := b.take("dave", 3, now.Add(time.Hour)); ok {
		t.Error("an idle bucket holds more than a minute's worth")
	}
}

// TestCreateBudgetsForgetFullBuckets: past maxIdleBuckets users the full
// buckets are dropped (a new one is the same), the others kept.
func TestCreateBudgetsForgetFullBuckets(t *testing.T) {
	var b createBudgets
	now := time.Unix(1700000000, 0)
	b.take("busy", 1, now)
	for i := range maxIdleBuckets {
		giveBack, _, _ := b.take(string(rune('a'+i%26))+time.Duration(i).String(), 1, now)
		giveBack() // full again
	}
	if len(b.m) > maxIdleBuckets {
		t.Errorf("%d buckets kept, want at most %d", len(b.m), maxIdleBuckets)
	}
	if _, wait, _ := b.take("busy", 1, now); wait == 0 {
		t.Error("the empty bucket of busy was dropped with the full ones")
	}
}
