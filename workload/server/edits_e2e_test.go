package server_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// editFrame is a send that edits a message (PROTOCOL.md §7.3).
type editFrame struct {
	Type          string `json:"type"`
	ChatID        string `json:"chatId"`
	CorrelationID string `json:"correlationId"`
	Body          string `json:"body"`
	Edits         string `json:"edits"`
}

func (e *env) deleteMessage(user, chatID, messageID string) (int, []byte) {
	return e.call("DELETE", "/api/chats/"+url.PathEscape(chatID)+"/messages/"+url.PathEscape(messageID), e.token(user), nil)
}

func byID(ms []msgJSON) map[string]msgJSON {
	out := map[string]msgJSON{}
	for _, m := range ms {
		out[m.MessageID] = m
	}
	return out
}

// Edit and delete on the durable path (PROTOCOL.md §7.3), on every
// backend: an edit is a send with "edits", answered accepted with its own
// messageId and pushed as a message frame carrying edits; only the sender
// may edit; history shows the original with its new body and editedAt and
// the edit in sequence. A delete by the sender answers the tombstone, is
// pushed as a message carrying deletes, twice answers the same tombstone;
// history shows the tombstone, the edit's body erased, and the delete.
// Unread counts ordinary messages only.
func TestE2EEditAndDelete(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		chat := e.createGroup("alice", "team", "bob")
		other := e.createGroup("alice", "other", "bob")
		alice, bob := e.dial("alice", dialOpts{}), e.dial("bob", dialOpts{})
		orig := alice.sendOK(chat.ChatID, "m1", "helo wrld")
		got := bob.next("the original", messageID(orig.MessageID))
		bob.ack(got.MessageID)
		elsewhere := alice.sendOK(other.ChatID, "m2", "elsewhere")

		alice.write(editFrame{Type: "send", ChatID: chat.ChatID, CorrelationID: "e1", Body: "hello world", Edits: orig.MessageID})
		acc := alice.next("the edit's answer", answers("e1"))
		if acc.Type != "accepted" || acc.MessageID == "" || acc.MessageID == orig.MessageID {
			t.Fatalf("edit answered %s, want accepted with a messageId of its own", acc)
		}
		pushed := bob.next("the edit", messageID(acc.MessageID))
		if pushed.Type != "message" || pushed.Edits != orig.MessageID || pushed.Body != "hello world" || pushed.SenderID != "alice" {
			t.Fatalf("edit pushed as %s, want a message frame with edits %s", pushed, orig.MessageID)
		}
		bob.ack(pushed.MessageID)

		// Bad edits change nothing.
		for _, c := range []struct {
			who  *wsClient
			f    editFrame
			code string
		}{
			{bob, editFrame{"send", chat.ChatID, "x1", "hacked", orig.MessageID}, "not_found"},
			{alice, editFrame{"send", chat.ChatID, "x2", "x", "01NOSUCHMESSAGE"}, "not_found"},
			{alice, editFrame{"send", chat.ChatID, "x3", "x", elsewhere.MessageID}, "not_found"},
			{alice, editFrame{"send", chat.ChatID, "x4", "x", acc.MessageID}, "invalid"},
		} {
			c.who.write(c.f)
			f := c.who.next("answer to "+c.f.CorrelationID, answers(c.f.CorrelationID))
			if f.Type != "error" || f.Code != c.code {
				t.Errorf("edit %s answered %s, want error %s", c.f.CorrelationID, f, c.code)
			}
		}
		hist := e.history("bob", chat.ChatID, "")
		if len(hist) != 2 || hist[0].MessageID != orig.MessageID || hist[1].MessageID != acc.MessageID {
			t.Fatalf("history = %+v, want the original then the edit", hist)
		}
		if h := hist[0]; h.Body != "hello world" || h.EditedAt == "" || h.Deleted {
			t.Errorf("original in history = %+v, want the new body and editedAt", h)
		} else {
			expectUTCTime(t, "editedAt", h.EditedAt)
		}
		if h := hist[1]; h.Edits != orig.MessageID || h.Body != "hello world" {
			t.Errorf("edit in history = %+v", h)
		}

		// Delete: another member may not; the sender may.
		if status, raw := e.deleteMessage("bob", chat.ChatID, orig.MessageID); status != http.StatusForbidden {
			t.Errorf("bob deletes alice's message: %d %s, want 403", status, raw)
		}
		if status, raw := e.deleteMessage("mallory", chat.ChatID, orig.MessageID); status != http.StatusForbidden {
			t.Errorf("a non-member deletes: %d %s, want 403", status, raw)
		}
		if status, raw := e.deleteMessage("alice", chat.ChatID, "01NOSUCHMESSAGE"); status != http.StatusNotFound {
			t.Errorf("delete of no message: %d %s, want 404", status, raw)
		}
		if status, raw := e.deleteMessage("alice", "no-such-chat", orig.MessageID); status != http.StatusNotFound && status != http.StatusForbidden {
			t.Errorf("delete in no chat: %d %s, want 404 or 403", status, raw)
		}
		status, raw := e.deleteMessage("alice", chat.ChatID, orig.MessageID)
		if status != http.StatusOK {
			t.Fatalf("delete: %d %s", status, raw)
		}
		tomb := decode[struct {
			Message msgJSON `json:"message"`
		}](t, raw).Message
		if tomb.MessageID != orig.MessageID || !tomb.Deleted || tomb.Body != "" || tomb.SenderID != "alice" || tomb.EditedAt != "" {
			t.Errorf("delete answered %s, want the tombstone of %s", raw, orig.MessageID)
		}
		expectKeys(t, "tombstone", mustField(t, raw, "message"), "messageId", "correlationId", "chatId", "senderId", "body", "sentAt", "deleted")
		del := bob.next("the delete", func(f frame) bool { return f.Type == "message" && f.Deletes == orig.MessageID })
		if del.Body != "" || del.SenderID != "alice" {
			t.Errorf("delete pushed as %s", del)
		}
		bob.ack(del.MessageID)
		if status, raw2 := e.deleteMessage("alice", chat.ChatID, orig.MessageID); status != http.StatusOK ||
			decode[struct {
				Message msgJSON `json:"message"`
			}](t, raw2).Message != tomb {
			t.Errorf("second delete: %d %s, want 200 and the same tombstone %s", status, raw2, raw)
		}
		alice.write(editFrame{"send", chat.ChatID, "x5", "again", orig.MessageID})
		if f := alice.next("edit of a deleted message", answers("x5")); f.Type != "error" || f.Code != "not_found" {
			t.Errorf("edit of a deleted message answered %s, want not_found", f)
		}

		hist = e.history("bob", chat.ChatID, "")
		m := byID(hist)
		if len(hist) != 3 {
			t.Errorf("history after delete has %d messages, want 3 (original, edit, delete): %+v", len(hist), hist)
		}
		if h := m[orig.MessageID]; !h.Deleted || h.Body != "" {
			t.Errorf("deleted original in history = %+v, want the tombstone", h)
		}
		if h := m[acc.MessageID]; h.Body != "" {
			t.Errorf("edit of a deleted message in history = %+v, want its body erased", h)
		}
		if h := m[del.MessageID]; h.Deletes != orig.MessageID || h.Body != "" {
			t.Errorf("delete in history = %+v", h)
		}
		for _, h := range hist {
			if strings.Contains(h.Body, "wrld") || strings.Contains(h.Body, "world") {
				t.Errorf("history still holds the deleted text: %+v", h)
			}
		}
		// Unread: bob read nothing; alice's edit and delete are not
		// counted, nor the deleted original (docs/design.md "Edit and
		// delete": nothing is left to read).
		_, raw = e.call("GET", "/api/chats", e.token("bob"), nil)
		for _, who := range []string{"alice", "bob"} {
			_, all := e.call("GET", "/api/chats", e.token(who), nil)
			_, page := e.call("GET", "/api/chats/"+url.PathEscape(chat.ChatID)+"/messages?limit=500", e.token(who), nil)
			for _, body := range [][]byte{all, page} {
				if strings.Contains(string(body), "wrld") || strings.Contains(string(body), "hello world") {
					t.Errorf("an answer to %s still holds the deleted text: %s", who, body)
				}
			}
		}
		for _, c := range decode[struct {
			Chats []chatJSON `json:"chats"`
		}](t, raw).Chats {
			if c.ChatID == chat.ChatID && (c.Unread == nil || *c.Unread != 0) {
				t.Errorf("bob's unread = %v, want 0 (the original is deleted; the edit and the delete are not messages to read)", c.Unread)
			}
		}
		// A device that was offline recovers the edit and the delete from
		// history (the same pages as above, read by a new connection's user).
		if h := e.history("alice", chat.ChatID, orig.MessageID); len(h) != 2 || h[0].Edits != orig.MessageID || h[1].Deletes != orig.MessageID {
			t.Errorf("history after the original = %+v, want the edit then the delete", h)
		}
	})
}

// mustField returns the raw JSON of key in the object raw.
func mustField(t testing.TB, raw []byte, key string) []byte {
	t.Helper()
	m := decode[map[string]json.RawMessage](t, raw)
	v, ok := m[key]
	if !ok {
		t.Fatalf("%s has no %q", raw, key)
	}
	return v
}
