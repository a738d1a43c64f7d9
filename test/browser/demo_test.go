package browser_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/tetra-messenger/tetra/workload/server"
)

// TestDemo checks the demo endpoints without a browser: 404 unless the demo
// is on, tokens only for the demo users, and never next to TETRA_JWT_SECRET.
func TestDemo(t *testing.T) {
	t.Run("off", func(t *testing.T) {
		h := newHarness(t, func(c *server.Config) { c.Demo = false })
		for _, r := range []struct{ method, path, body string }{
			{"POST", "/demo/token", `{"user":"alice"}`},
			{"GET", "/demo/users", ""},
			{"GET", "/demo/anything", ""},
		} {
			if code, body := call(t, r.method, h.url+r.path, r.body); code != http.StatusNotFound {
				t.Errorf("%s %s with the demo off: %d %s, want 404", r.method, r.path, code, body)
			}
		}
		if code, _ := call(t, "GET", h.url+"/", ""); code != http.StatusOK {
			t.Errorf("GET / with the demo off: %d, want 200 (the page is always served)", code)
		}
	})
	t.Run("on", func(t *testing.T) {
		h := newHarness(t, nil)
		if code, body := call(t, "GET", h.url+"/demo/users", ""); code != 200 || !strings.Contains(body, `"alice","bob","carol"`) {
			t.Errorf("GET /demo/users: %d %s", code, body)
		}
		code, body := call(t, "POST", h.url+"/demo/token", `{"user":"bob"}`)
		if code != 200 {
			t.Fatalf("POST /demo/token: %d %s", code, body)
		}
		tok := body[strings.Index(body, `"token":"`)+9:]
		tok = tok[:strings.Index(tok, `"`)]
		req, _ := http.NewRequest("GET", h.url+"/api/chats", nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != 200 {
			t.Errorf("the demo token is refused by /api/chats: %d", res.StatusCode)
		}
		for _, bad := range []string{`{"user":"mallory"}`, `{"user":""}`, `not json`, `{"user":["alice"]}`} {
			if code, body := call(t, "POST", h.url+"/demo/token", bad); code != http.StatusBadRequest {
				t.Errorf("POST /demo/token %s: %d %s, want 400", bad, code, body)
			}
		}
	})
	t.Run("conflict", func(t *testing.T) {
		for _, tc := range []struct {
			name   string
			mutate func(*server.Config)
			names  string
		}{
			{"secret", func(c *server.Config) { c.JWTSecret = "0123456789abcdef0123456789" }, "TETRA_JWT_SECRET"},
			{"index", func(c *server.Config) { c.Index = "redis://127.0.0.1:6379" }, "--index"},
			{"store", func(c *server.Config) { c.Store = "postgres://u:pw@db/tetra" }, "--store"},
		} {
			cfg := server.DefaultConfig()
			cfg.Demo = true
			tc.mutate(&cfg)
			err := cfg.CheckDemo()
			if !errors.Is(err, server.ErrDemoConflict) || !strings.Contains(err.Error(), tc.names) {
				t.Errorf("%s: CheckDemo() = %v, want ErrDemoConflict naming %s", tc.name, err, tc.names)
			}
			if err != nil && strings.Contains(err.Error(), "pw@") {
				t.Errorf("%s: the error leaks a password: %v", tc.name, err)
			}
		}
		cfg := server.DefaultConfig()
		cfg.JWTSecret = "0123456789abcdef0123456789"
		if err := cfg.CheckDemo(); err != nil {
			t.Errorf("CheckDemo() with the demo off = %v, want nil", err)
		}
		// A server built in process with both is refused, naming the conflict.
		bad := server.DefaultConfig()
		bad.Demo, bad.JWTSecret, bad.DataDir, bad.Addr = true, "0123456789abcdef0123456789", t.TempDir(), "127.0.0.1:0"
		if _, err := server.New(t.Context(), bad); !errors.Is(err, server.ErrDemoConflict) {
			t.Errorf("server.New with --demo and TETRA_JWT_SECRET: %v, want ErrDemoConflict", err)
		}
	})
}

func call(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, string(b)
}
