package server_test

// End-to-end tests of the workload over real sockets, against the client
// contract of /work/shared/PROTOCOL.md (quoted as §n). Every top-level test
// runs its body once per backend (backends in e2e_helpers_test.go), in
// parallel, each on its own server and storage.

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/golang-jwt/jwt/v5"

	"github.com/tetra-messenger/tetra/workload/delivery"
	"github.com/tetra-messenger/tetra/workload/server"
)

type limitsJSON struct {
	MaxBodyBytes     int `json:"maxBodyBytes"`
	MaxInFlightSends int `json:"maxInFlightSends"`
	SendsPerSecond   int `json:"sendsPerSecond"`
	PingIntervalMs   int `json:"pingIntervalMs"`
	MaxPending       int `json:"maxPending"`      // an addition: the push window (docs/PROTOCOL.md)
	FanoutPerSecond  int `json:"fanoutPerSecond"` // an addition: the fan-out budget (docs/PROTOCOL.md)
}

func limitsOf(t testing.TB, hello frame) limitsJSON {
	t.Helper()
	expectKeys(t, "hello limits", hello.Limits, "maxBodyBytes", "maxInFlightSends", "sendsPerSecond", "pingIntervalMs", "maxPending", "fanoutPerSecond")
	return decode[limitsJSON](t, hello.Limits)
}

// §3: on open the server sends hello first, with the identity of the
// connection and its own limits.
func TestE2EHello(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, func(c *server.Config) {
			c.Tuning.MaxBodyBytes = 1234
			c.Tuning.MaxInFlightSends = 7
			c.Tuning.SendsPerSecond = 33
			c.Tuning.PingInterval = 250 * time.Millisecond
			c.Tuning.MaxPending = 11
			c.Tuning.FanoutPerSecond = 444
		})
		want := limitsJSON{MaxBodyBytes: 1234, MaxInFlightSends: 7, SendsPerSecond: 33, PingIntervalMs: 250, MaxPending: 11, FanoutPerSecond: 444}

		phone := e.dial("alice", dialOpts{device: "phone"})
		h := phone.hello
		expectKeys(t, "hello", h.Raw, "type", "userId", "device", "connectionId", "limits")
		if h.UserID != "alice" || h.Device != "phone" || h.ConnectionID == "" {
			t.Errorf("hello = %s, want userId alice, device phone and a connectionId", h)
		}
		if got := limitsOf(t, h); got != want {
			t.Errorf("hello limits = %+v, want %+v", got, want)
		}

		// No device parameter: "default". Every connection has its own id.
		def := e.dial("alice", dialOpts{query: true})
		if def.hello.Device != "default" || def.hello.UserID != "alice" {
			t.Errorf("hello without device = %s, want device default", def.hello)
		}
		if def.hello.ConnectionID == h.ConnectionID {
			t.Errorf("two connections share connectionId %q", h.ConnectionID)
		}

		// The server reports its live configuration.
		tun := e.srv.Tuning()
		tun.MaxBodyBytes = 999
		if err := e.srv.SetTuning(tun); err != nil {
			t.Fatal(err)
		}
		later := e.dial("bob", dialOpts{device: "x"})
		if got := limitsOf(t, later.hello); got.MaxBodyBytes != 999 {
			t.Errorf("hello after SetTuning reports maxBodyBytes %d, want 999", got.MaxBodyBytes)
		}
	})
}

// §3, G1: accepted only after commit; the message frame carries every field;
// not pushed back to the sending connection, pushed to the sender's other
// devices; acknowledged rows leave the outbox.
func TestE2EDirectExchange(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		chat := e.createDirect("alice", "bob")
		phone := e.dial("alice", dialOpts{device: "phone"})
		laptop := e.dial("alice", dialOpts{device: "laptop"})
		bob := e.dial("bob", dialOpts{})

		const body = "hi bob — ünïcødé 👋 \"quoted\" <b>&amp;</b>\n"
		acc := phone.sendOK(chat.ChatID, "k-1", body)
		// History is read the moment accepted arrives: it must be there.
		hist := e.page("bob", chat.ChatID, "")
		expectKeys(t, "accepted", acc.Raw, "type", "correlationId", "messageId", "chatId", "sentAt")
		if acc.ChatID != chat.ChatID || acc.MessageID == "" {
			t.Errorf("accepted = %s, want chatId %s and a messageId", acc, chat.ChatID)
		}
		accAt := expectUTCTime(t, "accepted.sentAt", acc.SentAt)
		if len(hist.Messages) != 1 || hist.Messages[0].MessageID != acc.MessageID {
			t.Fatalf("history right after accepted = %+v, want exactly %s (G1: accepted means committed)", hist.Messages, acc.MessageID)
		}
		want := msgJSON{MessageID: acc.MessageID, CorrelationID: "k-1", ChatID: chat.ChatID, SenderID: "alice", Body: body}
		hm := hist.Messages[0]
		if at := expectUTCTime(t, "history sentAt", hm.SentAt); !at.Equal(accAt) {
			t.Errorf("history sentAt %s, accepted said %s", hm.SentAt, acc.SentAt)
		}
		hm.SentAt = ""
		if hm != want {
			t.Errorf("history message = %+v, want %+v", hm, want)
		}
		status, raw := e.call("GET", "/api/chats/"+url.PathEscape(chat.ChatID)+"/messages", e.token("bob"), nil)
		if status == http.StatusOK {
			var p struct{ Messages []json.RawMessage }
			_ = json.Unmarshal(raw, &p)
			if len(p.Messages) == 1 {
				expectKeys(t, "history message", p.Messages[0], "messageId", "correlationId", "chatId", "senderId", "body", "sentAt")
			}
		}

		for _, c := range []*wsClient{bob, laptop} {
			m := c.next("the message", messageID(acc.MessageID))
			expectKeys(t, "message frame", m.Raw, "type", "messageId", "correlationId", "chatId", "senderId", "body", "sentAt")
			got := msgJSON{MessageID: m.MessageID, CorrelationID: m.CorrelationID, ChatID: m.ChatID, SenderID: m.SenderID, Body: m.Body}
			if got != want {
				t.Errorf("%s got message %+v, want %+v", c.name, got, want)
			}
			if at := expectUTCTime(t, "message.sentAt", m.SentAt); !at.Equal(accAt) {
				t.Errorf("%s: message sentAt %s, accepted said %s", c.name, m.SentAt, acc.SentAt)
			}
			c.ack(m.MessageID)
		}
		phone.expectNone("own message pushed back to the sending connection", isType("message"), quiet)

		// Both recipients acknowledged (the sending device is no recipient):
		// with GCGrace 0 the outbox drains.
		eventually(t, waitLong, "the outbox to drain after the acks", func() bool { return e.outboxDepth() == 0 })

		// The other way round; the same correlationId from another sender is
		// another message.
		rep := bob.sendOK(chat.ChatID, "k-1", "hi alice")
		if rep.MessageID == acc.MessageID {
			t.Fatalf("bob's k-1 answered with alice's messageId: the idempotency key is (sender, correlationId)")
		}
		for _, c := range []*wsClient{phone, laptop} {
			m := c.next("bob's reply", messageID(rep.MessageID))
			if m.SenderID != "bob" || m.Body != "hi alice" {
				t.Errorf("%s got %s", c.name, m)
			}
			c.ack(m.MessageID)
		}
		bob.expectNone("own message pushed back", isType("message"), quiet)
	})
}

