package server_test

import (
	"net/http"
	"slices"
	"testing"
)

// noOpChanges runs PROTOCOL.md §7.5's changes that change nothing on
// group g (alice its only admin, bob a member) through api, then a real
// rename to "Renamed"; each is answered 200 with the chat as it is.
func noOpChanges(t *testing.T, api *env, g string) {
	t.Helper()
	path := "/api/chats/" + g
	for _, c := range []struct {
		what, method, path, by string
		body                   any
	}{
		{"rename to the same title", "PATCH", path, "alice", map[string]string{"title": "Team"}},
		{"rename to the same title, padded", "PATCH", path, "alice", map[string]string{"title": "  Team "}},
		{"make an admin of an admin", "POST", path + "/admins", "alice", map[string]string{"userId": "alice"}},
		{"a member who is not an admin steps down", "DELETE", path + "/admins/bob", "bob", nil},
		{"add an existing member", "POST", path + "/members", "alice", map[string]string{"userId": "bob"}},
		{"remove a non-member", "DELETE", path + "/members/zed", "alice", nil},
	} {
		status, raw := api.call(c.method, c.path, api.token(c.by), c.body)
		if ch := decode[chat7JSON](t, raw); status != http.StatusOK || ch.Title != "Team" || !slices.Equal(ch.Admins, []string{"alice"}) {
			t.Errorf("%s: %d %s, want 200 with the chat unchanged", c.what, status, raw)
		}
	}
}

// TestE2ENoOpChangesSendNoEvent: a §7.5 change that changes nothing
// (renaming to the same title, making an admin of an admin, stepping down
// when not an admin, stepping down alone in the group, adding a member,
// removing a non-member) is answered 200
// with the chat and sends no "updated" to any member's device, on every
// backend and across the processes of a fleet; a real change right after
// does (so the quiet is not a broken event path). The store reports the
// no-op (history.ChatAPI: changed false); without that, every one of the
// admin calls pushed "updated" (the member calls checked membership
// before the call, which raced a concurrent change).
func TestE2ENoOpChangesSendNoEvent(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, api *env, g string, devices ...*wsClient) {
		t.Helper()
		noOpChanges(t, api, g)
		for _, d := range devices {
			d.expectNone("chat event after a no-op change", isType("chat"), quiet)
		}
		if status, raw := api.call("PATCH", "/api/chats/"+g, api.token("alice"), map[string]string{"title": "Renamed"}); status != http.StatusOK {
			t.Fatalf("a real rename: %d %s", status, raw)
		}
		for _, d := range devices {
			ev := decode[struct {
				Chat chat7JSON `json:"chat"`
			}](t, d.next("updated after a real rename", chatEventOf(g, "updated")).Raw)
			if ev.Chat.Title != "Renamed" {
				t.Errorf("%s: updated event title %q, want Renamed", d.name, ev.Chat.Title)
			}
		}
	}
	t.Run("backends", func(t *testing.T) {
		t.Parallel()
		forEachBackend(t, func(t *testing.T, b backend) {
			e := newEnv(t, b, nil)
			g := e.createGroup("alice", "Team", "bob").ChatID
			alice := e.dial("alice", dialOpts{})
			bob := e.dial("bob", dialOpts{})
			check(t, e, g, alice, bob)

			// Stepping down alone: the group keeps its only member as admin.
			solo := e.createGroup("alice", "Solo").ChatID
			status, raw := e.call("DELETE", "/api/chats/"+solo+"/admins/alice", e.token("alice"), nil)
			if ch := decode[chat7JSON](t, raw); status != http.StatusOK || !slices.Equal(ch.Admins, []string{"alice"}) {
				t.Errorf("the only member steps down: %d %s, want 200 with admins [alice]", status, raw)
			}
			alice.expectNone("chat event after stepping down alone", chatEventOf(solo, "updated"), quiet)
		})
	})
	t.Run("fleet", func(t *testing.T) {
		t.Parallel()
		fleet := newFleet(t, 2, nil)
		g := fleet[0].createGroup("alice", "Team", "bob").ChatID
		alice := fleet[0].dial("alice", dialOpts{})
		bob := fleet[1].dial("bob", dialOpts{})
		check(t, fleet[0], g, alice, bob)
	})
}
