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