// A group of 50, all connected: one send reaches each of the 49 others
// exactly once; their acks drain the outbox.
func TestE2EGroupFanout(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, func(c *server.Config) { c.Tuning.MaxPending = 100 })
		const n = 50
		users := make([]string, n)
		tokens := make([]string, n)
		for i := range users {
			users[i] = fmt.Sprintf("u%02d", i)
			tokens[i] = e.token(users[i])
		}
		chat := e.createGroup(users[0], "fifty", users[1:]...)
		if len(chat.Members) != n {
			t.Fatalf("group has %d members, want %d", len(chat.Members), n)
		}

		clients := make([]*wsClient, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range users {
			wg.Go(func() { clients[i], errs[i] = e.dialE(users[i], dialOpts{token: tokens[i]}) })
		}
		wg.Wait()
		for i, err := range errs {
			if err != nil {
				t.Fatalf("dial %s: %v", users[i], err)
			}
		}
		if got := e.srv.Engine().Stats().Connected; got != n {
			t.Errorf("engine counts %d connections, want %d", got, n)
		}

		acc := clients[0].sendOK(chat.ChatID, "fan-1", "hello everyone")
		for _, c := range clients[1:] {
			c.next("the group message", messageID(acc.MessageID))
		}
		// Rows of unacknowledged messages stay (they are what re-delivery
		// and the waterline stand on).
		if d := e.outboxDepth(); d == 0 {
			t.Errorf("outbox empty before any ack")
		}
		for _, c := range clients[1:] {
			c.ack(acc.MessageID)
		}
		eventually(t, waitLong, "the outbox to drain after 49 acks", func() bool { return e.outboxDepth() == 0 })

		// Nothing is pending any more, so nothing more can come; the pong
		// orders after every frame queued before it.
		for i, c := range clients {
			c.sync()
			want := 1
			if i == 0 {
				want = 0 // the sending connection
			}
			if got := c.count(messageID(acc.MessageID)); got != want {
				t.Errorf("%s got the message %d times, want %d", c.name, got, want)
			}
		}
	})
}

// §3: devices of one user all receive; a new connection of the same (user,
// device) supersedes the older with 4001.
func TestE2EMultiDevice(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		chat := e.createDirect("bob", "alice")
		phone := e.dial("alice", dialOpts{device: "phone"})
		laptop := e.dial("alice", dialOpts{device: "laptop"})
		bob := e.dial("bob", dialOpts{})

		m1 := bob.sendOK(chat.ChatID, "m-1", "to both devices")
		for _, c := range []*wsClient{phone, laptop} {
			c.next("m-1", messageID(m1.MessageID))
			c.ack(m1.MessageID)
		}

		phone2 := e.dial("alice", dialOpts{device: "phone"})
		phone.expectClose(protocolSuperseded)
		if phone2.hello.ConnectionID == phone.hello.ConnectionID {
			t.Errorf("the new connection reuses connectionId %s", phone.hello.ConnectionID)
		}
		if got := e.srv.Engine().Stats().Connected; got != 3 {
			t.Errorf("engine counts %d connections, want 3 (bob, alice/laptop, alice/phone)", got)
		}

		m2 := bob.sendOK(chat.ChatID, "m-2", "after the switch")
		for _, c := range []*wsClient{phone2, laptop} {
			c.next("m-2", messageID(m2.MessageID))
			c.ack(m2.MessageID)
		}
		if n := phone.count(messageID(m2.MessageID)); n != 0 {
			t.Errorf("the superseded connection got m-2")
		}
		laptop.sync()
		if n := laptop.count(isType("message")); n != 2 {
			t.Errorf("laptop got %d message frames, want 2", n)
		}
	})
}

const (
	protocolSuperseded websocket.StatusCode = 4001
	protocolAttempts   websocket.StatusCode = 4002
	protocolPending    websocket.StatusCode = 4003
	protocolIdle       websocket.StatusCode = 4004
)

// §3: the same (sender, correlationId) answers with the original messageId
// and stores nothing new, within a batch, later, after reconnecting and from
// another device.
func TestE2EIdempotentSend(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		chat := e.createDirect("alice", "bob")
		alice := e.dial("alice", dialOpts{device: "phone"})
		bob := e.dial("bob", dialOpts{})

		first := alice.sendOK(chat.ChatID, "dup-1", "one")
		again := alice.sendOK(chat.ChatID, "dup-1", "one")
		if again.MessageID != first.MessageID || again.ChatID != chat.ChatID {
			t.Errorf("repeat of dup-1 answered %s, want messageId %s", again, first.MessageID)
		}
		if again.SentAt != first.SentAt {
			t.Errorf("repeat of dup-1 has sentAt %s, the original %s", again.SentAt, first.SentAt)
		}
		// The key with another body, or for another chat, is refused and
		// stores nothing (§3: an idempotency key names one message).
		// Before, both were answered accepted with the original messageId
		// and carol, the other chat's member, got nothing (issue 13, point
		// 3).
		alice.sendErr(chat.ChatID, "dup-1", "a different body", "invalid")
		other := e.createDirect("alice", "carol")
		carol := e.dial("carol", dialOpts{})
		alice.sendErr(other.ChatID, "dup-1", "one", "invalid")
		if got := e.history("carol", other.ChatID, ""); len(got) != 0 {
			t.Errorf("carol's chat holds %v, want nothing", ids(got))
		}
		carol.expectNone("a message for a reused key", isType("message"), quiet)

		// Three copies pipelined: they may share one commit batch.
		for range 3 {
			alice.send(chat.ChatID, "dup-2", "two")
		}
		var dup2 []string
		for range 3 {
			f := alice.next("answer to dup-2", answers("dup-2"))
			if f.Type != "accepted" {
				t.Fatalf("dup-2 answered %s", f)
			}
			dup2 = append(dup2, f.MessageID)
		}
		if dup2[0] != dup2[1] || dup2[1] != dup2[2] {
			t.Errorf("pipelined dup-2 got messageIds %v, want one", dup2)
		}

		// After reconnecting, same device and another device.
		alice.close()
		alice = e.dial("alice", dialOpts{device: "phone"})
		if f := alice.sendOK(chat.ChatID, "dup-1", "one"); f.MessageID != first.MessageID {
			t.Errorf("dup-1 after reconnecting answered %s, want %s", f.MessageID, first.MessageID)
		}
		tablet := e.dial("alice", dialOpts{device: "tablet"})
		if f := tablet.sendOK(chat.ChatID, "dup-1", "one"); f.MessageID != first.MessageID {
			t.Errorf("dup-1 from another device answered %s, want %s", f.MessageID, first.MessageID)
		}

		hist := e.history("bob", chat.ChatID, "")
		if got := ids(hist); !slices.Equal(got, []string{first.MessageID, dup2[0]}) {
			t.Fatalf("history = %+v, want exactly dup-1 and dup-2 once each", hist)
		}
		if hist[0].Body != "one" {
			t.Errorf("dup-1 body in history %q, want the original", hist[0].Body)
		}

		// The recipient got each message once (nothing new was pushed for the
		// repeats; leases are 5 s so there is no re-delivery).
		bob.next("dup-1", messageID(first.MessageID))
		bob.next("dup-2", messageID(dup2[0]))
		bob.expectNone("a push for a repeated send", isType("message"), quiet)
	})
}

