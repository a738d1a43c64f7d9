package redis_test

import (
	"context"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/waterline/redis"
)

// The fleet's presence: a user is online while any of its connections, on
// any process, was published and neither removed nor expired.
func TestPresence(t *testing.T) {
	a, cfg := newIndex(t)
	b, _ := newIndex(t, func(c *redis.Config) { c.Prefix, c.Owner = cfg.Prefix, "other-owner" })
	ctx := context.Background()
	pa, pb := a.Presence(), b.Presence()
	online := func(users ...string) map[string]bool {
		t.Helper()
		m, err := pa.Online(ctx, users)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	if m := online("alice", "bob"); m["alice"] || m["bob"] {
		t.Fatalf("online before any publish: %v", m)
	}
	if err := pa.Publish(ctx, []redis.PresenceConn{{User: "alice", ID: "c1"}}, nil, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := pb.Publish(ctx, []redis.PresenceConn{{User: "alice", ID: "c2"}, {User: "bob", ID: "c3"}}, nil, 300*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if m := online("alice", "bob", "carol"); !m["alice"] || !m["bob"] || m["carol"] {
		t.Fatalf("online %v, want alice and bob", m)
	}
	// alice's connection on the first process goes; her other one stays.
	if err := pa.Publish(ctx, nil, []redis.PresenceConn{{User: "alice", ID: "c1"}}, time.Minute); err != nil {
		t.Fatal(err)
	}
	if m := online("alice"); !m["alice"] {
		t.Fatalf("alice offline with a connection left on the other process")
	}
	// The second process stops refreshing (a crash): its connections
	// count until their TTL passes.
	time.Sleep(400 * time.Millisecond)
	if m := online("alice", "bob"); m["alice"] || m["bob"] {
		t.Fatalf("online %v after the TTL of a process that stopped refreshing", m)
	}
}
