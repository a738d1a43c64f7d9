package server_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/tetra-messenger/tetra/workload/server"
)

// A browser page from another origin cannot open a socket unless its host
// matches --allowed-origins; same-origin pages and non-browser clients (no
// Origin header) can.
func TestE2EWebSocketOrigin(t *testing.T) {
	t.Parallel()
	e := newEnv(t, backends(t)[0], func(c *server.Config) { c.AllowedOrigins = []string{"*.example.com"} })
	wsURL := "ws" + strings.TrimPrefix(e.srv.URL(), "http") + "/ws?token=" + e.token("alice")
	host := strings.TrimPrefix(e.srv.URL(), "http://")
	for _, tc := range []struct {
		origin string
		ok     bool
	}{
		{"", true},                        // not a browser
		{"http://" + host, true},          // same origin
		{"https://app.example.com", true}, // allowed pattern
		{"https://evil.test", false},
		{"https://example.com.evil.test", false},
		{"null", false},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		h := http.Header{}
		if tc.origin != "" {
			h.Set("Origin", tc.origin)
		}
		c, resp, err := websocket.Dial(ctx, wsURL, &websocket.DialOptions{HTTPHeader: h})
		cancel()
		switch {
		case tc.ok && err != nil:
			t.Errorf("origin %q refused: %v", tc.origin, err)
		case !tc.ok && err == nil:
			t.Errorf("origin %q opened a socket", tc.origin)
		case !tc.ok && (resp == nil || resp.StatusCode != http.StatusForbidden):
			t.Errorf("origin %q: %v, want HTTP 403", tc.origin, resp)
		}
		if c != nil {
			c.Close(websocket.StatusNormalClosure, "")
		}
	}
}

// A page of an allowed origin may call the HTTP API too (CORS): its
// preflight is answered with the origin, the methods and the Authorization
// header, and the answers carry Access-Control-Allow-Origin and expose
// WWW-Authenticate; another origin gets no CORS headers (the browser then
// keeps the answer from the page), nor does a path outside /api/, nor any
// origin when no pattern is configured.
func TestE2EHTTPCORS(t *testing.T) {
	t.Parallel()
	e := newEnv(t, backends(t)[0], func(c *server.Config) { c.AllowedOrigins = []string{"*.example.com"} })
	bare := newEnv(t, backends(t)[0], nil)
	do := func(base, method, path, origin string, h map[string]string) *http.Response {
		req, err := http.NewRequest(method, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Origin", origin)
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := e.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	preflight := map[string]string{"Access-Control-Request-Method": "PATCH", "Access-Control-Request-Headers": "authorization,content-type"}
	resp := do(e.srv.URL(), http.MethodOptions, "/api/chats/c_1", "https://app.example.com", preflight)
	if resp.StatusCode/100 != 2 || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" ||
		!strings.Contains(resp.Header.Get("Access-Control-Allow-Methods"), "PATCH") ||
		!strings.Contains(strings.ToLower(resp.Header.Get("Access-Control-Allow-Headers")), "authorization") {
		t.Errorf("preflight from an allowed origin: %d %v", resp.StatusCode, resp.Header)
	}
	resp = do(e.srv.URL(), http.MethodGet, "/api/chats", "https://app.example.com", map[string]string{"Authorization": "Bearer " + e.token("alice")})
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Access-Control-Allow-Origin") != "https://app.example.com" {
		t.Errorf("GET from an allowed origin: %d, Access-Control-Allow-Origin %q", resp.StatusCode, resp.Header.Get("Access-Control-Allow-Origin"))
	}
	resp = do(e.srv.URL(), http.MethodGet, "/api/chats", "https://app.example.com", nil)
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("Access-Control-Expose-Headers"), "Www-Authenticate") {
		t.Errorf("401 to an allowed origin: %d, exposed %q, want WWW-Authenticate readable", resp.StatusCode, resp.Header.Get("Access-Control-Expose-Headers"))
	}
	for _, tc := range []struct{ base, method, path, origin string }{
		{e.srv.URL(), http.MethodOptions, "/api/chats", "https://evil.test"},
		{e.srv.URL(), http.MethodGet, "/api/chats", "https://example.com.evil.test"},
		{e.srv.URL(), http.MethodGet, "/healthz", "https://app.example.com"},
		{bare.srv.URL(), http.MethodOptions, "/api/chats", "https://app.example.com"},
	} {
		if resp := do(tc.base, tc.method, tc.path, tc.origin, preflight); resp.Header.Get("Access-Control-Allow-Origin") != "" {
			t.Errorf("%s %s from %s: Access-Control-Allow-Origin %q, want none", tc.method, tc.path, tc.origin, resp.Header.Get("Access-Control-Allow-Origin"))
		}
	}
}

// The total connection cap answers 429 to the next upgrade, whoever asks,
// and frees a slot when a connection closes.
func TestE2ETotalConnectionCap(t *testing.T) {
	t.Parallel()
	e := newEnv(t, backends(t)[0], func(c *server.Config) { c.MaxConns = 3 })
	var open []*websocket.Conn
	for _, u := range []string{"u1", "u2", "u3"} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, _, err := websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.srv.URL(), "http")+"/ws?token="+e.token(u), nil)
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		open = append(open, c)
	}
	dial := func(u string) (*websocket.Conn, *http.Response, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return websocket.Dial(ctx, "ws"+strings.TrimPrefix(e.srv.URL(), "http")+"/ws?token="+e.token(u), nil)
	}
	if c, resp, err := dial("u4"); err == nil || resp == nil || resp.StatusCode != http.StatusTooManyRequests {
		if c != nil {
			c.Close(websocket.StatusNormalClosure, "")
		}
		t.Fatalf("a fourth connection over MaxConns 3: %v %v, want 429", resp, err)
	}
	open[0].Close(websocket.StatusNormalClosure, "")
	eventually(t, 10*time.Second, "a slot frees after a close", func() bool {
		c, _, err := dial("u4")
		if err == nil {
			c.Close(websocket.StatusNormalClosure, "")
		}
		return err == nil
	})
	for _, c := range open[1:] {
		c.Close(websocket.StatusNormalClosure, "")
	}
}