// §4: 1,000 messages sent as fast as credits allow come back in commit order,
// paged with any limit; hasMore; limit default, cap and bad values.
func TestE2EHistoryPaging(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, func(c *server.Config) {
			c.Tuning.SendsPerSecond = 100000
		})
		chat := e.createDirect("alice", "bob")
		alice := e.dial("alice", dialOpts{})
		credits := limitsOf(t, alice.hello).MaxInFlightSends

		// One connection, pipelined up to the credits. The server answers a
		// connection's sends in commit order (one committer, batches in
		// order), so the order of accepted frames is the commit order.
		const n = 1000
		order := make([]string, 0, n)
		accepted := map[string]frame{}
		for sent, inflight := 0, 0; len(order) < n; {
			for inflight < credits && sent < n {
				alice.send(chat.ChatID, fmt.Sprintf("p-%04d", sent), fmt.Sprintf("message %d", sent))
				sent++
				inflight++
			}
			f := alice.next("an answer", func(f frame) bool { return f.Type == "accepted" || f.Type == "error" })
			if f.Type != "accepted" {
				t.Fatalf("send answered %s", f)
			}
			if _, dup := accepted[f.MessageID]; dup {
				t.Fatalf("messageId %s accepted twice", f.MessageID)
			}
			accepted[f.MessageID] = f
			order = append(order, f.MessageID)
			inflight--
		}

		check := func(name string, got []msgJSON, from int) {
			t.Helper()
			for i, m := range got {
				if from+i >= n || m.MessageID != order[from+i] {
					t.Fatalf("%s: message %d is %s, want %s (commit order)", name, from+i, m.MessageID, order[min(from+i, n-1)])
				}
				if a := accepted[m.MessageID]; m.CorrelationID != a.CorrelationID || m.ChatID != chat.ChatID || m.SenderID != "alice" {
					t.Fatalf("%s: message %+v does not match its accepted frame %s", name, m, a)
				}
			}
		}
		pageAll := func(limit int) {
			t.Helper()
			since, pages, got := "", 0, 0
			for {
				q := url.Values{"limit": {fmt.Sprint(limit)}}
				if since != "" {
					q.Set("since", since)
				}
				p := e.page("bob", chat.ChatID, q.Encode())
				pages++
				check(fmt.Sprintf("limit %d page %d", limit, pages), p.Messages, got)
				got += len(p.Messages)
				wantLen := min(limit, n-(got-len(p.Messages)))
				if len(p.Messages) != wantLen {
					t.Fatalf("limit %d page %d has %d messages, want %d", limit, pages, len(p.Messages), wantLen)
				}
				if p.HasMore != (got < n) {
					t.Fatalf("limit %d page %d: hasMore %v with %d of %d returned", limit, pages, p.HasMore, got, n)
				}
				if !p.HasMore {
					break
				}
				since = p.Messages[len(p.Messages)-1].MessageID
			}
			if got != n || pages != (n+limit-1)/limit {
				t.Fatalf("limit %d: %d messages in %d pages, want %d in %d", limit, got, pages, n, (n+limit-1)/limit)
			}
		}
		pageAll(7)
		pageAll(500) // exactly two full pages: the second says hasMore false

		def := e.page("bob", chat.ChatID, "")
		if len(def.Messages) != 100 || !def.HasMore {
			t.Errorf("default page: %d messages, hasMore %v; want 100 and true", len(def.Messages), def.HasMore)
		}
		check("default page", def.Messages, 0)
		tail := e.page("bob", chat.ChatID, "since="+order[n-101])
		if len(tail.Messages) != 100 || tail.HasMore {
			t.Errorf("the last 100: %d messages, hasMore %v; want 100 and false", len(tail.Messages), tail.HasMore)
		}
		check("last 100", tail.Messages, n-100)
		end := e.page("bob", chat.ChatID, "since="+order[n-1])
		if len(end.Messages) != 0 || end.HasMore {
			t.Errorf("after the last: %d messages, hasMore %v; want none", len(end.Messages), end.HasMore)
		}

		huge := e.page("bob", chat.ChatID, "limit=1000000")
		if len(huge.Messages) < 500 {
			t.Errorf("limit 1000000 returned %d messages, the cap must allow at least 500", len(huge.Messages))
		}
		if huge.HasMore != (len(huge.Messages) < n) {
			t.Errorf("capped page: %d messages, hasMore %v", len(huge.Messages), huge.HasMore)
		}
		check("capped page", huge.Messages, 0)

		for _, bad := range []string{"0", "-1", "abc", "1.5", "10abc", "0x10"} {
			path := "/api/chats/" + url.PathEscape(chat.ChatID) + "/messages?limit=" + url.QueryEscape(bad)
			status, raw := e.call("GET", path, e.token("bob"), nil)
			expectInvalid(t, "limit="+bad, status, raw)
		}
	})
}

// §4: a since the server cannot resolve gives a full sync, never a gap.
func TestE2EHistoryFailSafeCursor(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		ab := e.createDirect("alice", "bob")
		ac := e.createDirect("alice", "carol")
		alice := e.dial("alice", dialOpts{})
		var inAB, inAC []string
		for i := range 5 {
			inAB = append(inAB, alice.sendOK(ab.ChatID, fmt.Sprint("ab-", i), "to bob").MessageID)
		}
		for i := range 3 {
			inAC = append(inAC, alice.sendOK(ac.ChatID, fmt.Sprint("ac-", i), "to carol").MessageID)
		}

		full := []struct{ name, since string }{
			{"unknown messageId", "01JZZZZZZZZZZZZZZZZZZZZZZZ"},
			{"messageId of another chat", inAC[1]},
			{"garbage", "not a message id"},
			{"SQL", "' OR 1=1; DROP TABLE history; --"},
			{"empty", ""},
			{"very long", strings.Repeat("x", 5000)},
			{"invalid UTF-8", "\xff\xfe"},
		}
		for _, c := range full {
			p := e.page("alice", ab.ChatID, url.Values{"since": {c.since}}.Encode())
			if got := ids(p.Messages); !slices.Equal(got, inAB) || p.HasMore {
				t.Errorf("since %s: got %v (hasMore %v), want the full history %v", c.name, got, p.HasMore, inAB)
			}
		}
		// Valid cursors still work.
		if got := ids(e.page("alice", ab.ChatID, "since="+inAB[2]).Messages); !slices.Equal(got, inAB[3:]) {
			t.Errorf("since the third: %v, want %v", got, inAB[3:])
		}
		if got := ids(e.page("bob", ab.ChatID, "since="+inAB[4]).Messages); len(got) != 0 {
			t.Errorf("since the last: %v, want none", got)
		}
		// The other chat's history was not touched by any of that.
		if got := ids(e.history("carol", ac.ChatID, "")); !slices.Equal(got, inAC) {
			t.Errorf("carol's chat: %v, want %v", got, inAC)
		}
	})
}

