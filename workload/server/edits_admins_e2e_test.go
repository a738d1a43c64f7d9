package server_test

import (
	"net/http"
	"testing"
)

// TestE2EDeleteByAdmins: a delete "by the sender, or by a group admin
// (§7.5)" (PROTOCOL.md §7.3) means every admin, not only the creator: a
// second admin made with POST /api/chats/{id}/admins deletes another
// member's message; a non-admin gets 403 forbidden; an admin who stepped
// down (DELETE /api/chats/{id}/admins/{userId}) gets 403 again.
func TestE2EDeleteByAdmins(t *testing.T) {
	t.Parallel()
	coreBackends(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		g := e.createGroup("alice", "team", "bob", "carol", "dave")
		dave := e.dial("dave", dialOpts{})
		one := dave.sendOK(g.ChatID, "d1", "dave's first")
		two := dave.sendOK(g.ChatID, "d2", "dave's second")
		path := "/api/chats/" + g.ChatID

		if status, raw := e.deleteMessage("carol", g.ChatID, one.MessageID); status != http.StatusForbidden {
			t.Errorf("carol, not an admin, deletes dave's message: %d %s, want 403", status, raw)
		}
		for _, u := range []string{"bob", "carol"} {
			if status, raw := e.call("POST", path+"/admins", e.token("alice"), map[string]string{"userId": u}); status != http.StatusOK {
				t.Fatalf("make %s an admin: %d %s", u, status, raw)
			}
		}
		status, raw := e.deleteMessage("bob", g.ChatID, one.MessageID)
		if status != http.StatusOK {
			t.Fatalf("bob, a second admin, deletes dave's message: %d %s, want 200", status, raw)
		}
		if tomb := decode[struct {
			Message msgJSON `json:"message"`
		}](t, raw).Message; !tomb.Deleted || tomb.MessageID != one.MessageID || tomb.SenderID != "dave" {
			t.Errorf("bob's delete answered %s, want dave's tombstone", raw)
		}
		if status, raw := e.call("DELETE", path+"/admins/carol", e.token("carol"), nil); status != http.StatusOK {
			t.Fatalf("carol steps down: %d %s", status, raw)
		}
		if status, raw := e.deleteMessage("carol", g.ChatID, two.MessageID); status != http.StatusForbidden {
			t.Errorf("carol, who stepped down, deletes dave's message: %d %s, want 403", status, raw)
		}
		if h := byID(e.history("alice", g.ChatID, ""))[two.MessageID]; h.Deleted || h.Body != "dave's second" {
			t.Errorf("after refused deletes dave's second message = %+v", h)
		}
	})
}
