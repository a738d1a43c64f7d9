package server_test

// End-to-end tests of PROTOCOL.md §7.1, §7.2, §7.5-§7.8 over real sockets.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/server"
)

// chat7JSON is a chat with the fields of PROTOCOL.md §7.
type chat7JSON struct {
	ChatID       string            `json:"chatId"`
	Kind         string            `json:"kind"`
	Title        string            `json:"title"`
	Members      []string          `json:"members"`
	Admins       []string          `json:"admins"`
	History      string            `json:"history"`
	LastRead     map[string]string `json:"lastRead"`
	Unread       *int              `json:"unread"`
	LastMessage  *msgJSON          `json:"lastMessage"`
	LastActivity string            `json:"lastActivity"`
}

type list7JSON struct {
	Chats      []chat7JSON `json:"chats"`
	NextCursor *string     `json:"nextCursor"`
}

func (e *env) list7(user, query string) list7JSON {
	e.t.Helper()
	path := "/api/chats"
	if query != "" {
		path += "?" + query
	}
	status, raw := e.call("GET", path, e.token(user), nil)
	if status != http.StatusOK {
		e.t.Fatalf("GET %s as %s: %d %s", path, user, status, raw)
	}
	return decode[list7JSON](e.t, raw)
}

func chat7IDs(cs []chat7JSON) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.ChatID
	}
	return out
}

// sendMany sends n messages as c to chatID and returns their ids in order.
func sendMany(c *wsClient, chatID, prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = c.sendOK(chatID, fmt.Sprintf("%s-%d", prefix, i), fmt.Sprintf("%s %d", prefix, i)).MessageID
	}
	return out
}

// TestE2ENewestPage: before=end is the newest page, oldest first, and a
// client pages back by the first messageId it got; an unresolvable before
// is before=end; since with before is 400 invalid (PROTOCOL.md §7.1). On
// every backend.
func TestE2ENewestPage(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, func(c *server.Config) { c.Tuning.SendsPerSecond = 1000 })
		g := e.createGroup("alice", "T", "bob")
		alice := e.dial("alice", dialOpts{})
		all := sendMany(alice, g.ChatID, "n", 12)
		p := e.page("bob", g.ChatID, "before=end&limit=5")
		if !slices.Equal(ids(p.Messages), all[7:]) || !p.HasMore {
			t.Fatalf("before=end: %v hasMore=%v, want %v true", ids(p.Messages), p.HasMore, all[7:])
		}
		var got []string
		got = append(ids(p.Messages), got...)
		for i := 0; p.HasMore; i++ {
			p = e.page("bob", g.ChatID, "limit=5&before="+url.QueryEscape(p.Messages[0].MessageID))
			got = append(ids(p.Messages), got...)
			if i > 5 {
				t.Fatal("paging back does not end")
			}
		}
		if !slices.Equal(got, all) {
			t.Errorf("paged back: %v, want %v", got, all)
		}
		for _, before := range []string{"nosuch", "", "%FF"} {
			p := e.page("bob", g.ChatID, "limit=3&before="+before)
			if !slices.Equal(ids(p.Messages), all[9:]) || !p.HasMore {
				t.Errorf("before=%q: %v, want the newest page %v", before, ids(p.Messages), all[9:])
			}
		}
		status, raw := e.call("GET", "/api/chats/"+g.ChatID+"/messages?since="+all[0]+"&before=end", e.token("bob"), nil)
		expectInvalid(t, "since with before", status, raw)
		status, raw = e.call("GET", "/api/chats/"+g.ChatID+"/messages?before=end", e.token("carol"), nil)
		expectDenied(t, "a non-member's newest page", status, raw)
		if p := e.page("bob", g.ChatID, "since="+all[10]); !slices.Equal(ids(p.Messages), all[11:]) {
			t.Errorf("since still pages forward: %v", ids(p.Messages))
		}
	})
}