// §2, §3: only members send, read history, add members and receive.
func TestE2EAuthorization(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		direct := e.createDirect("alice", "bob")
		group := e.createGroup("alice", "team", "bob")
		alice := e.dial("alice", dialOpts{})
		bob := e.dial("bob", dialOpts{})
		mallory := e.dial("mallory", dialOpts{})
		carol := e.dial("carol", dialOpts{})

		// Send: forbidden, nothing stored.
		for _, chat := range []string{direct.ChatID, group.ChatID} {
			f := mallory.sendErr(chat, "evil-"+chat, "let me in", "forbidden")
			if f.CorrelationID != "evil-"+chat {
				t.Errorf("forbidden error without the correlationId: %s", f)
			}
			for _, m := range e.history("alice", chat, "") {
				if m.SenderID == "mallory" {
					t.Errorf("a forbidden send was stored: %+v", m)
				}
			}
		}
		mallory.sendErr("no-such-chat", "nowhere", "hello?", "not_found")
		mallory.sync() // still open

		// History, members: 403 or 404, never the data.
		for _, chat := range []string{direct.ChatID, group.ChatID} {
			status, raw := e.call("GET", "/api/chats/"+url.PathEscape(chat)+"/messages", e.token("mallory"), nil)
			expectDenied(t, "non-member history", status, raw)
			status, raw = e.call("POST", "/api/chats/"+url.PathEscape(chat)+"/members", e.token("mallory"), map[string]string{"userId": "mallory"})
			expectDenied(t, "non-member adds a member", status, raw)
		}
		status, raw := e.call("GET", "/api/chats/no-such-chat/messages", e.token("mallory"), nil)
		expectDenied(t, "unknown chat history", status, raw)
		status, raw = e.call("POST", "/api/chats/no-such-chat/members", e.token("alice"), map[string]string{"userId": "bob"})
		expectDenied(t, "add to an unknown chat", status, raw)
		for _, c := range decode[struct{ Chats []chatJSON }](t, mustOK(t, e, "GET", "/api/chats", "alice")).Chats {
			if slices.Contains(c.Members, "mallory") {
				t.Errorf("mallory got into %+v", c)
			}
		}

		// A direct chat has exactly two members.
		status, raw = e.call("POST", "/api/chats/"+url.PathEscape(direct.ChatID)+"/members", e.token("alice"), map[string]string{"userId": "carol"})
		expectInvalid(t, "add to a direct chat", status, raw)

		// Non-members receive nothing of the chat.
		acc := alice.sendOK(direct.ChatID, "secret-1", "for bob only")
		bob.next("the direct message", messageID(acc.MessageID))
		gacc := alice.sendOK(group.ChatID, "secret-2", "for the team")
		bob.next("the group message", messageID(gacc.MessageID))
		mallory.expectNone("a frame of a chat mallory is not in", func(f frame) bool { return f.Type == "message" || f.Type == "read" }, quiet)

		// A member adds carol: she is in at once, live and in history.
		status, raw = e.call("POST", "/api/chats/"+url.PathEscape(group.ChatID)+"/members", e.token("bob"), map[string]string{"userId": "carol"})
		if status != http.StatusOK || !slices.Contains(decode[chatJSON](t, raw).Members, "carol") {
			t.Fatalf("bob adds carol: %d %s", status, raw)
		}
		welcome := alice.sendOK(group.ChatID, "welcome", "welcome carol")
		carol.next("the first group message after joining", messageID(welcome.MessageID))
		own := carol.sendOK(group.ChatID, "carol-1", "thanks")
		alice.next("carol's message", messageID(own.MessageID))
		if got := ids(e.history("carol", group.ChatID, "")); !slices.Equal(got, []string{gacc.MessageID, welcome.MessageID, own.MessageID}) {
			t.Errorf("carol's history of the group: %v", got)
		}
	})
}

// mustOK does an authenticated request as user and wants 200.
func mustOK(t *testing.T, e *env, method, path, user string) []byte {
	t.Helper()
	status, raw := e.call(method, path, e.token(user), nil)
	if status != http.StatusOK {
		t.Fatalf("%s %s as %s: %d %s", method, path, user, status, raw)
	}
	return raw
}

// §1: every bad token gets 401 on every endpoint, the upgrade included.
func TestE2ETokens(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		chat := e.createDirect("alice", "bob")
		good := e.token("alice")

		sign := func(m jwt.SigningMethod, key any, claims jwt.MapClaims) string {
			t.Helper()
			s, err := jwt.NewWithClaims(m, claims).SignedString(key)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		now := time.Now()
		alice := func() jwt.MapClaims { return jwt.MapClaims{"sub": "alice", "iat": now.Unix()} }
		expired := alice()
		expired["exp"] = now.Add(-time.Minute).Unix()
		noSub := jwt.MapClaims{"iat": now.Unix(), "exp": now.Add(time.Hour).Unix()}
		rsaKey, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		bad := []struct{ name, header string }{
			{"missing", ""},
			{"empty bearer", "Bearer "},
			{"malformed", "Bearer not-a-token"},
			{"three garbage parts", "Bearer a.b.c"},
			{"wrong scheme", "Basic " + good},
			{"no scheme", good},
			{"tampered signature", "Bearer " + good[:len(good)-2] + flip(good[len(good)-2:])},
			{"wrong secret", "Bearer " + sign(jwt.SigningMethodHS256, []byte("another secret, long enough"), alice())},
			{"expired", "Bearer " + sign(jwt.SigningMethodHS256, []byte(e.secret), expired)},
			{"alg none", "Bearer " + sign(jwt.SigningMethodNone, jwt.UnsafeAllowNoneSignatureType, alice())},
			{"RS256", "Bearer " + sign(jwt.SigningMethodRS256, rsaKey, alice())},
			{"HS384 with the secret", "Bearer " + sign(jwt.SigningMethodHS384, []byte(e.secret), alice())},
			{"no sub", "Bearer " + sign(jwt.SigningMethodHS256, []byte(e.secret), noSub)},
		}
		chatPath := "/api/chats/" + url.PathEscape(chat.ChatID)
		endpoints := []struct {
			method, path string
			body         any
		}{
			{"POST", "/api/chats", map[string]any{"kind": "direct", "members": []string{"mallory"}}},
			{"GET", "/api/chats", nil},
			{"POST", chatPath + "/members", map[string]string{"userId": "mallory"}},
			{"GET", chatPath + "/messages", nil},
			{"GET", chatPath + "/messages?since=x&limit=5", nil},
		}
		connected := e.srv.Engine().Stats().Connected
		for _, tok := range bad {
			h := http.Header{}
			if tok.header != "" {
				h.Set("Authorization", tok.header)
			}
			for _, ep := range endpoints {
				if status, raw := e.callHeader(ep.method, ep.path, h, ep.body); status != http.StatusUnauthorized {
					t.Errorf("%s token: %s %s answered %d %s, want 401", tok.name, ep.method, ep.path, status, raw)
				}
			}
			// The upgrade, with the header and (for real tokens) the query.
			ctx, cancel := context.WithTimeout(t.Context(), waitLong)
			if !isUpgradeStatus(ctx, e, h, nil, http.StatusUnauthorized) {
				t.Errorf("%s token: the upgrade was not refused with 401", tok.name)
			}
			if raw, ok := strings.CutPrefix(tok.header, "Bearer "); ok && raw != "" {
				q := url.Values{"token": {raw}}
				if !isUpgradeStatus(ctx, e, nil, q, http.StatusUnauthorized) {
					t.Errorf("%s token in ?token=: upgrade not refused with 401", tok.name)
				}
			}
			cancel()
		}
		if got := e.srv.Engine().Stats().Connected; got != connected {
			t.Errorf("bad tokens left %d connections registered, want %d", got, connected)
		}
		list := decode[struct{ Chats []chatJSON }](t, mustOK(t, e, "GET", "/api/chats", "alice"))
		if len(list.Chats) != 1 {
			t.Errorf("bad tokens changed alice's chats: %+v", list.Chats)
		}
		if got := decode[struct{ Chats []chatJSON }](t, mustOK(t, e, "GET", "/api/chats", "mallory")).Chats; len(got) != 0 {
			t.Errorf("a rejected request created chats for mallory: %+v", got)
		}

		// Good tokens: header, query parameter, and a token without exp.
		viaQuery := e.dial("alice", dialOpts{query: true, device: "browser"})
		if viaQuery.hello.UserID != "alice" {
			t.Errorf("?token= hello: %s", viaQuery.hello)
		}
		noExp, err := e.srv.Signer().Issue("bob", 0)
		if err != nil {
			t.Fatal(err)
		}
		bob := e.dial("bob", dialOpts{token: noExp})
		acc := viaQuery.sendOK(chat.ChatID, "q-1", "sent over a query-token socket")
		bob.next("the message", messageID(acc.MessageID))
		if status, raw := e.call("GET", "/api/chats", noExp, nil); status != http.StatusOK {
			t.Errorf("a token without exp: %d %s", status, raw)
		}
	})
}

