package server_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/server"
)

// TestE2EUpgradeRefusalsJSON: a refused WebSocket upgrade, sent as raw
// HTTP/1.1, is answered with the JSON error body of every HTTP error
// (PROTOCOL.md §2, §7.8), not coder/websocket's plain text: a missing or
// bad token 401 unauthorized with WWW-Authenticate: Bearer (§1, §7.7), an
// origin outside --allowed-origins 403 forbidden, a request that is no
// handshake 426 or 400 invalid; an allowed origin still upgrades (101),
// and a refused upgrade gives back its connection slot.
// Before, the origin and handshake refusals were text/plain.
func TestE2EUpgradeRefusalsJSON(t *testing.T) {
	t.Parallel()
	e := newEnv(t, backends(t)[0], func(c *server.Config) {
		c.AllowedOrigins = []string{"*.example.com"}
		c.MaxConnsPerUser = 1 // a refused upgrade must give its slot back
	})
	addr := strings.TrimPrefix(e.srv.URL(), "http://")
	handshake := "Connection: Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
	raw := func(target, headers string) (*http.Response, []byte) {
		t.Helper()
		conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: %s\r\n%s\r\n", target, addr, headers)
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("GET %s: %v", target, err)
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusSwitchingProtocols {
			return resp, nil
		}
		body, _ := io.ReadAll(resp.Body)
		return resp, body
	}
	tok := e.token("alice")
	for _, tc := range []struct {
		what, target, headers string
		status                int
		code                  string
	}{
		{"no token", "/ws", handshake, 401, "unauthorized"},
		{"a bad token", "/ws?token=nonsense", handshake, 401, "unauthorized"},
		{"a bad bearer header", "/ws", handshake + "Authorization: Bearer nonsense\r\n", 401, "unauthorized"},
		{"another origin", "/ws?token=" + tok, handshake + "Origin: https://evil.test\r\n", 403, "forbidden"},
		{"a suffix trick", "/ws?token=" + tok, handshake + "Origin: https://example.com.evil.test\r\n", 403, "forbidden"},
		{"origin null", "/ws?token=" + tok, handshake + "Origin: null\r\n", 403, "forbidden"},
		{"no handshake", "/ws?token=" + tok, "", 426, "invalid"},
		{"version 8", "/ws?token=" + tok, strings.Replace(handshake, "Version: 13", "Version: 8", 1), 400, "invalid"},
		{"no key", "/ws?token=" + tok, strings.Replace(handshake, "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n", "", 1), 400, "invalid"},
	} {
		resp, body := raw(tc.target, tc.headers)
		var b struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		err := json.Unmarshal(body, &b)
		if resp.StatusCode != tc.status || err != nil || b.Error.Code != tc.code || b.Error.Message == "" ||
			!strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Errorf("%s: %d %s %q, want %d with the JSON error body, code %s", tc.what, resp.StatusCode, resp.Header.Get("Content-Type"), body, tc.status, tc.code)
		}
		if tc.status == 401 && resp.Header.Get("WWW-Authenticate") != "Bearer" {
			t.Errorf("%s: WWW-Authenticate %q, want Bearer", tc.what, resp.Header.Get("WWW-Authenticate"))
		}
		if tc.status == 426 && resp.Header.Get("Upgrade") != "websocket" {
			t.Errorf("%s: Upgrade %q, want websocket", tc.what, resp.Header.Get("Upgrade"))
		}
	}
	// alice's refused upgrades held no connection slot: she connects.
	for i, origin := range []string{"", "Origin: https://app.example.com\r\n", "Origin: http://" + addr + "\r\n"} {
		user := []string{"alice", "u1", "u2"}[i]
		if resp, body := raw("/ws?token="+e.token(user), handshake+origin); resp.StatusCode != http.StatusSwitchingProtocols {
			t.Errorf("%s, %q: %d %s, want 101", user, origin, resp.StatusCode, body)
		}
	}
}
