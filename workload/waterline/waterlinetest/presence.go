package waterlinetest

import (
	"context"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/waterline"
)

// RunUserPresence checks a waterline.UserPresence (PROTOCOL.md §7.4).
// newPair returns two handles on one fresh, empty record, as two processes
// of a fleet hold (the same handle twice for a record of one process).
// It waits about 1.5 s (a 400 ms grace, and a connection whose 300 ms ttl
// lapses).
func RunUserPresence(t *testing.T, newPair func(t *testing.T) (a, b waterline.UserPresence)) {
	t.Helper()
	ctx := context.Background()
	a, b := newPair(t)
	const grace = 400 * time.Millisecond
	must := func(ok bool, err error) bool {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	status := func(user string) waterline.PresenceStatus {
		t.Helper()
		m, err := b.Status(ctx, []string{user}, grace)
		if err != nil {
			t.Fatal(err)
		}
		return m[user]
	}
	if st := status("bob"); st.Online || !st.LastSeen.IsZero() {
		t.Fatalf("never seen: %+v", st)
	}
	if !must(a.Up(ctx, "bob", "c1", time.Minute)) {
		t.Error("first connection: not came online")
	}
	if must(b.Up(ctx, "bob", "c2", time.Minute)) {
		t.Error("second connection, on another process: came online again")
	}
	if must(a.Down(ctx, "bob", "c1")) {
		t.Error("closing one of two connections: reported as the last")
	}
	if !status("bob").Online {
		t.Error("bob with one connection left: offline")
	}
	if !must(b.Down(ctx, "bob", "c2")) {
		t.Error("closing the last connection: not reported as the last")
	}
	if !status("bob").Online {
		t.Error("inside the grace: offline")
	}
	if gone, _, err := a.Settle(ctx, "bob", grace); err != nil || gone {
		t.Errorf("Settle inside the grace = %v, %v", gone, err)
	}
	// A reconnect inside the grace changes nothing, on any process.
	if must(a.Up(ctx, "bob", "c3", time.Minute)) {
		t.Error("reconnect inside the grace: came online")
	}
	closed := time.Now()
	if !must(a.Down(ctx, "bob", "c3")) {
		t.Error("closing the reconnect: not the last")
	}
	time.Sleep(grace + 50*time.Millisecond)
	if st := status("bob"); st.Online {
		t.Errorf("past the grace, before Settle: %+v, want offline", st)
	}
	gone, seen, err := b.Settle(ctx, "bob", grace)
	if err != nil || !gone || seen.Before(closed.Add(-100*time.Millisecond)) || seen.After(closed.Add(100*time.Millisecond)) {
		t.Errorf("Settle past the grace = %v, %v, %v; want offline, last seen about %v", gone, seen, err, closed)
	}
	if gone, _, _ := a.Settle(ctx, "bob", grace); gone {
		t.Error("a second Settle went offline again")
	}
	if st := status("bob"); st.Online || st.LastSeen.IsZero() {
		t.Errorf("offline: %+v, want a lastSeen", st)
	}
	if !must(b.Up(ctx, "bob", "c4", time.Minute)) {
		t.Error("after going offline, a connection: not came online")
	}
	// A connection that is not refreshed stops counting (a crashed process).
	must(a.Up(ctx, "carol", "x1", 300*time.Millisecond))
	must(a.Up(ctx, "dave", "x2", 300*time.Millisecond))
	if err := a.Refresh(ctx, []waterline.PresenceConn{{User: "dave", ID: "x2"}}, time.Minute); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
	if status("carol").Online {
		t.Error("a connection past its ttl still counts")
	}
	if !status("dave").Online {
		t.Error("a refreshed connection stopped counting")
	}
}
