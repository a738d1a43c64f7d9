package server_test

// Issue 13, "Hardening: what a hostile newcomer and real faults found":
// end-to-end tests over real sockets for what a hostile newcomer found.
// The fault tests (a real full filesystem, a real stopped PostgreSQL) are in
// readiness_faults_test.go.

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/golang-jwt/jwt/v5"
)

// §3: text that is not valid UTF-8 or contains U+0000 is refused with
// invalid on every backend alike, and a user id with a control character
// (C1 included) is no user id: its token gets 401. Before the shared rule
// (package text) a NUL body and a NUL group title were accepted on SQLite
// and refused on PostgreSQL, and a C1 sub passed the token check while the
// stores refused it (issue 13, point 2).
func TestE2ETextRulesAlike(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		chat := e.createDirect("alice", "bob")
		alice := e.dial("alice", dialOpts{})
		bob := e.dial("bob", dialOpts{})

		f := alice.sendErr(chat.ChatID, "nul-body", "a\x00b", "invalid")
		if f.Message == "" {
			t.Errorf("refusal without a message: %s", f)
		}
		alice.write(sendFrame{Type: "send", ChatID: chat.ChatID, CorrelationID: "nul\x00key", Body: "hi"})
		if f := alice.expect("error"); f.Code != "invalid" {
			t.Errorf("correlationId with NUL answered %s, want invalid", f)
		}
		alice.write(sendFrame{Type: "send", ChatID: chat.ChatID + "\x00", CorrelationID: "nul-chat", Body: "hi"})
		if f := alice.next("answer to nul-chat", answers("nul-chat")); f.Code != "invalid" {
			t.Errorf("chatId with NUL answered %s, want invalid", f)
		}
		ok := alice.sendOK(chat.ChatID, "fine", "a fine one")
		bob.next("the fine message", messageID(ok.MessageID))
		if got := ids(e.history("bob", chat.ChatID, "")); len(got) != 1 || got[0] != ok.MessageID {
			t.Errorf("history %v, want only %s", got, ok.MessageID)
		}

		// HTTP: titles, members, ids in the path.
		tok := e.token("alice")
		for _, body := range []map[string]any{
			{"kind": "group", "title": "Team\x00", "members": []string{"bob"}},
			{"kind": "group", "title": "Team", "members": []string{"bob\u0085"}},
			{"kind": "direct", "members": []string{"bob\x00"}},
		} {
			status, raw := e.call("POST", "/api/chats", tok, body)
			expectInvalid(t, fmt.Sprintf("POST /api/chats %q", body), status, raw)
		}
		status, raw := e.call("GET", "/api/chats/"+chat.ChatID+"%00/messages", tok, nil)
		expectInvalid(t, "history of a chat id with NUL", status, raw)
		status, raw = e.call("POST", "/api/chats/"+chat.ChatID+"%00/members", tok, map[string]string{"userId": "carol"})
		expectInvalid(t, "add member to a chat id with NUL", status, raw)

		// A token whose sub holds a C1 control character opens nothing.
		c1, err := jwt.NewWithClaims(jwt.SigningMethodHS256, jwt.MapClaims{"sub": "mallory\u0085"}).SignedString([]byte(e.secret))
		if err != nil {
			t.Fatal(err)
		}
		if status, raw := e.call("GET", "/api/chats", c1, nil); status != http.StatusUnauthorized {
			t.Errorf("GET /api/chats with a C1 sub: %d %s, want 401", status, raw)
		}
		if _, err := e.dialE("mallory", dialOpts{token: c1}); !isDialStatus(err, http.StatusUnauthorized) {
			t.Errorf("upgrade with a C1 sub: %v, want HTTP 401", err)
		}
	})
}