// flip changes a base64url string so it decodes to different bytes.
func flip(s string) string {
	b := []byte(s)
	for i := range b {
		if b[i] == 'A' {
			b[i] = 'B'
		} else {
			b[i] = 'A'
		}
	}
	return string(b)
}

// isUpgradeStatus dials /ws with h and q and reports whether the upgrade was
// refused with status (and no socket opened).
func isUpgradeStatus(ctx context.Context, e *env, h http.Header, q url.Values, status int) bool {
	c, resp, _ := websocket.Dial(ctx, e.wsURL(q), &websocket.DialOptions{HTTPHeader: h})
	if c != nil {
		c.CloseNow()
		return false
	}
	return resp != nil && resp.StatusCode == status
}

// §3: bad frames get error frames and leave the connection open; a stream
// of them closes it with 1008; an oversized frame with 1009; other clients
// go on meanwhile.
func TestE2EBadFrames(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		const maxBody = 100
		e := newEnv(t, b, func(c *server.Config) { c.Tuning.MaxBodyBytes = maxBody })
		chat := e.createDirect("alice", "bob")
		pair := e.createDirect("carol", "dave")
		alice := e.dial("alice", dialOpts{})
		bob := e.dial("bob", dialOpts{})
		carol := e.dial("carol", dialOpts{})
		dave := e.dial("dave", dialOpts{})

		// A second pair exchanges for the whole abuse.
		var exchanged atomic.Int64
		stop := make(chan struct{})
		pairDone := make(chan error, 1)
		go func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					pairDone <- nil
					return
				default:
				}
				acc, err := carol.sendOKE(pair.ChatID, fmt.Sprint("pair-", i), "still here")
				if err != nil {
					pairDone <- err
					return
				}
				if _, err := dave.nextE(messageID(acc.MessageID), waitLong); err != nil {
					pairDone <- err
					return
				}
				if err := dave.writeE(map[string]any{"type": "ack", "messageIds": []string{acc.MessageID}}); err != nil {
					pairDone <- err
					return
				}
				exchanged.Add(1)
			}
		}()
		eventually(t, waitLong, "the second pair to exchange", func() bool { return exchanged.Load() > 0 })
		before := exchanged.Load()

		send := func(corr, body string) string {
			raw, _ := json.Marshal(sendFrame{Type: "send", ChatID: chat.ChatID, CorrelationID: corr, Body: body})
			return string(raw)
		}
		cases := []struct {
			name, raw  string
			binary     bool
			code, corr string
		}{
			{name: "not JSON", raw: "this is not json"},
			{name: "truncated JSON", raw: `{"type":"send",`},
			{name: "empty", raw: ""},
			{name: "JSON array", raw: `[{"type":"ping"}]`},
			{name: "JSON string", raw: `"ping"`},
			{name: "JSON null", raw: `null`},
			{name: "type not a string", raw: `{"type":5}`},
			{name: "no type", raw: `{"chatId":"x","body":"y"}`},
			{name: "unknown type", raw: `{"type":"bogus"}`},
			{name: "send without correlationId", raw: `{"type":"send","chatId":"` + chat.ChatID + `","body":"x"}`},
			{name: "send without chatId", raw: `{"type":"send","correlationId":"bad-1","body":"x"}`, corr: "bad-1"},
			{name: "send without body", raw: `{"type":"send","chatId":"` + chat.ChatID + `","correlationId":"bad-2"}`, corr: "bad-2"},
			{name: "send with a numeric body", raw: `{"type":"send","chatId":"` + chat.ChatID + `","correlationId":"bad-3","body":5}`, corr: "bad-3"},
			{name: "body over maxBodyBytes", raw: send("bad-4", strings.Repeat("x", maxBody+1)), code: "too_large", corr: "bad-4"},
			{name: "body over maxBodyBytes in bytes, not characters", raw: send("bad-5", strings.Repeat("€", 34)), code: "too_large", corr: "bad-5"},
			{name: "ack with a non-array", raw: `{"type":"ack","messageIds":"01ABC"}`},
			{name: "ack with an object", raw: `{"type":"ack","messageIds":{"a":1}}`},
			{name: "ack without ids", raw: `{"type":"ack"}`},
			{name: "ack with non-string ids", raw: `{"type":"ack","messageIds":[1,2]}`},
			{name: "read without messageId", raw: `{"type":"read","chatId":"` + chat.ChatID + `"}`},
			{name: "binary frame", raw: `{"type":"ping"}`, binary: true},
		}
		for _, c := range cases {
			typ := websocket.MessageText
			if c.binary {
				typ = websocket.MessageBinary
			}
			if err := alice.writeRawE(typ, []byte(c.raw)); err != nil {
				t.Fatalf("%s: write: %v", c.name, err)
			}
			// Not pong, nor presence (PROTOCOL.md §7.4: bob shares a chat).
			f := alice.next("the error for "+c.name, func(f frame) bool { return f.Type != "pong" && f.Type != "presence" })
			want := c.code
			if want == "" {
				want = "invalid"
			}
			if f.Type != "error" || f.Code != want || f.Message == "" {
				t.Errorf("%s: got %s, want an error frame with code %s", c.name, f, want)
			}
			if c.corr != "" && f.CorrelationID != c.corr {
				t.Errorf("%s: error frame %s does not name correlationId %s", c.name, f, c.corr)
			}
			alice.sync() // still open; a good frame also resets the bad-frame count
		}
		// At the limit, counted in bytes.
		atLimit := alice.sendOK(chat.ChatID, "edge-1", strings.Repeat("x", maxBody))
		atLimitUTF8 := alice.sendOK(chat.ChatID, "edge-2", strings.Repeat("€", maxBody/3))
		if got := ids(e.history("bob", chat.ChatID, "")); !slices.Equal(got, []string{atLimit.MessageID, atLimitUTF8.MessageID}) {
			t.Errorf("history after the bad frames: %v, want only the two good sends", got)
		}

		// A stream of bad frames: 1008.
		for i := range 25 {
			if err := alice.writeRawE(websocket.MessageText, []byte(fmt.Sprint("garbage ", i))); err != nil {
				break // closed already
			}
		}
		alice.expectClose(websocket.StatusPolicyViolation)

		// Over the transport limit (64 KiB): 1009.
		big := e.dial("alice", dialOpts{device: "big"})
		_ = big.writeRawE(websocket.MessageText, []byte(send("huge", strings.Repeat("y", 100<<10))))
		big.expectClose(websocket.StatusMessageTooBig)

		close(stop)
		if err := <-pairDone; err != nil {
			t.Fatalf("the second pair failed during the abuse: %v", err)
		}
		if exchanged.Load() <= before {
			t.Errorf("the second pair made no exchange during the abuse")
		}
		// The abuser's peer and the server are fine.
		fresh := e.dial("alice", dialOpts{})
		acc := fresh.sendOK(chat.ChatID, "after", "all good")
		bob.next("the message after the abuse", messageID(acc.MessageID))
		for _, m := range e.history("bob", chat.ChatID, "") {
			if strings.HasPrefix(m.CorrelationID, "bad-") || m.CorrelationID == "huge" {
				t.Errorf("a bad frame was stored: %+v", m)
			}
		}
	})
}

