package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/admin"
	"github.com/tetra-messenger/tetra/workload/server"
)

// GET /admin/series needs the admin token, and its samples (one a second,
// recorded by the server itself) show the counters move after a send.
func TestAdminSeries(t *testing.T) {
	t.Parallel()
	e := newEnv(t, backends(t)[0], func(*server.Config) {})
	adminTok, err := e.srv.Signer().IssueAdmin(time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	get := func(path, token string) (int, http.Header, []byte) {
		req, _ := http.NewRequest("GET", e.srv.URL()+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, resp.Header, b
	}
	for _, tok := range []string{"", "garbage"} {
		if code, _, _ := get("/admin/series", tok); code != http.StatusUnauthorized {
			t.Errorf("series with token %.10q: %d, want 401", tok, code)
		}
	}
	if code, _, _ := get("/admin/series", e.token("alice")); code != http.StatusForbidden {
		t.Errorf("series with a user token: %d, want 403", code)
	}
	if code, _, _ := get("/admin/series?minutes=-1", adminTok); code != http.StatusBadRequest {
		t.Errorf("minutes=-1: %d, want 400", code)
	}
	series := func() server.SeriesResponse {
		code, _, b := get("/admin/series?minutes=5", adminTok)
		if code != http.StatusOK {
			t.Fatalf("series: %d %s", code, b)
		}
		var s server.SeriesResponse
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatalf("series body: %v: %s", err, b)
		}
		return s
	}

	chat := e.createDirect("alice", "bob")
	alice := e.dial("alice", dialOpts{})
	bob := e.dial("bob", dialOpts{})
	_ = bob
	for i := 0; i < 3; i++ {
		alice.sendOK(chat.ChatID, "c"+string(rune('0'+i)), "hello")
	}
	eventually(t, 10*time.Second, "series shows the sends and the connections", func() bool {
		s := series()
		if len(s.Samples) < 2 {
			return false
		}
		last := s.Samples[len(s.Samples)-1]
		var del int64
		for _, v := range last.Deliveries {
			del += v
		}
		return last.Accepted >= 3 && del >= 3 && last.Connected >= 2 && s.Samples[0].Accepted < last.Accepted
	})
	s := series()
	for i := 1; i < len(s.Samples); i++ {
		if s.Samples[i].T <= s.Samples[i-1].T {
			t.Fatalf("samples out of order at %d: %d then %d", i, s.Samples[i-1].T, s.Samples[i].T)
		}
	}
	if s.Capacity != server.SeriesCapacity || s.IntervalMs != 1000 {
		t.Errorf("capacity %d interval %d", s.Capacity, s.IntervalMs)
	}
}

// The page loads without a token, with a strict CSP, and its script never
// turns data into markup.
func TestAdminPage(t *testing.T) {
	t.Parallel()
	e := newEnv(t, backends(t)[0], func(*server.Config) {})
	for _, p := range []string{admin.PagePath, admin.ScriptPath, admin.StylePath} {
		resp, err := http.Get(e.srv.URL() + p)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || len(b) == 0 {
			t.Fatalf("%s: %d (%d bytes)", p, resp.StatusCode, len(b))
		}
		csp := resp.Header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "script-src 'self'", "connect-src 'self'", "frame-ancestors 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s: CSP %q lacks %q", p, csp, want)
			}
		}
		if strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
			t.Errorf("%s: CSP allows unsafe: %q", p, csp)
		}
		if resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("%s: no nosniff", p)
		}
	}
	page, _ := admin.File(admin.PagePath)
	js, _ := admin.File(admin.ScriptPath)
	for _, bad := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function", "localStorage"} {
		if strings.Contains(string(js), bad) {
			t.Errorf("admin.js uses %s", bad)
		}
	}
	if !strings.Contains(string(js), "sessionStorage") || !strings.Contains(string(js), "/admin/series") {
		t.Error("admin.js does not keep the token in sessionStorage or does not read /admin/series")
	}
	if strings.Contains(string(page), "<script>") || strings.Contains(string(page), "onclick=") || strings.Contains(string(page), "onload=") {
		t.Error("index.html has inline script or handlers")
	}
	if strings.Contains(string(page), "http://") || strings.Contains(string(page), "https://") {
		t.Error("index.html loads something from another origin")
	}
}