// TestE2EStrictBodies: HTTP bodies are decoded like frames: a repeated
// key, a key in another letter case, an unknown key or a lone surrogate
// gets 400 invalid naming the key, and changes nothing (PROTOCOL.md §7.7).
func TestE2EStrictBodies(t *testing.T) {
	t.Parallel()
	coreBackends(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		g := e.createGroup("alice", "T", "bob")
		before := e.list7("alice", "")
		for _, tc := range []struct {
			method, path, body, key string
		}{
			{"POST", "/api/chats", `{"kind":"group","kind":"direct","members":["bob"]}`, `"kind"`},
			{"POST", "/api/chats", `{"Kind":"group","members":["bob"]}`, `"Kind"`},
			{"POST", "/api/chats", `{"kind":"group","members":["bob"],"color":"red"}`, `"color"`},
			{"POST", "/api/chats", `{"kind":"group","title":"a\ud800","members":["bob"]}`, `title`},
			{"POST", "/api/chats", `{"kind":"group","members":["bob","\udc00"]}`, `members`},
			{"POST", "/api/chats", `{"kind":"group","members":["bob"],"history":"member","hist\u006fry":"shared"}`, `"history"`},
			{"POST", "/api/chats/" + g.ChatID + "/members", `{"user":"carol"}`, `"user"`},
			{"POST", "/api/chats/" + g.ChatID + "/members", `{"userId":"carol","UserId":"dave"}`, `"UserId"`},
			{"PATCH", "/api/chats/" + g.ChatID, `{"title":"x","title":"y"}`, `"title"`},
			{"PATCH", "/api/chats/" + g.ChatID, `{"name":"x"}`, `"name"`},
			{"POST", "/api/chats/" + g.ChatID + "/admins", `{"userID":"bob"}`, `"userID"`},
		} {
			status, raw := e.call(tc.method, tc.path, e.token("alice"), tc.body)
			expectInvalid(t, tc.method+" "+tc.path+" "+tc.body, status, raw)
			if !strings.Contains(string(raw), strings.ReplaceAll(tc.key, `"`, `\"`)) {
				t.Errorf("%s %s: %s does not name %s", tc.method, tc.body, raw, tc.key)
			}
		}
		after := e.list7("alice", "")
		if !slices.Equal(chat7IDs(after.Chats), chat7IDs(before.Chats)) {
			t.Errorf("refused bodies changed alice's chats: %v -> %v", chat7IDs(before.Chats), chat7IDs(after.Chats))
		}
		c := e.chat7("alice", g.ChatID)
		if c.Title != "T" || !slices.Equal(c.Members, []string{"alice", "bob"}) || !slices.Equal(c.Admins, []string{"alice"}) {
			t.Errorf("refused bodies changed the group: %+v", c)
		}
	})
}