// §3: credits (maxInFlightSends) and the send rate; refused sends are not
// stored.
func TestE2ECredits(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, func(c *server.Config) {
			c.Tuning.MaxInFlightSends = 2
			c.Tuning.SendsPerSecond = 1000
			c.Ingest.BatchWait = 600 * time.Millisecond // slow commits: sends stay in flight
			c.Ingest.BatchSize = 1000
		})
		chat := e.createDirect("alice", "bob")
		alice := e.dial("alice", dialOpts{})
		if l := limitsOf(t, alice.hello); l.MaxInFlightSends != 2 {
			t.Fatalf("hello reports maxInFlightSends %d, want 2", l.MaxInFlightSends)
		}
		const n = 6
		for i := range n {
			alice.send(chat.ChatID, fmt.Sprint("c-", i), "credit test")
		}
		var acceptedIDs []string
		for i := range n {
			corr := fmt.Sprint("c-", i)
			f := alice.next("answer to "+corr, answers(corr))
			switch {
			case i < 2 && f.Type == "accepted":
				acceptedIDs = append(acceptedIDs, f.MessageID)
			case i >= 2 && f.Type == "error" && f.Code == "credit_exhausted":
			default:
				t.Errorf("%s answered %s; want the first two accepted and the rest credit_exhausted", corr, f)
			}
		}
		// Answers return the credits.
		acceptedIDs = append(acceptedIDs, alice.sendOK(chat.ChatID, "c-after", "credits are back").MessageID)
		if got := ids(e.history("bob", chat.ChatID, "")); !slices.Equal(got, acceptedIDs) {
			t.Errorf("history %v, want only the accepted %v", got, acceptedIDs)
		}
	})
}

func TestE2ERateLimit(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, func(c *server.Config) {
			c.Tuning.SendsPerSecond = 5
			c.Tuning.MaxInFlightSends = 100
		})
		chat := e.createDirect("alice", "bob")
		alice := e.dial("alice", dialOpts{})
		const n = 20
		for i := range n {
			alice.send(chat.ChatID, fmt.Sprint("r-", i), "rate test")
		}
		accepted := map[string]bool{}
		limited := 0
		for i := range n {
			corr := fmt.Sprint("r-", i)
			f := alice.next("answer to "+corr, answers(corr))
			switch {
			case f.Type == "accepted":
				accepted[f.MessageID] = true
			case f.Type == "error" && f.Code == "rate_limited":
				limited++
			default:
				t.Errorf("%s answered %s", corr, f)
			}
		}
		// A burst of 5 plus 5/s over the time it took.
		if len(accepted) < 5 || limited < 10 {
			t.Errorf("burst of %d at 5/s: %d accepted, %d rate_limited; want at least 5 and 10", n, len(accepted), limited)
		}
		got := ids(e.history("bob", chat.ChatID, ""))
		if len(got) != len(accepted) {
			t.Errorf("history holds %d messages, %d were accepted", len(got), len(accepted))
		}
		for _, id := range got {
			if !accepted[id] {
				t.Errorf("history holds %s, which was not accepted", id)
			}
		}
	})
}

// §3 close 4002: a client that never acks is withdrawn after the attempts
// limit, and recovers everything from history.
func TestE2EReaperAttempts(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		const lease = 300 * time.Millisecond
		e := newEnv(t, b, func(c *server.Config) {
			c.Tuning.Lease = lease
			c.Tuning.MaxDeliveryAttempts = 3
			c.Tuning.MaxPending = 100
		})
		chat := e.createDirect("alice", "bob")
		alice := e.dial("alice", dialOpts{})
		bob := e.dial("bob", dialOpts{})
		var sent []string
		start := time.Now() // no later than the first delivery
		for i := range 5 {
			sent = append(sent, alice.sendOK(chat.ChatID, fmt.Sprint("a-", i), "ack me").MessageID)
		}
		bob.expectClose(protocolAttempts)
		took := time.Since(start)
		for i, id := range sent {
			n := bob.count(messageID(id))
			if i == 0 && n != 3 {
				t.Errorf("the first message was delivered %d times before 4002, want 3 (maxDeliveryAttempts)", n)
			}
			if n > 3 {
				t.Errorf("message %d was delivered %d times before 4002, want at most 3", i, n)
			}
		}
		// Sent, re-sent after one lease, again after two, withdrawn when due
		// a fourth time.
		if took < 3*lease {
			t.Errorf("closed %v after the first send, before 3 leases of %v", took, lease)
		}
		alice.sync() // the sender is not affected

		bob = e.dial("bob", dialOpts{})
		if got := ids(e.history("bob", chat.ChatID, "")); !slices.Equal(got, sent) {
			t.Errorf("bob recovers %v from history, want %v", got, sent)
		}
	})
}

// §3 close 4003: too many unacknowledged messages. The server never has
// more than max-pending message frames unacknowledged on a connection (the
// push window, hello.limits.maxPending); a client that keeps it full, with
// more waiting, for longer than pending-timeout is withdrawn.
func TestE2EReaperPending(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, func(c *server.Config) {
			c.Tuning.MaxPending = 3
			c.Tuning.PendingTimeout = 500 * time.Millisecond
			c.Tuning.Lease = 30 * time.Second
		})
		chat := e.createDirect("alice", "bob")
		alice := e.dial("alice", dialOpts{})
		bob := e.dial("bob", dialOpts{})
		if got := limitsOf(t, bob.hello).MaxPending; got != 3 {
			t.Errorf("hello.limits.maxPending = %d, want the configured 3", got)
		}
		var sent []string
		for i := range 5 {
			sent = append(sent, alice.sendOK(chat.ChatID, fmt.Sprint("p-", i), "pile up").MessageID)
		}
		bob.expectClose(protocolPending)
		if n := bob.count(isType("message")); n != 3 {
			t.Errorf("bob got %d messages before 4003, want exactly the window of max-pending = 3", n)
		}
		alice.sync()
		bob = e.dial("bob", dialOpts{})
		if got := ids(e.history("bob", chat.ChatID, "")); !slices.Equal(got, sent) {
			t.Errorf("bob recovers %v from history, want %v", got, sent)
		}
	})
}

