package server_test

// Issue 13, "Hardening: what a hostile newcomer and real faults found":
// end-to-end tests over real sockets for what a hostile newcomer found.
// The fault tests (a real full filesystem, a real stopped PostgreSQL) are in
// readiness_faults_test.go.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/tetra-messenger/tetra/workload/client"
	"github.com/tetra-messenger/tetra/workload/server"
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
		// Invalid UTF-8 in a raw body: encoding/json alone would store
		// U+FFFD in its place (found by a fresh tester).
		for _, body := range []string{
			"{\"kind\":\"group\",\"title\":\"ok\xff\xfe\",\"members\":[\"bob\"]}",
			"{\"kind\":\"group\",\"title\":\"ok\",\"members\":[\"bo\xffb\"]}",
			"{\"kind\":\"direct\",\"members\":[\"zed\xc0\"]}",
		} {
			status, raw := e.call("POST", "/api/chats", tok, []byte(body))
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

// §3: nothing a client sends may affect other clients. A read frame whose
// messageId holds a NUL (or anything else a store refuses) is answered with
// an error to its sender and never costs another user a receipt: 30
// receipts in an unrelated chat, batched with it, all arrive. Before, on
// PostgreSQL, the bad receipt failed SaveReads for its whole batch and 0 of
// the 30 arrived, with no error to the sender and only a WARN in the log
// (issue 13, point 1).
func TestE2EBadReadReceiptHarmsNoOne(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, func(c *server.Config) {
			// One batch for everything below, so the bad receipt and the
			// good ones share a SaveReads call.
			c.Ingest.ReadBatchSize = 64
			c.Ingest.ReadBatchWait = 300 * time.Millisecond
		})
		chat := e.createDirect("alice", "bob")
		mchat := e.createDirect("mallory", "trent")
		alice := e.dial("alice", dialOpts{})
		bob := e.dial("bob", dialOpts{})
		mallory := e.dial("mallory", dialOpts{})
		var msgs []string
		for i := range 30 {
			id := bob.sendOK(chat.ChatID, fmt.Sprint("m-", i), fmt.Sprint("message ", i)).MessageID
			alice.next("message "+id, messageID(id))
			alice.ack(id) // or max-pending withdraws her
			msgs = append(msgs, id)
		}
		for _, bad := range []string{"x\x00y", "\x00", strings.Repeat("\x00", 128)} {
			mallory.write(map[string]string{"type": "read", "chatId": mchat.ChatID, "messageId": bad})
		}
		for _, id := range msgs {
			alice.write(map[string]string{"type": "read", "chatId": chat.ChatID, "messageId": id})
		}
		got := 0
		for _, id := range msgs {
			r, err := bob.nextE(func(f frame) bool { return f.Type == "read" && f.MessageID == id }, waitLong)
			if err != nil {
				t.Fatalf("bob got %d of alice's %d read receipts: %v", got, len(msgs), err)
			}
			if r.UserID != "alice" || r.ChatID != chat.ChatID {
				t.Errorf("read frame %s, want alice's in %s", r, chat.ChatID)
			}
			got++
		}
		for range 3 {
			if f := mallory.expect("error"); f.Code != "invalid" {
				t.Errorf("the bad read receipt answered %s, want invalid", f)
			}
		}
		if v := e.metric(`tetra_read_receipts_failed_total{reason="invalid"}`); v != 3 {
			t.Errorf(`tetra_read_receipts_failed_total{reason="invalid"} = %v, want 3`, v)
		}
	})
}

// metric scrapes /metrics and returns the value of the series named
// exactly (name with its labels, as exposed), or -1 when it is absent.
func (e *env) metric(series string) float64 {
	e.t.Helper()
	status, raw := e.call("GET", "/metrics", "", nil)
	if status != http.StatusOK {
		e.t.Fatalf("GET /metrics: %d", status)
	}
	for _, line := range strings.Split(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			var f float64
			if _, err := fmt.Sscan(v, &f); err != nil {
				e.t.Fatalf("metric %s: %q: %v", series, v, err)
			}
			return f
		}
	}
	return -1
}