// TestE2EUnauthorized: every 401 carries WWW-Authenticate: Bearer and the
// code unauthorized (PROTOCOL.md §7.7, §7.8), the upgrade's included.
func TestE2EUnauthorized(t *testing.T) {
	t.Parallel()
	e := newEnv(t, backends(t)[0], nil)
	for _, tc := range []struct{ method, path, auth string }{
		{"GET", "/api/chats", ""},
		{"GET", "/api/chats", "Bearer nonsense"},
		{"POST", "/api/chats", "Basic abc"},
		{"GET", "/api/chats/c_x", ""},
		{"PATCH", "/api/chats/c_x", ""},
		{"POST", "/api/chats/c_x/admins", ""},
		{"GET", "/ws", ""},
		{"GET", "/admin/stats", ""},
	} {
		req, err := http.NewRequestWithContext(t.Context(), tc.method, e.srv.URL()+tc.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		resp, err := e.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body errorJSON
		err = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || body.Error.Code != "unauthorized" || err != nil {
			t.Errorf("%s %s (%q): %d %+v %v, want 401 unauthorized", tc.method, tc.path, tc.auth, resp.StatusCode, body, err)
		}
		if got := resp.Header.Get("WWW-Authenticate"); !strings.HasPrefix(got, "Bearer") {
			t.Errorf("%s %s: WWW-Authenticate %q, want Bearer", tc.method, tc.path, got)
		}
	}
}

// TestE2ERateLimitedRetryAfter: rate_limited errors carry retryAfterMs
// (PROTOCOL.md §7.7): a send over sendsPerSecond, a send over the fan-out
// budget, and an upgrade over the connections of one user (with
// Retry-After).
func TestE2ERateLimitedRetryAfter(t *testing.T) {
	t.Parallel()
	e := newEnv(t, backends(t)[0], func(c *server.Config) {
		c.Tuning.SendsPerSecond = 2
		c.MaxConnsPerUser = 1
	})
	g := e.createGroup("alice", "T", "bob")
	alice := e.dial("alice", dialOpts{})
	var limited frame
	for i := range 10 {
		corr := fmt.Sprintf("r-%d", i)
		alice.send(g.ChatID, corr, "x")
		f := alice.next("answer", answers(corr))
		if f.Type == "error" {
			limited = f
			break
		}
	}
	var ej struct {
		Code         string `json:"code"`
		RetryAfterMs int64  `json:"retryAfterMs"`
	}
	if err := json.Unmarshal(limited.Raw, &ej); err != nil || ej.Code != "rate_limited" || ej.RetryAfterMs < 1 || ej.RetryAfterMs > 1000 {
		t.Errorf("over sendsPerSecond: %s, want rate_limited with retryAfterMs in 1..1000", limited.Raw)
	}
	status, raw := e.callHeader("GET", "/ws", http.Header{"Authorization": bearerHeader(e.token("alice"))}, nil)
	var body struct {
		Error struct {
			Code         string `json:"code"`
			RetryAfterMs int64  `json:"retryAfterMs"`
		} `json:"error"`
	}
	if json.Unmarshal(raw, &body); status != http.StatusTooManyRequests || body.Error.Code != "rate_limited" || body.Error.RetryAfterMs < 1 {
		t.Errorf("a second connection over MaxConnsPerUser: %d %s, want 429 rate_limited with retryAfterMs", status, raw)
	}
}

// TestE2EFanoutRetryAfter: a send refused by the fan-out budget carries
// retryAfterMs too.
func TestE2EFanoutRetryAfter(t *testing.T) {
	t.Parallel()
	e := newEnv(t, backends(t)[0], func(c *server.Config) { c.Tuning.FanoutPerSecond = 4 })
	g := e.createGroup("alice", "T", "bob", "carol", "dave")
	alice := e.dial("alice", dialOpts{})
	var limited frame
	for i := range 10 {
		corr := fmt.Sprintf("f-%d", i)
		alice.send(g.ChatID, corr, "x")
		if f := alice.next("answer", answers(corr)); f.Type == "error" {
			limited = f
			break
		}
	}
	var ej struct {
		Code         string `json:"code"`
		RetryAfterMs int64  `json:"retryAfterMs"`
	}
	if err := json.Unmarshal(limited.Raw, &ej); err != nil || ej.Code != "rate_limited" || ej.RetryAfterMs < 1 || ej.RetryAfterMs > 1000 {
		t.Errorf("over fanoutPerSecond: %s, want rate_limited with retryAfterMs in 1..1000", limited.Raw)
	}
}

func (e *env) chat7(user, chatID string) chat7JSON {
	e.t.Helper()
	status, raw := e.call("GET", "/api/chats/"+url.PathEscape(chatID), e.token(user), nil)
	if status != http.StatusOK {
		e.t.Fatalf("GET chat %s as %s: %d %s", chatID, user, status, raw)
	}
	return decode[chat7JSON](e.t, raw)
}

// TestE2EChatList: GET /api/chats is ordered by lastActivity, newest
// first, each chat with lastMessage, paged by limit and cursor; GET
// /api/chats/{chatId} answers one chat, 403/404 for a non-member
// (PROTOCOL.md §7.2).
func TestE2EChatList(t *testing.T) {
	t.Parallel()
	coreBackends(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		a := e.createGroup("alice", "A", "bob")
		time.Sleep(2 * time.Millisecond)
		d := e.createDirect("alice", "bob")
		time.Sleep(2 * time.Millisecond)
		c := e.createGroup("alice", "C", "carol")
		l := e.list7("alice", "")
		if !slices.Equal(chat7IDs(l.Chats), []string{c.ChatID, d.ChatID, a.ChatID}) || l.NextCursor != nil {
			t.Fatalf("alice's list = %v next %v, want newest first", chat7IDs(l.Chats), l.NextCursor)
		}
		if l.Chats[0].LastMessage != nil || l.Chats[0].LastActivity == "" {
			t.Errorf("an idle chat: %+v, want no lastMessage and a lastActivity", l.Chats[0])
		}
		bob := e.dial("bob", dialOpts{})
		m := bob.sendOK(a.ChatID, "b-1", "news")
		l = e.list7("alice", "")
		if !slices.Equal(chat7IDs(l.Chats), []string{a.ChatID, c.ChatID, d.ChatID}) {
			t.Fatalf("after a message in A: %v", chat7IDs(l.Chats))
		}
		top := l.Chats[0]
		if top.LastMessage == nil || top.LastMessage.MessageID != m.MessageID || top.LastMessage.Body != "news" ||
			top.LastMessage.SenderID != "bob" || top.LastMessage.ChatID != a.ChatID || top.LastMessage.CorrelationID != "b-1" {
			t.Errorf("lastMessage = %+v, want %s", top.LastMessage, m.MessageID)
		}
		if got := expectUTCTime(t, "lastActivity", top.LastActivity); !got.Equal(expectUTCTime(t, "sentAt", m.SentAt)) {
			t.Errorf("lastActivity %s, want the message's sentAt %s", top.LastActivity, m.SentAt)
		}
		if *top.Unread != 1 || top.History != "shared" || !slices.Equal(top.Admins, []string{"alice"}) {
			t.Errorf("A in the list = %+v", top)
		}
		// Paging.
		p1 := e.list7("alice", "limit=2")
		if !slices.Equal(chat7IDs(p1.Chats), []string{a.ChatID, c.ChatID}) || p1.NextCursor == nil {
			t.Fatalf("limit=2: %v next %v", chat7IDs(p1.Chats), p1.NextCursor)
		}
		p2 := e.list7("alice", "limit=2&cursor="+url.QueryEscape(*p1.NextCursor))
		if !slices.Equal(chat7IDs(p2.Chats), []string{d.ChatID}) || p2.NextCursor != nil {
			t.Errorf("second page: %v next %v", chat7IDs(p2.Chats), p2.NextCursor)
		}
		if l := e.list7("alice", "limit=500"); len(l.Chats) != 3 {
			t.Errorf("limit=500: %d chats", len(l.Chats))
		}
		for _, q := range []string{"cursor=garbage!", "limit=0", "limit=x"} {
			status, raw := e.call("GET", "/api/chats?"+q, e.token("alice"), nil)
			expectInvalid(t, "GET /api/chats?"+q, status, raw)
		}
		// One chat.
		one := e.chat7("bob", a.ChatID)
		if one.ChatID != a.ChatID || one.LastMessage == nil || one.LastMessage.MessageID != m.MessageID || *one.Unread != 0 {
			t.Errorf("GET /api/chats/%s as bob = %+v", a.ChatID, one)
		}
		status, raw := e.call("GET", "/api/chats/"+a.ChatID, e.token("carol"), nil)
		expectDenied(t, "GET a chat as a non-member", status, raw)
		if status, raw := e.call("GET", "/api/chats/c_nosuch", e.token("carol"), nil); status != http.StatusNotFound {
			t.Errorf("GET an unknown chat: %d %s, want 404", status, raw)
		}
	})
}