// §3 close 4003 and ReconnectGrace: a young connection is spared, the same
// connection past the grace is not.
func TestE2EReconnectGrace(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		const grace = 4 * time.Second
		e := newEnv(t, b, func(c *server.Config) {
			c.Tuning.MaxPending = 2
			c.Tuning.PendingTimeout = 200 * time.Millisecond
			c.Tuning.ReconnectGrace = grace
			c.Tuning.Lease = 30 * time.Second
		})
		chat := e.createDirect("alice", "bob")
		alice := e.dial("alice", dialOpts{})
		dialed := time.Now()
		bob := e.dial("bob", dialOpts{})
		var sent []string
		for i := range 4 {
			sent = append(sent, alice.sendOK(chat.ChatID, fmt.Sprint("g-", i), "within the grace").MessageID)
		}
		for _, id := range sent[:2] {
			bob.next("a message", messageID(id))
		}
		time.Sleep(400 * time.Millisecond) // behind a full window, past pending-timeout
		bob.sync()                         // still open
		if age := time.Since(dialed); age >= grace {
			t.Fatalf("inconclusive: the checks took %v, longer than the grace %v", age, grace)
		}
		// Past the grace, the reaper applies.
		time.Sleep(time.Until(dialed.Add(grace + 100*time.Millisecond)))
		bob.expectClose(protocolPending)
	})
}

// §3 close 4004: a client that answers no ping is closed; a quiet client
// that answers pings is not.
func TestE2EReaperIdle(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, func(c *server.Config) {
			c.Tuning.PingInterval = 300 * time.Millisecond
			c.Tuning.PingTimeout = time.Second
		})
		carol := e.dial("carol", dialOpts{}) // reads, so it answers pings
		start := time.Now()                  // no later than the registration the reaper measures from
		zombie := e.dialRaw("bob")           // reads nothing, so answers no ping
		eventually(t, waitLong, "the idle reaper to withdraw the silent connection", func() bool {
			return e.srv.Engine().Stats().Withdrawals[delivery.ReasonIdle] >= 1
		})
		if d := time.Since(start); d < 1300*time.Millisecond {
			t.Errorf("withdrawn after %v, before pingInterval+pingTimeout", d)
		}
		texts, code, err := zombie.readUntilClose(waitLong)
		if err != nil || code != int(protocolIdle) {
			t.Fatalf("the silent connection ended with code %d (%v), want 4004", code, err)
		}
		if len(texts) == 0 || decode[frame](t, []byte(texts[0])).Type != "hello" {
			t.Errorf("the silent client's first frame was not hello: %v", texts)
		}
		carol.sync()
		if n := e.srv.Engine().Stats().Withdrawals[delivery.ReasonIdle]; n != 1 {
			t.Errorf("%d idle withdrawals, want 1 (the client answering pings must stay)", n)
		}
		if got := e.srv.Engine().Stats().Connected; got != 1 {
			t.Errorf("%d connections registered, want 1 (carol)", got)
		}
	})
}

// §3 close 1001, G1, G3: Shutdown closes every socket with 1001; every send
// accepted before is in history after a restart on the same storage, and a
// reconnecting client recovers it with since=.
func TestE2EShutdownAndRestart(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, func(c *server.Config) {
			c.Tuning.SendsPerSecond = 100000
			c.Tuning.MaxInFlightSends = 1000
			c.Tuning.MaxPending = 10000 // bob does not ack the burst
		})
		chat := e.createDirect("alice", "bob")
		alice := e.dial("alice", dialOpts{})
		bob := e.dial("bob", dialOpts{})
		var before []string
		for i := range 5 {
			acc := alice.sendOK(chat.ChatID, fmt.Sprint("pre-", i), "before")
			bob.next("a message", messageID(acc.MessageID))
			bob.ack(acc.MessageID)
			before = append(before, acc.MessageID)
		}
		cursor := before[len(before)-1] // bob has processed everything up to here

		// Sends in flight while the server shuts down.
		const burst = 200
		for i := range burst {
			alice.send(chat.ChatID, fmt.Sprint("s-", i), "during shutdown")
		}
		shutdown := make(chan error, 1)
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			shutdown <- e.srv.Shutdown(ctx)
		}()
		alice.expectClose(websocket.StatusGoingAway)
		bob.expectClose(websocket.StatusGoingAway)
		if err := <-shutdown; err != nil {
			t.Fatalf("Shutdown: %v", err)
		}
		answered := map[string]int{}
		accepted := slices.Clone(before)
		for _, f := range alice.received {
			if f.Type == "accepted" || f.Type == "error" {
				answered[f.CorrelationID]++
			}
			if f.Type == "accepted" && strings.HasPrefix(f.CorrelationID, "s-") {
				accepted = append(accepted, f.MessageID)
			}
		}
		for corr, n := range answered {
			if n > 1 {
				t.Errorf("%s answered %d times", corr, n)
			}
		}
		t.Logf("%d of %d sends in flight were accepted before the shutdown", len(accepted)-len(before), burst)
		if _, err := e.dialE("alice", dialOpts{}); err == nil {
			t.Errorf("a socket opened on a server that was shut down")
		}

		e.restart()
		all := e.history("alice", chat.ChatID, "")
		inHistory := map[string]int{}
		for _, m := range all {
			inHistory[m.MessageID]++
		}
		for _, id := range accepted {
			if inHistory[id] != 1 {
				t.Errorf("accepted message %s is %d times in history after the restart, want once (G1)", id, inHistory[id])
			}
		}
		// bob reconnects and pages from the last message he processed.
		bob = e.dial("bob", dialOpts{})
		got := map[string]bool{}
		for _, m := range e.history("bob", chat.ChatID, cursor) {
			got[m.MessageID] = true
		}
		for _, id := range accepted[len(before):] {
			if !got[id] {
				t.Errorf("bob does not recover %s with since=%s (G3)", id, cursor)
			}
		}
		for _, id := range before {
			if got[id] {
				t.Errorf("since=%s returned %s, which precedes it", cursor, id)
			}
		}
		// The new server works.
		alice = e.dial("alice", dialOpts{})
		acc := alice.sendOK(chat.ChatID, "post-restart", "hello again")
		bob.next("a message after the restart", messageID(acc.MessageID))
		if inHistory[acc.MessageID] > 0 {
			t.Errorf("messageId %s reused after the restart", acc.MessageID)
		}
	})
}

// §3 read receipts.
func TestE2EReadReceipts(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		chat := e.createDirect("alice", "bob")
		other := e.createDirect("carol", "dave")
		alice := e.dial("alice", dialOpts{})
		bob := e.dial("bob", dialOpts{})
		mallory := e.dial("mallory", dialOpts{})

		acc := bob.sendOK(chat.ChatID, "r-1", "read me")
		alice.next("the message", messageID(acc.MessageID))
		alice.ack(acc.MessageID)
		alice.write(map[string]string{"type": "read", "chatId": chat.ChatID, "messageId": acc.MessageID})
		r := bob.expect("read")
		expectKeys(t, "read frame", r.Raw, "type", "chatId", "userId", "messageId")
		if r.ChatID != chat.ChatID || r.UserID != "alice" || r.MessageID != acc.MessageID {
			t.Errorf("bob got %s, want alice's read of %s in %s", r, acc.MessageID, chat.ChatID)
		}
		// A client cannot speak for someone else.
		alice.write(map[string]string{"type": "read", "chatId": chat.ChatID, "messageId": acc.MessageID, "userId": "carol"})
		if r := bob.expect("read"); r.UserID != "alice" {
			t.Errorf("a read frame claiming userId carol was forwarded as %s", r)
		}

		mallory.write(map[string]string{"type": "read", "chatId": chat.ChatID, "messageId": acc.MessageID})
		if f := mallory.expect("error"); f.Code != "forbidden" {
			t.Errorf("non-member read answered %s, want forbidden", f)
		}
		mallory.write(map[string]string{"type": "read", "chatId": other.ChatID, "messageId": "x"})
		if f := mallory.expect("error"); f.Code != "forbidden" {
			t.Errorf("non-member read answered %s, want forbidden", f)
		}
		mallory.write(map[string]string{"type": "read", "chatId": "no-such-chat", "messageId": "x"})
		if f := mallory.expect("error"); f.Code != "not_found" && f.Code != "forbidden" {
			t.Errorf("read in an unknown chat answered %s, want not_found or forbidden", f)
		}
		mallory.sync()
		bob.expectNone("a read receipt from a non-member", isType("read"), quiet)
	})
}