// §1: an open socket does not outlive its token. When exp passes the
// server closes with 4005; before that, refresh with a valid token of the
// same user answers refreshed (with the new exp, or none) and moves the
// expiry; any other token is answered invalid and changes nothing. Before,
// a socket opened with a 3 s token still got its sends accepted after 6 s
// while HTTP answered 401 (issue 13, point 4).
func TestE2ETokenExpiry(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		chat := e.createDirect("alice", "bob")
		sign := func(claims jwt.MapClaims) string {
			s, err := jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString([]byte(e.secret))
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		// forge changes one character in the middle of the signature (the
		// last one may carry only padding bits).
		forge := func(tok string) string {
			b := []byte(tok)
			i := len(b) - 10
			if b[i] == 'x' {
				b[i] = 'y'
			} else {
				b[i] = 'x'
			}
			return string(b)
		}
		// Both sockets' tokens expire at the same second, 2-3 s from now.
		exp := time.Now().Add(3 * time.Second).Truncate(time.Second)
		short := sign(jwt.MapClaims{"sub": "alice", "exp": exp.Unix()})
		kept := e.dial("alice", dialOpts{device: "kept", token: short})
		lapsing := e.dial("alice", dialOpts{device: "lapsing", token: short})
		acc := lapsing.sendOK(chat.ChatID, "before-exp", "still valid")
		kept.ack(kept.next("alice's own message on her other device", messageID(acc.MessageID)).MessageID)

		// Anything but a valid token of alice changes nothing.
		for what, tok := range map[string]string{
			"bob's token":    e.token("bob"),
			"an admin token": func() string { s, _ := e.srv.Signer().IssueAdmin(time.Hour); return s }(),
			"an expired one": sign(jwt.MapClaims{"sub": "alice", "exp": time.Now().Add(-time.Minute).Unix()}),
			"a forged one":   forge(e.token("alice")),
			"garbage":        "not a token",
		} {
			lapsing.write(map[string]string{"type": "refresh", "token": tok})
			if f := lapsing.expect("error"); f.Code != "invalid" || f.CorrelationID != "" {
				t.Errorf("refresh with %s answered %s, want error invalid", what, f)
			}
		}
		lapsing.write(map[string]string{"type": "refresh"})
		if f := lapsing.expect("error"); f.Code != "invalid" {
			t.Errorf("refresh without a token answered %s, want invalid", f)
		}

		later := time.Now().Add(time.Hour).Truncate(time.Second)
		kept.write(map[string]string{"type": "refresh", "token": sign(jwt.MapClaims{"sub": "alice", "exp": later.Unix()})})
		r := kept.expect("refreshed")
		expectKeys(t, "refreshed", r.Raw, "type", "exp")
		var got struct {
			Exp time.Time `json:"exp"`
		}
		if json.Unmarshal(r.Raw, &got) != nil || !got.Exp.Equal(later) || !strings.HasSuffix(string(r.Raw), `Z"}`) {
			t.Errorf("refreshed %s, want exp %s in UTC", r, later.UTC().Format(time.RFC3339))
		}
		kept.write(map[string]string{"type": "refresh", "token": sign(jwt.MapClaims{"sub": "alice"})})
		expectKeys(t, "refreshed without exp", kept.expect("refreshed").Raw, "type")

		lapsing.expectClose(4005)
		if now := time.Now(); now.Before(exp) {
			t.Errorf("closed with 4005 at %v, before the token's exp %v", now, exp)
		}
		// The refreshed socket outlived the original expiry.
		kept.sync()
		kept.sendOK(chat.ChatID, "after-exp", "refreshed in time")
	})
}

// The Go client refreshes its token before exp with tokens the application
// supplies (client.Config.TokenRefresh), so its socket is never closed with
// 4005; without TokenRefresh it sees 4005, then 401 on the next upgrade,
// and stops (issue 13, point 4).
func TestE2EClientRefreshesItsToken(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		chat := e.createDirect("alice", "bob")
		short := func() string {
			tok, err := e.srv.Signer().Issue("alice", 3*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			return tok
		}
		first := short()
		firstExp := time.Now().Add(3 * time.Second) // at most
		calls := make(chan time.Time, 100)
		states := make(chan client.StateChange, 100)
		c, err := client.Dial(t.Context(), client.Config{
			URL: e.srv.URL(), Token: first, TokenInQuery: true,
			TokenRefresh: func(context.Context) (string, error) {
				calls <- time.Now()
				return short(), nil
			},
			OnState: func(sc client.StateChange) { states <- sc },
		})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		// Every refresh happens at least 1 s after the one before (each
		// token has 2-3 s left when it arrives): after three, the first
		// token's exp has passed.
		for i := range 3 {
			select {
			case <-calls:
			case <-time.After(waitLong):
				t.Fatalf("TokenRefresh called %d times in %v, want 3", i, waitLong)
			}
		}
		if now := time.Now(); now.Before(firstExp) {
			t.Fatalf("three refreshes by %v, before the first token's exp %v", now, firstExp)
		}
		ctx, cancel := context.WithTimeout(t.Context(), waitLong)
		defer cancel()
		if _, err := c.Send(ctx, chat.ChatID, "after the first token expired"); err != nil {
			t.Fatalf("send: %v", err)
		}
		if st := c.Stats(); st.Reconnects != 0 {
			t.Errorf("%d reconnects, want none: the socket outlives the first token", st.Reconnects)
		}
		for len(states) > 0 {
			if sc := <-states; sc.State == client.StateReconnecting {
				t.Errorf("the connection ended (%d, %v), want it kept by refreshes", sc.CloseCode, sc.Err)
			}
		}
		if c.Token() == first {
			t.Error("the client still uses its first token")
		}

		// Without TokenRefresh: 4005 at exp, then 401, and the client stops.
		lapsing, err := client.Dial(t.Context(), client.Config{URL: e.srv.URL(), Token: short(), Device: "lapsing",
			OnState: func(sc client.StateChange) { states <- sc }})
		if err != nil {
			t.Fatal(err)
		}
		defer lapsing.Close()
		var codes []int
		for {
			var sc client.StateChange
			select {
			case sc = <-states:
			case <-time.After(waitLong):
				t.Fatalf("the client without TokenRefresh still runs; closes so far %v", codes)
			}
			if sc.State == client.StateReconnecting {
				codes = append(codes, sc.CloseCode)
			}
			if sc.State == client.StateClosed {
				if client.CodeOf(sc.Err) != "unauthorized" || !slices.Equal(codes, []int{4005}) {
					t.Errorf("stopped with %v after closes %v, want 401 after one 4005", sc.Err, codes)
				}
				break
			}
		}
	})
}
