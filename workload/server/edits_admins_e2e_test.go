package server_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
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

// TestE2EChatListAfterEditsAndDeletes: GET /api/chats and GET
// /api/chats/{chatId} after edits and deletes (PROTOCOL.md §7.2, §7.3):
// unread counts ordinary messages not deleted, lastMessage is the newest
// ordinary message (an edited one with its new body and editedAt, a
// deleted one as its tombstone) and never holds a deleted body,
// lastActivity stays the newest ordinary message's sentAt, and the
// newest page (before=end) carries edits, deletes, editedAt and deleted.
func TestE2EChatListAfterEditsAndDeletes(t *testing.T) {
	t.Parallel()
	coreBackends(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		g := e.createGroup("alice", "team", "bob")
		alice := e.dial("alice", dialOpts{})
		first := alice.sendOK(g.ChatID, "m1", "secret first")
		last := alice.sendOK(g.ChatID, "m2", "second")
		lastSentAt := byID(e.history("bob", g.ChatID, ""))[last.MessageID].SentAt
		time.Sleep(2 * time.Millisecond)
		alice.write(editFrame{Type: "send", ChatID: g.ChatID, CorrelationID: "e1", Body: "secret second", Edits: last.MessageID})
		edit := alice.next("the edit's answer", answers("e1"))
		if edit.Type != "accepted" {
			t.Fatalf("edit answered %s", edit)
		}
		check := func(step string, deleted bool, body string, unread int) {
			t.Helper()
			var listed chat7JSON
			_, raw := e.call("GET", "/api/chats", e.token("bob"), nil)
			for _, c := range decode[list7JSON](t, raw).Chats {
				if c.ChatID == g.ChatID {
					listed = c
				}
			}
			for how, c := range map[string]chat7JSON{"GET /api/chats": listed, "GET /api/chats/{id}": e.chat7("bob", g.ChatID)} {
				l := c.LastMessage
				if l == nil || l.MessageID != last.MessageID || l.Deleted != deleted || l.Body != body || l.Edits != "" || l.Deletes != "" ||
					(!deleted && l.EditedAt == "") || (deleted && l.EditedAt != "") {
					t.Errorf("%s: %s lastMessage = %+v, want %s with body %q, deleted %v", step, how, l, last.MessageID, body, deleted)
				}
				if c.Unread == nil || *c.Unread != unread {
					t.Errorf("%s: %s unread = %v, want %d (ordinary messages not deleted)", step, how, c.Unread, unread)
				}
				if c.LastActivity != lastSentAt {
					t.Errorf("%s: %s lastActivity = %s, want the newest ordinary message's sentAt %s", step, how, c.LastActivity, lastSentAt)
				}
			}
			p := e.page("bob", g.ChatID, "before=end")
			m := byID(p.Messages)
			if h := m[edit.MessageID]; h.Edits != last.MessageID {
				t.Errorf("%s: the edit in the newest page = %+v, want edits %s", step, h, last.MessageID)
			}
			if h := m[last.MessageID]; h.Deleted != deleted || h.Body != body {
				t.Errorf("%s: the original in the newest page = %+v", step, h)
			}
		}
		check("after an edit of the last message", false, "secret second", 2)
		if status, raw := e.deleteMessage("alice", g.ChatID, first.MessageID); status != http.StatusOK {
			t.Fatalf("delete the older message: %d %s", status, raw)
		}
		check("after a delete of an older message", false, "secret second", 1)
		if status, raw := e.deleteMessage("alice", g.ChatID, last.MessageID); status != http.StatusOK {
			t.Fatalf("delete the last message: %d %s", status, raw)
		}
		check("after a delete of the last message", true, "", 0)
		for _, path := range []string{"/api/chats", "/api/chats/" + g.ChatID, "/api/chats/" + g.ChatID + "/messages?before=end"} {
			if _, raw := e.call("GET", path, e.token("bob"), nil); strings.Contains(string(raw), "secret") {
				t.Errorf("GET %s still holds a deleted body: %s", path, raw)
			}
		}
	})
}