// TestE2EAdmins: PROTOCOL.md §7.5 over HTTP, with the updated events on
// the members' devices.
func TestE2EAdmins(t *testing.T) {
	t.Parallel()
	coreBackends(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		g := e.createGroup("alice", "Team", "bob", "carol")
		created := decode[chat7JSON](t, mustJSON(t, g))
		_ = created
		if c := e.chat7("alice", g.ChatID); !slices.Equal(c.Admins, []string{"alice"}) || c.History != "shared" {
			t.Errorf("a new group: admins %v history %q, want [alice] shared", c.Admins, c.History)
		}
		alice := e.dial("alice", dialOpts{})
		bob := e.dial("bob", dialOpts{})
		carol := e.dial("carol", dialOpts{})
		tok := func(u string) string { return e.token(u) }
		path := "/api/chats/" + g.ChatID

		// Refusals change nothing and send no event.
		if status, raw := e.call("PATCH", path, tok("bob"), map[string]string{"title": "Bob's"}); status != http.StatusForbidden {
			t.Errorf("rename by a non-admin: %d %s, want 403", status, raw)
		}
		if status, raw := e.call("PATCH", path, tok("dave"), map[string]string{"title": "Dave's"}); status != http.StatusForbidden && status != http.StatusNotFound {
			t.Errorf("rename by a non-member: %d %s", status, raw)
		}
		if status, raw := e.call("POST", path+"/admins", tok("bob"), map[string]string{"userId": "bob"}); status != http.StatusForbidden {
			t.Errorf("a non-admin makes itself admin: %d %s, want 403", status, raw)
		}
		if status, raw := e.call("DELETE", path+"/members/carol", tok("bob"), nil); status != http.StatusForbidden {
			t.Errorf("a non-admin removes a member: %d %s, want 403", status, raw)
		}
		status, raw := e.call("POST", path+"/admins", tok("alice"), map[string]string{"userId": "eve"})
		expectInvalid(t, "making a non-member an admin", status, raw)
		status, raw = e.call("PATCH", path, tok("alice"), map[string]any{})
		expectInvalid(t, "a rename without a title", status, raw)
		status, raw = e.call("PATCH", path, tok("alice"), map[string]string{"title": strings.Repeat("t", 201)})
		expectInvalid(t, "a rename to 201 bytes", status, raw)
		status, raw = e.call("PATCH", "/api/chats/"+e.createDirect("alice", "eve").ChatID, tok("alice"), map[string]string{"title": "x"})
		expectInvalid(t, "renaming a direct chat", status, raw)
		bob.expectNone("an event for a refused change", isType("chat"), quiet)

		// alice makes bob an admin: every member's devices get updated.
		status, raw = e.call("POST", path+"/admins", tok("alice"), map[string]string{"userId": "bob"})
		if c := decode[chat7JSON](t, raw); status != http.StatusOK || !slices.Equal(c.Admins, []string{"alice", "bob"}) {
			t.Fatalf("add admin bob: %d %s", status, raw)
		}
		for _, c := range []*wsClient{alice, bob, carol} {
			ev := decode[struct {
				Event string    `json:"event"`
				Chat  chat7JSON `json:"chat"`
			}](t, c.next("updated after add admin", chatEventOf(g.ChatID, "updated")).Raw)
			if !slices.Equal(ev.Chat.Admins, []string{"alice", "bob"}) {
				t.Errorf("%s: updated event admins %v", c.name, ev.Chat.Admins)
			}
		}
		// bob, now an admin, renames and removes carol.
		status, raw = e.call("PATCH", path, tok("bob"), map[string]string{"title": "Renamed"})
		if c := decode[chat7JSON](t, raw); status != http.StatusOK || c.Title != "Renamed" {
			t.Fatalf("rename by the new admin: %d %s", status, raw)
		}
		for _, c := range []*wsClient{alice, bob, carol} {
			ev := decode[struct {
				Chat chat7JSON `json:"chat"`
			}](t, c.next("updated after rename", chatEventOf(g.ChatID, "updated")).Raw)
			if ev.Chat.Title != "Renamed" {
				t.Errorf("%s: updated event title %q", c.name, ev.Chat.Title)
			}
		}
		if status, raw := e.removeMember("bob", g.ChatID, "carol"); status != http.StatusOK {
			t.Errorf("an admin other than the creator removes carol: %d %s", status, raw)
		}
		carol.next("carol removed", chatEventOf(g.ChatID, "removed"))
		// Stepping down: only oneself.
		if status, raw := e.call("DELETE", path+"/admins/alice", tok("bob"), nil); status != http.StatusForbidden {
			t.Errorf("bob removes alice as admin: %d %s, want 403", status, raw)
		}
		status, raw = e.call("DELETE", path+"/admins/alice", tok("alice"), nil)
		if c := decode[chat7JSON](t, raw); status != http.StatusOK || !slices.Equal(c.Admins, []string{"bob"}) {
			t.Errorf("alice steps down: %d %s", status, raw)
		}
		bob.next("updated after step-down", chatEventOf(g.ChatID, "updated"))
		// The last admin leaving: the earliest-joined member (alice) takes over.
		if status, raw := e.addMember("alice", g.ChatID, "dave"); status != http.StatusOK {
			t.Fatalf("add dave: %d %s", status, raw)
		}
		if status, raw := e.removeMember("bob", g.ChatID, "bob"); status != http.StatusOK {
			t.Fatalf("bob leaves: %d %s", status, raw)
		}
		if c := e.chat7("dave", g.ChatID); !slices.Equal(c.Admins, []string{"alice"}) {
			t.Errorf("after the last admin left: admins %v, want [alice] (joined earliest)", c.Admins)
		}
		// The last member leaving closes the group.
		e.removeMember("alice", g.ChatID, "dave")
		if status, raw := e.removeMember("alice", g.ChatID, "alice"); status != http.StatusOK {
			t.Fatalf("the last member leaves: %d %s", status, raw)
		}
		if status, raw := e.addMember("alice", g.ChatID, "alice"); status != http.StatusNotFound {
			t.Errorf("adding to a closed group: %d %s, want 404", status, raw)
		}
		for _, p := range []string{path, path + "/messages", path + "/messages?before=end"} {
			if status, raw := e.call("GET", p, tok("alice"), nil); status != http.StatusNotFound {
				t.Errorf("GET %s of a closed group: %d %s, want 404", p, status, raw)
			}
		}
	})
}