// §2: chats over HTTP, and no input gets a 5xx.
func TestE2EHTTPChats(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		tok := e.token("alice")

		status, raw := e.call("POST", "/api/chats", tok, map[string]any{"kind": "direct", "members": []string{"bob"}})
		if status != http.StatusCreated {
			t.Fatalf("first direct: %d %s, want 201", status, raw)
		}
		expectKeys(t, "chat", raw, "chatId", "createdBy", "kind", "lastRead", "members", "title", "unread")
		d1 := decode[chatJSON](t, raw)
		if d1.Kind != "direct" || !slices.Equal(sorted(d1.Members), []string{"alice", "bob"}) || d1.ChatID == "" {
			t.Errorf("direct chat = %+v", d1)
		}
		for _, again := range []struct{ user, peer string }{{"alice", "bob"}, {"bob", "alice"}} {
			status, raw := e.call("POST", "/api/chats", e.token(again.user), map[string]any{"kind": "direct", "members": []string{again.peer}})
			if status != http.StatusOK || decode[chatJSON](t, raw).ChatID != d1.ChatID {
				t.Errorf("direct again from %s: %d %s, want 200 with chat %s", again.user, status, raw, d1.ChatID)
			}
		}

		status, raw = e.call("POST", "/api/chats", tok, map[string]any{"kind": "group", "title": "Team", "members": []string{"bob", "carol"}})
		if status != http.StatusCreated {
			t.Fatalf("group: %d %s, want 201", status, raw)
		}
		g := decode[chatJSON](t, raw)
		if g.Kind != "group" || g.Title != "Team" || !slices.Equal(sorted(g.Members), []string{"alice", "bob", "carol"}) {
			t.Errorf("group = %+v, want Team with alice, bob, carol", g)
		}
		solo := decode[chatJSON](t, mustStatus(t, e, "POST", "/api/chats", "dave", map[string]any{"kind": "group", "title": "just me"}, http.StatusCreated))
		if !slices.Equal(solo.Members, []string{"dave"}) {
			t.Errorf("group without members = %+v, want the caller alone", solo)
		}

		listOf := func(user string) []string {
			var out []string
			for _, c := range decode[struct{ Chats []chatJSON }](t, mustOK(t, e, "GET", "/api/chats", user)).Chats {
				out = append(out, c.ChatID)
			}
			return sorted(out)
		}
		if got := listOf("alice"); !slices.Equal(got, sorted([]string{d1.ChatID, g.ChatID})) {
			t.Errorf("alice's chats %v", got)
		}
		if got := listOf("carol"); !slices.Equal(got, []string{g.ChatID}) {
			t.Errorf("carol's chats %v, want only the group", got)
		}
		if got := listOf("dave"); !slices.Equal(got, []string{solo.ChatID}) {
			t.Errorf("dave's chats %v", got)
		}
		if raw := mustOK(t, e, "GET", "/api/chats", "nobody"); !strings.Contains(string(raw), `"chats":[]`) {
			t.Errorf(`a user without chats gets %s, want {"chats":[]}`, raw)
		}

		// Adding a member: 200 with the chat; adding twice is harmless.
		for range 2 {
			status, raw = e.call("POST", "/api/chats/"+url.PathEscape(g.ChatID)+"/members", e.token("carol"), map[string]string{"userId": "erin"})
			if status != http.StatusOK || !slices.Contains(decode[chatJSON](t, raw).Members, "erin") {
				t.Errorf("carol adds erin: %d %s", status, raw)
			}
		}

		bad := []struct {
			name string
			body any
		}{
			{"malformed JSON", `{"kind":"direct",`},
			{"not an object", `["direct"]`},
			{"a string", `"direct"`},
			{"empty body", ""},
			{"missing kind", map[string]any{"members": []string{"bob"}}},
			{"unknown kind", map[string]any{"kind": "channel", "members": []string{"bob"}}},
			{"kind not a string", map[string]any{"kind": 1, "members": []string{"bob"}}},
			{"members not an array", map[string]any{"kind": "direct", "members": "bob"}},
			{"members not strings", map[string]any{"kind": "group", "title": "x", "members": []int{1, 2}}},
			{"title not a string", map[string]any{"kind": "group", "title": 7, "members": []string{"bob"}}},
			{"direct without a peer", map[string]any{"kind": "direct", "members": []string{}}},
			{"direct with oneself", map[string]any{"kind": "direct", "members": []string{"alice"}}},
			{"direct with two peers", map[string]any{"kind": "direct", "members": []string{"bob", "carol"}}},
			{"member with a control character", map[string]any{"kind": "direct", "members": []string{"b\x00ob"}}},
			{"empty member id", map[string]any{"kind": "group", "title": "x", "members": []string{""}}},
			{"member id too long", map[string]any{"kind": "group", "title": "x", "members": []string{strings.Repeat("m", 300)}}},
		}
		for _, c := range bad {
			status, raw := e.call("POST", "/api/chats", tok, c.body)
			expectInvalid(t, "POST /api/chats "+c.name, status, raw)
		}
		// A body over the limit: 413 (TestE2EHTTPStatuses).
		for _, c := range []struct {
			name string
			body any
		}{
			{"missing userId", map[string]any{}},
			{"userId not a string", map[string]any{"userId": 5}},
			{"malformed JSON", `{"userId":`},
			{"empty userId", map[string]any{"userId": ""}},
		} {
			status, raw := e.call("POST", "/api/chats/"+url.PathEscape(g.ChatID)+"/members", tok, c.body)
			expectInvalid(t, "POST members "+c.name, status, raw)
		}

		// Odd requests: never a 5xx (call reports any).
		for _, r := range []struct{ method, path string }{
			{"GET", "/api/chats/" + strings.Repeat("c", 300) + "/messages"},
			{"GET", "/api/chats/%FF%FE/messages"},
			{"GET", "/api/chats/%2F%2E%2E/messages"},
			{"GET", "/api/chats/x/messages?limit=99999999999999999999999"},
			{"GET", "/api/chats/x/messages?since=%00"},
			{"DELETE", "/api/chats"},
			{"PUT", "/api/chats/" + url.PathEscape(g.ChatID) + "/members"},
			{"GET", "/api/nothing"},
			{"POST", "/api/chats/" + url.PathEscape(g.ChatID) + "/messages"},
		} {
			e.call(r.method, r.path, tok, nil)
		}
		if status, raw := e.call("GET", "/ws", tok, nil); status == http.StatusSwitchingProtocols || status >= 500 {
			t.Errorf("GET /ws without an upgrade: %d %s", status, raw)
		}
	})
}

func mustStatus(t *testing.T, e *env, method, path, user string, body any, want int) []byte {
	t.Helper()
	status, raw := e.call(method, path, e.token(user), body)
	if status != want {
		t.Fatalf("%s %s as %s: %d %s, want %d", method, path, user, status, raw, want)
	}
	return raw
}

func sorted(xs []string) []string {
	xs = slices.Clone(xs)
	slices.Sort(xs)
	return xs
}
