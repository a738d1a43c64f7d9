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