func mustJSON(t testing.TB, v any) []byte {
	t.Helper()
	raw, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// TestE2EHistoryVisibility: PROTOCOL.md §7.6 on every backend. In a
// "member" group bob reads only what was committed while he was a member;
// in both modes a message committed while he was removed is never pushed
// to him live after he is added again.
func TestE2EHistoryVisibility(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		for _, mode := range []string{"member", "shared"} {
			status, raw := e.call("POST", "/api/chats", e.token("alice"), map[string]any{"kind": "group", "title": mode, "members": []string{"carol"}, "history": mode})
			g := decode[chat7JSON](t, raw)
			if status != http.StatusCreated || g.History != mode {
				t.Fatalf("create a %s group: %d %s", mode, status, raw)
			}
			alice := e.dial("alice", dialOpts{device: mode})
			bob := e.dial("bob", dialOpts{device: mode})
			early := alice.sendOK(g.ChatID, mode+"-0", "before bob").MessageID
			if status, raw := e.addMember("alice", g.ChatID, "bob"); status != http.StatusOK {
				t.Fatalf("add bob: %d %s", status, raw)
			}
			m1 := alice.sendOK(g.ChatID, mode+"-1", "with bob").MessageID
			bob.ack(bob.next("m1", messageID(m1)).MessageID)
			if status, raw := e.removeMember("alice", g.ChatID, "bob"); status != http.StatusOK {
				t.Fatalf("remove bob: %d %s", status, raw)
			}
			away := alice.sendOK(g.ChatID, mode+"-2", "while bob is away").MessageID
			if status, raw := e.call("GET", "/api/chats/"+g.ChatID+"/messages?before=end", e.token("bob"), nil); status != http.StatusForbidden && status != http.StatusNotFound {
				t.Errorf("%s: bob reads while removed: %d %s", mode, status, raw)
			}
			if status, raw := e.addMember("alice", g.ChatID, "bob"); status != http.StatusOK {
				t.Fatalf("re-add bob: %d %s", status, raw)
			}
			m3 := alice.sendOK(g.ChatID, mode+"-3", "bob is back").MessageID
			bob.ack(bob.next("m3", messageID(m3)).MessageID)
			bob.expectNone(mode+": a message committed while bob was removed, pushed live", messageID(away), quiet)
			reconnected := e.dial("bob", dialOpts{device: mode + "-2"})
			reconnected.expectNone(mode+": the message of bob's absence on a new device", messageID(away), quiet)

			want := []string{m1, m3}
			if mode == "shared" {
				want = []string{early, m1, away, m3}
			}
			if got := ids(e.history("bob", g.ChatID, "")); !slices.Equal(got, want) {
				t.Errorf("%s: bob's history = %v, want %v", mode, got, want)
			}
			if got := ids(e.page("bob", g.ChatID, "before=end&limit=100").Messages); !slices.Equal(got, want) {
				t.Errorf("%s: bob's newest page = %v, want %v", mode, got, want)
			}
			c := e.chat7("bob", g.ChatID)
			if c.History != mode || c.LastMessage == nil || c.LastMessage.MessageID != m3 || *c.Unread != len(want) {
				t.Errorf("%s: bob's chat = %+v, want lastMessage %s, unread %d", mode, c, m3, len(want))
			}
			if got := ids(e.history("carol", g.ChatID, "")); len(got) != 4 {
				t.Errorf("%s: carol, a member throughout, reads %d", mode, len(got))
			}
			// A read receipt of a message bob may not see is not_found, as
			// for an unknown id, so it cannot tell the message exists (a
			// fresh user's receipt was stored and echoed); in a shared
			// group both are his to mark.
			for _, id := range []string{early, away} {
				bob.write(map[string]string{"type": "read", "chatId": g.ChatID, "messageId": id})
				if mode == "member" {
					if f := bob.expect("error"); f.Code != "not_found" {
						t.Errorf("member: bob's read of a message he may not see answered %s, want not_found", f)
					}
				}
			}
			bob.sync()
			bob.expectNone(mode+": an error for a read receipt", isType("error"), quiet)
			if mode == "member" {
				// Nor does a delete tell: bob is made an admin, and his
				// DELETE of the hidden message is answered word for word
				// as that of an unknown id.
				if status, raw := e.call("POST", "/api/chats/"+g.ChatID+"/admins", e.token("alice"), map[string]any{"userId": "bob"}); status != http.StatusOK {
					t.Fatalf("make bob an admin: %d %s", status, raw)
				}
				st1, hidden := e.call("DELETE", "/api/chats/"+g.ChatID+"/messages/"+away, e.token("bob"), nil)
				st2, unknown := e.call("DELETE", "/api/chats/"+g.ChatID+"/messages/01NOSUCHMESSAGE0000000000", e.token("bob"), nil)
				if st1 != http.StatusNotFound || st2 != http.StatusNotFound ||
					strings.ReplaceAll(string(hidden), away, "X") != strings.ReplaceAll(string(unknown), "01NOSUCHMESSAGE0000000000", "X") {
					t.Errorf("an admin's DELETE of a message hidden from him: %d %s; of an unknown id: %d %s; want the same 404", st1, hidden, st2, unknown)
				}
				// Nor does an edit: of the hidden message (another
				// user's) it is answered as of an unknown id.
				var answers []string
				for i, id := range []string{away, "01NOSUCHMESSAGE0000000000"} {
					bob.write(map[string]string{"type": "send", "chatId": g.ChatID, "correlationId": fmt.Sprint("edit-", i), "body": "x", "edits": id})
					f := bob.expect("error")
					answers = append(answers, f.Code+": "+strings.ReplaceAll(strings.ReplaceAll(f.Message, id, "X"), fmt.Sprint("edit-", i), "K"))
				}
				if answers[0] != answers[1] || !strings.HasPrefix(answers[0], "not_found") {
					t.Errorf("bob's edit of a message hidden from him answered %q, of an unknown id %q; want the same not_found", answers[0], answers[1])
				}
				for _, m := range e.history("carol", g.ChatID, "") {
					if m.MessageID == away && (m.Deleted || m.Body == "") {
						t.Errorf("the message hidden from bob was deleted by him: carol reads %+v", m)
					}
				}
			}
		}
		status, raw := e.call("POST", "/api/chats", e.token("alice"), map[string]any{"kind": "group", "members": []string{"bob"}, "history": "everything"})
		expectInvalid(t, "an unknown history setting", status, raw)
	})
}

