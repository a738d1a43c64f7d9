package server_test

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"
)

// expectError checks an HTTP answer: the status and the contract's error
// shape {"error":{"code":code,"message":"..."}}.
func expectError(t testing.TB, what string, status int, raw []byte, wantStatus int, wantCode string) {
	t.Helper()
	var ej errorJSON
	if status != wantStatus || json.Unmarshal(raw, &ej) != nil || ej.Error.Code != wantCode || ej.Error.Message == "" {
		t.Errorf(`%s: %d %s, want %d {"error":{"code":%q,"message":"..."}}`, what, status, raw, wantStatus, wantCode)
	}
}

// HTTP answers say what went wrong with the status that means it, in the
// contract's error shape (issue 13, point 7): a body over the limit is 413
// (was 400), a method a route does not serve is 405 with Allow (was 404,
// or a plain-text 405), a user token on an admin endpoint is 403 (was
// 401). What PROTOCOL.md §1 and §2 fix stays: bad input 400 invalid, a
// missing or bad token 401.
func TestE2EHTTPStatuses(t *testing.T) {
	t.Parallel()
	e := newEnv(t, backends(t)[0], nil)
	tok := e.token("alice")
	chat := e.createDirect("alice", "bob")
	chatPath := "/api/chats/" + url.PathEscape(chat.ChatID)

	status, raw := e.call("POST", "/api/chats", tok, `{"kind":"group","title":"`+strings.Repeat("t", 200<<10)+`"}`)
	expectError(t, "a body over 64 KiB", status, raw, http.StatusRequestEntityTooLarge, "too_large")
	status, raw = e.call("POST", chatPath+"/members", tok, `{"userId":"`+strings.Repeat("u", 70<<10)+`"}`)
	expectError(t, "add member, a body over 64 KiB", status, raw, http.StatusRequestEntityTooLarge, "too_large")
	status, raw = e.call("POST", "/api/chats", tok, `{"kind":"group",`)
	expectInvalid(t, "malformed JSON (still 400)", status, raw)

	for _, c := range []struct {
		method, path string
		token        string
		allow        []string
	}{
		{"DELETE", "/api/chats", tok, []string{"GET", "POST"}},
		{"PUT", chatPath + "/members", tok, []string{"POST"}},
		{"POST", chatPath + "/messages", tok, []string{"GET"}},
		{"PATCH", chatPath + "/messages", "", []string{"GET"}}, // the route, not the token, decides
		{"POST", "/healthz", "", []string{"GET"}},
		{"DELETE", "/admin/stats", "", []string{"GET"}},
		{"GET", "/admin/rebuild", "", []string{"POST"}},
		{"PUT", "/demo/token", "", []string{"POST"}},
	} {
		what := c.method + " " + c.path
		req, err := http.NewRequestWithContext(t.Context(), c.method, e.srv.URL()+c.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := e.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var ej errorJSON
		err = json.NewDecoder(resp.Body).Decode(&ej)
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed || err != nil || ej.Error.Code != "method_not_allowed" || ej.Error.Message == "" {
			t.Errorf("%s: %d %+v (%v), want 405 with the error shape, code method_not_allowed", what, resp.StatusCode, ej, err)
		}
		allow := resp.Header.Get("Allow")
		for _, m := range c.allow {
			if !strings.Contains(allow, m) {
				t.Errorf("%s: Allow %q lacks %s", what, allow, m)
			}
		}
	}
	for _, path := range []string{"/api/nothing", "/nothing", "/demo/nothing"} {
		status, raw := e.call("GET", path, tok, nil)
		expectError(t, "GET "+path, status, raw, http.StatusNotFound, "not_found")
	}

	admin, err := e.srv.Signer().IssueAdmin(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for _, ep := range []struct{ method, path string }{
		{"GET", "/admin/stats"}, {"POST", "/admin/rebuild"}, {"GET", "/admin/series"}, {"GET", "/debug/pprof/heap"},
	} {
		what := ep.method + " " + ep.path
		status, raw := e.call(ep.method, ep.path, tok, nil)
		expectError(t, what+" with a user token", status, raw, http.StatusForbidden, "forbidden")
		for _, bad := range []string{"", "not-a-token", tok[:len(tok)-3] + "AAA"} {
			status, raw := e.call(ep.method, ep.path, bad, nil)
			expectError(t, what+" with a missing or bad token", status, raw, http.StatusUnauthorized, "unauthorized")
		}
		if status, raw := e.call(ep.method, ep.path, admin, nil); status != http.StatusOK {
			t.Errorf("%s with the admin token: %d %.100s", what, status, raw)
		}
	}
}