// TestE2EMemberHistoryEdits: in a "member" group (PROTOCOL.md §7.6) an
// edit or delete of a message from before carol joined reveals nothing of
// the original to carol: the edit is pushed live and listed in history as
// the edit message with the text the editor sent while carol was there;
// the original is in none of carol's pages, its lastMessage or unread, and
// no answer or frame to carol holds its body (docs/PROTOCOL.md,
// implementation notes).
func TestE2EMemberHistoryEdits(t *testing.T) {
	t.Parallel()
	coreBackends(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		status, raw := e.call("POST", "/api/chats", e.token("alice"), map[string]any{"kind": "group", "title": "m", "members": []string{"bob"}, "history": "member"})
		if status != http.StatusCreated {
			t.Fatalf("create: %d %s", status, raw)
		}
		g := decode[chat7JSON](t, raw)
		alice := e.dial("alice", dialOpts{})
		early := alice.sendOK(g.ChatID, "a1", "secret early")
		if status, raw := e.addMember("alice", g.ChatID, "carol"); status != http.StatusOK {
			t.Fatalf("add carol: %d %s", status, raw)
		}
		carol := e.dial("carol", dialOpts{})
		alice.write(editFrame{Type: "send", ChatID: g.ChatID, CorrelationID: "e1", Body: "said while carol is here", Edits: early.MessageID})
		edit := alice.next("the edit's answer", answers("e1"))
		if edit.Type != "accepted" {
			t.Fatalf("edit answered %s", edit)
		}
		pushed := carol.next("the edit", messageID(edit.MessageID))
		if pushed.Edits != early.MessageID || pushed.Body != "said while carol is here" || strings.Contains(string(pushed.Raw), "secret") {
			t.Errorf("edit pushed to carol as %s", pushed.Raw)
		}
		carol.ack(pushed.MessageID)
		if status, raw := e.deleteMessage("alice", g.ChatID, early.MessageID); status != http.StatusOK {
			t.Fatalf("delete: %d %s", status, raw)
		}
		del := carol.next("the delete", func(f frame) bool { return f.Type == "message" && f.Deletes == early.MessageID })
		if del.Body != "" {
			t.Errorf("delete pushed to carol as %s", del.Raw)
		}
		carol.expectNone("the original pushed to carol", messageID(early.MessageID), quiet)
		for _, q := range []string{"before=end", "limit=100"} {
			got := e.page("carol", g.ChatID, q).Messages
			if len(got) != 2 || got[0].MessageID != edit.MessageID || got[1].MessageID != del.MessageID {
				t.Errorf("carol's page %s = %+v, want the edit then the delete", q, got)
			}
		}
		c := e.chat7("carol", g.ChatID)
		if c.LastMessage != nil || c.Unread == nil || *c.Unread != 0 {
			t.Errorf("carol's chat: lastMessage %+v unread %v, want none and 0 (no ordinary message of its interval)", c.LastMessage, c.Unread)
		}
		for _, path := range []string{"/api/chats", "/api/chats/" + g.ChatID, "/api/chats/" + g.ChatID + "/messages?before=end"} {
			if _, raw := e.call("GET", path, e.token("carol"), nil); strings.Contains(string(raw), "secret") {
				t.Errorf("GET %s as carol reveals the original: %s", path, raw)
			}
		}
	})
}

