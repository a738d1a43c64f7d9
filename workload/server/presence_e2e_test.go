package server_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/server"
)

func isPresence(user string, online bool) func(frame) bool {
	return func(f frame) bool {
		return f.Type == "presence" && f.UserID == user && f.Online != nil && *f.Online == online
	}
}

type presenceAnswer struct {
	Presence map[string]struct {
		Online   bool    `json:"online"`
		LastSeen *string `json:"lastSeen"`
	} `json:"presence"`
}

func (e *env) presenceOf(user, users string) presenceAnswer {
	e.t.Helper()
	status, raw := e.call("GET", "/api/presence?users="+users, e.token(user), nil)
	if status != http.StatusOK {
		e.t.Fatalf("GET /api/presence?users=%s as %s: %d %s", users, user, status, raw)
	}
	return decode[presenceAnswer](e.t, raw)
}

// Presence (PROTOCOL.md §7.4), on every backend, with the contract's 10 s:
// a user is online while it has a connection open; the users who share a
// chat with it get {"type":"presence","userId","online":true} when it
// comes online (not again for a second device), and {"online":false,
// "lastSeen"} 10 s after its last connection closed; a reconnect inside
// the window changes nothing; users who share no chat get nothing. GET
// /api/presence answers for users who share a chat with the caller and
// leaves the others out.
func TestE2EPresence(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		e.createDirect("alice", "bob")
		e.createGroup("carol", "elsewhere", "zed")
		e.createDirect("alice", "carol")
		alice, zed := e.dial("alice", dialOpts{}), e.dial("zed", dialOpts{})

		b1 := e.dial("bob", dialOpts{device: "b1"})
		f := alice.next("bob online", isPresence("bob", true))
		expectKeys(t, "presence frame", f.Raw, "type", "userId", "online")
		if p := e.presenceOf("alice", "bob,carol,zed,nobody"); len(p.Presence) != 2 || !p.Presence["bob"].Online ||
			p.Presence["carol"].Online || p.Presence["carol"].LastSeen != nil {
			t.Errorf("alice asks for bob,carol,zed,nobody: %+v, want bob online and carol offline (never seen), the others left out", p)
		}
		if p := e.presenceOf("zed", "bob,alice"); len(p.Presence) != 0 {
			t.Errorf("zed shares no chat with bob or alice, got %+v", p)
		}
		// Bad input: the documented error, nothing else.
		for _, q := range []string{"", "users=", "users=bob,", "users=" + strings.Repeat("u,", 500) + "u"} {
			if status, raw := e.call("GET", "/api/presence?"+q, e.token("alice"), nil); status != http.StatusBadRequest {
				t.Errorf("GET /api/presence?%.40s: %d %s, want 400", q, status, raw)
			}
		}
		if status, _ := e.call("GET", "/api/presence?users=bob", "", nil); status != http.StatusUnauthorized {
			t.Errorf("GET /api/presence without a token: %d, want 401", status)
		}
		b2 := e.dial("bob", dialOpts{device: "b2"})
		b1.close()
		b2.close()
		closed := time.Now()
		// A reconnect inside the window changes nothing.
		time.Sleep(3 * time.Second)
		if p := e.presenceOf("alice", "bob"); !p.Presence["bob"].Online {
			t.Errorf("bob 3 s after his last connection closed: %+v, want online", p)
		}
		b3 := e.dial("bob", dialOpts{device: "b1"})
		b3.close()
		closed = time.Now()
		f = alice.next("bob offline", isPresence("bob", false))
		if took := time.Since(closed); took < 9500*time.Millisecond || took > 13*time.Second {
			t.Errorf("bob went offline %v after his last connection closed, want 10 s", took)
		}
		expectKeys(t, "offline presence frame", f.Raw, "type", "userId", "online", "lastSeen")
		if seen := expectUTCTime(t, "lastSeen", f.LastSeen); seen.Before(closed.Add(-time.Second)) || seen.After(closed.Add(time.Second)) {
			t.Errorf("lastSeen %v, want about %v", seen, closed)
		}
		if n := alice.count(isPresence("bob", true)); n != 1 {
			t.Errorf("alice got %d online frames of bob, want 1 (the second device and the reconnect change nothing)", n)
		}
		if n := alice.count(isPresence("bob", false)); n != 1 {
			t.Errorf("alice got %d offline frames of bob, want 1", n)
		}
		if p := e.presenceOf("alice", "bob"); p.Presence["bob"].Online || p.Presence["bob"].LastSeen == nil {
			t.Errorf("bob after going offline: %+v, want offline with lastSeen", p)
		}
		zed.expectNone("presence of a user zed shares no chat with", func(f frame) bool { return f.Type == "presence" }, 10*time.Millisecond)
	})
}

// Presence across processes: bob comes online on one process and alice,
// on another, is told; bob moves to a third process inside the grace
// (nothing changes); he goes offline from there.
func TestFleetPresence(t *testing.T) {
	fleet := newFleet(t, 3, func(c *server.Config) { c.PresenceGrace = 2 * time.Second })
	fleet[0].createDirect("alice", "bob")
	alice := fleet[0].dial("alice", dialOpts{})
	b := fleet[1].dial("bob", dialOpts{})
	alice.next("bob online from another process", isPresence("bob", true))
	if p := fleet[2].presenceOf("alice", "bob"); !p.Presence["bob"].Online {
		t.Errorf("a third process reports %+v, want bob online", p)
	}
	b.close()
	time.Sleep(500 * time.Millisecond)
	b = fleet[2].dial("bob", dialOpts{})
	alice.expectNone("a presence change when bob moved processes inside the grace", func(f frame) bool { return f.Type == "presence" }, 3*time.Second)
	b.close()
	alice.next("bob offline from a third process", isPresence("bob", false))
	if p := fleet[1].presenceOf("alice", "bob"); p.Presence["bob"].Online || p.Presence["bob"].LastSeen == nil {
		t.Errorf("after going offline: %+v", p)
	}
}
