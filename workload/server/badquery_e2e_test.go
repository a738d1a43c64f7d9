package server_test

import (
	"context"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
)

// TestE2EMalformedQueryString: a query string that does not parse
// (url.ParseQuery refuses it: a bad percent-escape, a semicolon separator)
// is 400 invalid on every handler that reads query parameters, as a
// well-encoded but unknown cursor is (PROTOCOL.md §2), not read as if the
// bad pair were absent (net/http's r.URL.Query() drops it silently, and
// GET /api/chats?cursor=%%%garbage answered 200 with the first page). The
// same requests well encoded still answer as before.
func TestE2EMalformedQueryString(t *testing.T) {
	t.Parallel()
	e := newEnv(t, backends(t)[0], nil)
	chat := e.createDirect("alice", "bob")
	alice := e.dial("alice", dialOpts{})
	alice.sendOK(chat.ChatID, "a-1", "one")
	alice.sendOK(chat.ChatID, "a-2", "two")
	msgs := "/api/chats/" + url.PathEscape(chat.ChatID) + "/messages"

	// What a bad cursor gets today: the shape every case below must get.
	status, raw := e.call("GET", "/api/chats?cursor="+url.QueryEscape("%%%garbage"), e.token("alice"), nil)
	expectInvalid(t, "GET /api/chats with a well-encoded bad cursor", status, raw)

	admin, err := e.srv.Signer().IssueAdmin(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ path, token string }{
		{"/api/chats?cursor=%%%garbage", e.token("alice")},
		{"/api/chats?limit=2&cursor=%zz", e.token("alice")},
		{"/api/chats?limit=%2", e.token("alice")},
		{"/api/chats?limit=1;cursor=x", e.token("alice")},
		{msgs + "?before=%%%garbage", e.token("alice")},
		{msgs + "?since=%zz&limit=1", e.token("alice")},
		{msgs + "?limit=1&before=end&x=%", e.token("alice")},
		{msgs + "?limit=1;before=end", e.token("alice")},
		{msgs + "?before=%zz", e.token("carol")}, // a non-member: 400 says nothing of the chat
		{"/api/presence?users=bob&x=%zz", e.token("alice")},
		{"/api/presence?users=%%%bob", e.token("alice")},
		{"/admin/series?minutes=%zz", admin},
		{"/debug/pprof/cmdline?x=%zz", admin},
	} {
		status, raw := e.call("GET", tc.path, tc.token, nil)
		expectInvalid(t, "GET "+tc.path, status, raw)
		if strings.Contains(string(raw), `"messages"`) || strings.Contains(string(raw), `"chats"`) {
			t.Errorf("GET %s: the refusal carries data: %s", tc.path, raw)
		}
	}

	// GET /ws: a device (or token) the lenient parse would drop is refused
	// before the upgrade, not taken as the default device.
	for _, q := range []string{"device=%zz", "device=phone&x=%%%"} {
		u := "ws" + strings.TrimPrefix(e.srv.URL(), "http") + "/ws?" + q
		ctx, cancel := context.WithTimeout(context.Background(), waitLong)
		c, resp, err := websocket.Dial(ctx, u, &websocket.DialOptions{
			HTTPHeader: http.Header{"Authorization": {"Bearer " + e.token("alice")}}})
		cancel()
		if err == nil {
			c.CloseNow()
			t.Errorf("GET /ws?%s: upgraded, want 400", q)
			continue
		}
		if resp == nil || resp.StatusCode != http.StatusBadRequest {
			t.Errorf("GET /ws?%s: %v (response %v), want HTTP 400", q, err, resp)
		}
	}

	// The same requests well encoded behave as before.
	p := e.page("alice", chat.ChatID, "limit=1&before=end")
	if len(p.Messages) != 1 || p.Messages[0].Body != "two" || !p.HasMore {
		t.Errorf("before=end&limit=1: %+v, want the newest message and hasMore", p)
	}
	if p := e.page("alice", chat.ChatID, "since="+url.QueryEscape(p.Messages[0].MessageID)); len(p.Messages) != 0 {
		t.Errorf("since the newest: %+v, want nothing", p)
	}
	if l := e.list7("alice", "limit=1&cursor="); len(l.Chats) != 1 || l.Chats[0].ChatID != chat.ChatID {
		t.Errorf("GET /api/chats?limit=1&cursor=: %+v", l)
	}
	if status, raw := e.call("GET", "/api/presence?users=bob%2Ccarol", e.token("alice"), nil); status != http.StatusOK {
		t.Errorf("GET /api/presence?users=bob%%2Ccarol: %d %s", status, raw)
	}
	if status, raw := e.call("GET", "/admin/series?minutes=1", admin, nil); status != http.StatusOK {
		t.Errorf("GET /admin/series?minutes=1: %d %s", status, raw)
	}
	c := e.dial("alice", dialOpts{device: "phone 1", query: true})
	c.close()
}