// TestFleetAdminEvents: an admin change made through one process of a
// fleet reaches the members' devices on the other (PROTOCOL.md §7.5), and
// the chat list and newest page read the same through either.
func TestFleetAdminEvents(t *testing.T) {
	t.Parallel()
	fleet := newFleet(t, 2, nil)
	f0, f1 := fleet[0], fleet[1]
	g := f0.createGroup("alice", "Team", "bob")
	bob := f1.dial("bob", dialOpts{})
	alice := f0.dial("alice", dialOpts{})
	if status, raw := f0.call("PATCH", "/api/chats/"+g.ChatID, f0.token("alice"), map[string]string{"title": "Fleet"}); status != http.StatusOK {
		t.Fatalf("rename through f0: %d %s", status, raw)
	}
	ev := decode[struct {
		Chat chat7JSON `json:"chat"`
	}](t, bob.next("the rename on the other process", chatEventOf(g.ChatID, "updated")).Raw)
	if ev.Chat.Title != "Fleet" {
		t.Errorf("bob's updated event on f1: %+v", ev.Chat)
	}
	alice.next("the rename on alice's process", chatEventOf(g.ChatID, "updated"))
	if status, raw := f1.call("POST", "/api/chats/"+g.ChatID+"/admins", f1.token("alice"), map[string]string{"userId": "bob"}); status != http.StatusOK {
		t.Fatalf("add admin through f1: %d %s", status, raw)
	}
	ev = decode[struct {
		Chat chat7JSON `json:"chat"`
	}](t, alice.next("the new admin on the other process", chatEventOf(g.ChatID, "updated")).Raw)
	if !slices.Equal(ev.Chat.Admins, []string{"alice", "bob"}) {
		t.Errorf("alice's updated event on f0: %+v", ev.Chat)
	}
	m := bob.sendOK(g.ChatID, "b-1", "hi")
	if p := f0.page("alice", g.ChatID, "before=end"); !slices.Equal(ids(p.Messages), []string{m.MessageID}) {
		t.Errorf("newest page through f0: %v", ids(p.Messages))
	}
	if l := f0.list7("alice", ""); len(l.Chats) != 1 || l.Chats[0].LastMessage == nil || l.Chats[0].LastMessage.MessageID != m.MessageID {
		t.Errorf("alice's list through f0: %+v", l)
	}
	// §7.6 across processes: bob, on f1, removed and added again through
	// f0, never gets live the message committed while he was away.
	carol := f1.dial("carol", dialOpts{})
	if status, raw := f0.addMember("alice", g.ChatID, "carol"); status != http.StatusOK {
		t.Fatalf("add carol: %d %s", status, raw)
	}
	if status, raw := f0.removeMember("alice", g.ChatID, "bob"); status != http.StatusOK {
		t.Fatalf("remove bob through f0: %d %s", status, raw)
	}
	away := alice.sendOK(g.ChatID, "a-away", "while bob is away")
	carol.ack(carol.next("the message of bob's absence to carol", messageID(away.MessageID)).MessageID)
	if status, raw := f0.addMember("alice", g.ChatID, "bob"); status != http.StatusOK {
		t.Fatalf("re-add bob through f0: %d %s", status, raw)
	}
	back := alice.sendOK(g.ChatID, "a-back", "welcome back")
	bob.ack(bob.next("the message after his return, on f1", messageID(back.MessageID)).MessageID)
	bob.expectNone("the message of his absence, pushed live on f1", messageID(away.MessageID), quiet)
}

// TestE2EChatListDefaultLimit: without limit the list answers 100 chats
// and a nextCursor; limit=500 is allowed and answers all (PROTOCOL.md
// §7.2).
func TestE2EChatListDefaultLimit(t *testing.T) {
	t.Parallel()
	coreBackends(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		for i := range 101 {
			e.createGroup("alice", fmt.Sprint("g", i))
		}
		l := e.list7("alice", "")
		if len(l.Chats) != 100 || l.NextCursor == nil {
			t.Fatalf("default page: %d chats, nextCursor %v; want 100 and a cursor", len(l.Chats), l.NextCursor)
		}
		rest := e.list7("alice", "cursor="+url.QueryEscape(*l.NextCursor))
		if len(rest.Chats) != 1 || rest.NextCursor != nil || slices.Contains(chat7IDs(l.Chats), rest.Chats[0].ChatID) {
			t.Errorf("second page: %v next %v", chat7IDs(rest.Chats), rest.NextCursor)
		}
		if all := e.list7("alice", "limit=500"); len(all.Chats) != 101 || all.NextCursor != nil {
			t.Errorf("limit=500: %d chats, next %v", len(all.Chats), all.NextCursor)
		}
	})
}
