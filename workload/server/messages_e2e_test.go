package server_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// internalPrefix matches what error wrapping inside the server adds to a
// message and a client has no use for: a package's "name: " head and the
// sentinels' texts ("history: not a member: ...", "invalid text: ...").
var internalPrefix = regexp.MustCompile(`\b(history|text|auth|ingest|delivery|postgres|sqlite|redis|waterline|outbox|kafka|server|config|protocol|invalid text|not a member|store unavailable|not found): `)

// No error message a client gets, on the socket or over HTTP, carries the
// server's internal prefixes (issue 13, point 7): each says what was wrong
// in the client's terms, and the code says the category. Before, a send to
// a chat of others read `"mallory" in chat "c_..."` (its "history: not a
// member: " head cut off), an add member by a non-member the same, and a
// bad member id "members: invalid text: user id contains a control
// character".
func TestE2EErrorMessagesCarryNoInternalPrefix(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		chat := e.createDirect("alice", "bob")
		group := e.createGroup("alice", "team", "bob")
		mallory := e.dial("mallory", dialOpts{})
		alice := e.dial("alice", dialOpts{})
		var msgs []struct{ what, code, msg string }
		note := func(what, code, msg string) {
			msgs = append(msgs, struct{ what, code, msg string }{what, code, msg})
		}

		f := mallory.sendErr(chat.ChatID, "m-1", "let me in", "forbidden")
		note("send to a chat of others", f.Code, f.Message)
		f = mallory.sendErr("no-such-chat", "m-2", "hello?", "not_found")
		note("send to no chat", f.Code, f.Message)
		alice.sendOK(chat.ChatID, "a-1", "first")
		f = alice.sendErr(chat.ChatID, "a-1", "another body", "invalid")
		note("a correlationId reused with another body", f.Code, f.Message)
		f = alice.sendErr(group.ChatID, "a-1", "first", "invalid")
		note("a correlationId reused for another chat", f.Code, f.Message)
		for _, r := range []map[string]string{
			{"type": "read", "chatId": chat.ChatID, "messageId": "x"},
			{"type": "read", "chatId": "no-such-chat", "messageId": "x"},
			{"type": "refresh", "token": "not-a-token"},
			{"type": "send", "chatId": chat.ChatID, "body": "no key"},
		} {
			mallory.write(r)
			f := mallory.expect("error")
			note("frame "+r["type"], f.Code, f.Message)
		}

		tok, mtok := e.token("alice"), e.token("mallory")
		for _, c := range []struct {
			what, method, path, token string
			body                      any
		}{
			{"add member by a non-member", "POST", "/api/chats/" + url.PathEscape(group.ChatID) + "/members", mtok, map[string]string{"userId": "mallory"}},
			{"add member to a direct chat", "POST", "/api/chats/" + url.PathEscape(chat.ChatID) + "/members", tok, map[string]string{"userId": "carol"}},
			{"add member to no chat", "POST", "/api/chats/no-such-chat/members", tok, map[string]string{"userId": "carol"}},
			{"add a bad user id", "POST", "/api/chats/" + url.PathEscape(group.ChatID) + "/members", tok, map[string]string{"userId": "c\u0085arol"}},
			{"add an empty user id", "POST", "/api/chats/" + url.PathEscape(group.ChatID) + "/members", tok, map[string]string{"userId": ""}},
			{"a group with a bad member", "POST", "/api/chats", tok, map[string]any{"kind": "group", "title": "x", "members": []string{"b\x00ob"}}},
			{"a direct chat with oneself", "POST", "/api/chats", tok, map[string]any{"kind": "direct", "members": []string{"alice"}}},
			{"history by a non-member", "GET", "/api/chats/" + url.PathEscape(chat.ChatID) + "/messages", mtok, nil},
			{"history of no chat", "GET", "/api/chats/no-such-chat/messages", tok, nil},
			{"a bad token", "GET", "/api/chats", "bad", nil},
		} {
			status, raw := e.call(c.method, c.path, c.token, c.body)
			if status < 400 {
				t.Errorf("%s: %d %s, want an error", c.what, status, raw)
				continue
			}
			ej := decode[errorJSON](t, raw)
			note(c.what, ej.Error.Code, ej.Error.Message)
		}
		if status, raw := e.call("GET", "/api/chats", tok, nil); status != http.StatusOK {
			t.Fatalf("GET /api/chats: %d %s", status, raw)
		}
		for _, m := range msgs {
			if m.msg == "" || m.code == "" || internalPrefix.MatchString(m.msg) || strings.HasPrefix(m.msg, `"`) {
				t.Errorf("%s: code %q, message %q: want a message without internal prefixes", m.what, m.code, m.msg)
			} else {
				t.Logf("%s: %s: %s", m.what, m.code, m.msg)
			}
		}
	})
}