// TestE2EStrictBodiesOfSection7Calls: the calls §7 added are as strict as
// the others (PROTOCOL.md §7.7): PATCH title and POST admins refuse a
// repeated key, a lone surrogate and an unknown key naming it; the DELETE
// calls (a message, a member, an admin) take no body and refuse one with
// 400 invalid, changing nothing; GET /api/presence refuses any query
// parameter but users (given twice it is one id per value:
// TestE2EPresenceRepeatedUsers).
func TestE2EStrictBodiesOfSection7Calls(t *testing.T) {
	t.Parallel()
	coreBackends(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		g := e.createGroup("alice", "T", "bob", "carol")
		alice := e.dial("alice", dialOpts{})
		m := alice.sendOK(g.ChatID, "m1", "keep me")
		path := "/api/chats/" + g.ChatID
		for _, tc := range []struct {
			method, path, body, key string
		}{
			{"PATCH", path, `{"title":"a\ud800"}`, `title`},
			{"PATCH", path, `{"Title":"x"}`, `"Title"`},
			{"POST", path + "/admins", `{"userId":"bob","userId":"carol"}`, `"userId"`},
			{"POST", path + "/admins", `{"userId":"\udc00"}`, `userId`},
			{"POST", path + "/admins", `{"userId":"bob","role":"owner"}`, `"role"`},
		} {
			status, raw := e.call(tc.method, tc.path, e.token("alice"), tc.body)
			expectInvalid(t, tc.method+" "+tc.path+" "+tc.body, status, raw)
			if !strings.Contains(string(raw), strings.ReplaceAll(tc.key, `"`, `\"`)) {
				t.Errorf("%s %s: %s does not name %s", tc.method, tc.body, raw, tc.key)
			}
		}
		for _, tc := range []struct{ path, body string }{
			{path + "/messages/" + m.MessageID, `{}`},
			{path + "/messages/" + m.MessageID, `{"reason":"spam"}`},
			{path + "/members/bob", `{"userId":"bob"}`},
			{path + "/admins/alice", `{}`},
		} {
			status, raw := e.call("DELETE", tc.path, e.token("alice"), tc.body)
			expectInvalid(t, "DELETE "+tc.path+" with body "+tc.body, status, raw)
		}
		c := e.chat7("alice", g.ChatID)
		if c.Title != "T" || !slices.Equal(c.Admins, []string{"alice"}) || !slices.Contains(c.Members, "bob") {
			t.Errorf("refused calls changed the chat: %+v", c)
		}
		if h := byID(e.history("alice", g.ChatID, ""))[m.MessageID]; h.Deleted || h.Body != "keep me" {
			t.Errorf("a refused DELETE changed the message: %+v", h)
		}
		// Without a body the same calls work.
		if status, raw := e.deleteMessage("alice", g.ChatID, m.MessageID); status != http.StatusOK {
			t.Errorf("DELETE message without a body: %d %s", status, raw)
		}
		for _, q := range []string{"users=bob&user=carol", "users=bob&limit=1"} {
			status, raw := e.call("GET", "/api/presence?"+q, e.token("alice"), nil)
			expectInvalid(t, "GET /api/presence?"+q, status, raw)
		}
		if status, raw := e.call("GET", "/api/presence?users=bob,carol", e.token("alice"), nil); status != http.StatusOK {
			t.Errorf("GET /api/presence?users=bob,carol: %d %s", status, raw)
		}
	})
}

// TestE2EEditCorrelationID: the correlationId rules of §3 hold for edits
// as for sends (PROTOCOL.md §7.3): an edit resent with its correlationId
// is answered accepted with the same messageId and stored once; its
// correlationId reused for another body, another target or a plain send,
// or a send's correlationId reused for an edit, gets invalid.
func TestE2EEditCorrelationID(t *testing.T) {
	t.Parallel()
	coreBackends(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		g := e.createGroup("alice", "team", "bob")
		alice := e.dial("alice", dialOpts{})
		orig := alice.sendOK(g.ChatID, "m1", "helo")
		other := alice.sendOK(g.ChatID, "m2", "other")
		f := editFrame{Type: "send", ChatID: g.ChatID, CorrelationID: "e1", Body: "hello", Edits: orig.MessageID}
		alice.write(f)
		first := alice.next("the edit's answer", answers("e1"))
		alice.write(f)
		again := alice.next("the resent edit's answer", answers("e1"))
		if first.Type != "accepted" || again.Type != "accepted" || again.MessageID != first.MessageID {
			t.Fatalf("edit answered %s, resent %s: want accepted twice with one messageId", first.Raw, again.Raw)
		}
		for _, c := range []struct {
			what string
			f    any
		}{
			{"another body", editFrame{"send", g.ChatID, "e1", "hello!", orig.MessageID}},
			{"another target", editFrame{"send", g.ChatID, "e1", "hello", other.MessageID}},
			{"a plain send", map[string]string{"type": "send", "chatId": g.ChatID, "correlationId": "e1", "body": "hello"}},
			{"a send's key for an edit", editFrame{"send", g.ChatID, "m2", "other", orig.MessageID}},
		} {
			alice.write(c.f)
			corr := "e1"
			if c.what == "a send's key for an edit" {
				corr = "m2"
			}
			if got := alice.next("answer to "+c.what, answers(corr)); got.Type != "error" || got.Code != "invalid" {
				t.Errorf("edit key reused for %s answered %s, want error invalid", c.what, got.Raw)
			}
		}
		hist := e.history("bob", g.ChatID, "")
		if len(hist) != 3 {
			t.Errorf("history holds %d messages, want 3 (two sends, one edit): %+v", len(hist), hist)
		}
		if h := byID(hist)[orig.MessageID]; h.Body != "hello" {
			t.Errorf("original = %+v, want body hello", h)
		}
	})
}
