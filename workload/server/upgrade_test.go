package server

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/coder/websocket"
)

// TestRefuseUpgradeMatchesAccept: refuseUpgrade refuses exactly the
// requests websocket.Accept refuses, with the same status, in JSON
// ({"error":{"code","message"}}) where Accept answers plain text; what it
// lets through Accept upgrades (101). The cases are the handshake faults
// and origins against patterns with and without a scheme, a bad pattern
// included.
func TestRefuseUpgradeMatchesAccept(t *testing.T) {
	handshake := http.Header{"Connection": {"Upgrade"}, "Upgrade": {"websocket"},
		"Sec-Websocket-Version": {"13"}, "Sec-Websocket-Key": {"dGhlIHNhbXBsZSBub25jZQ=="}}
	with := func(k, v string) http.Header {
		h := handshake.Clone()
		if v == "" {
			h.Del(k)
		} else {
			h.Set(k, v)
		}
		return h
	}
	type tc struct {
		name     string
		method   string
		h        http.Header
		patterns []string
	}
	cases := []tc{
		{"a handshake", "GET", handshake, nil},
		{"Connection: keep-alive, Upgrade", "GET", with("Connection", "keep-alive, Upgrade"), nil},
		{"Upgrade in another case", "GET", with("Upgrade", "WebSocket"), nil},
		{"no Connection", "GET", with("Connection", ""), nil},
		{"no Upgrade", "GET", with("Upgrade", ""), nil},
		{"Upgrade: h2c", "GET", with("Upgrade", "h2c"), nil},
		{"version 8", "GET", with("Sec-Websocket-Version", "8"), nil},
		{"no key", "GET", with("Sec-Websocket-Key", ""), nil},
		{"a short key", "GET", with("Sec-Websocket-Key", "c2hvcnQ="), nil},
		{"a key not base64", "GET", with("Sec-Websocket-Key", "!!!!!!!!!!!!!!!!!!!!!!=="), nil},
		{"POST", "POST", handshake, nil},
		{"two keys", "GET", func() http.Header {
			h := handshake.Clone()
			h.Add("Sec-Websocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
			return h
		}(), nil},
		{"another origin", "GET", with("Origin", "https://evil.test"), []string{"*.example.com"}},
		{"an allowed origin", "GET", with("Origin", "https://app.example.com"), []string{"*.example.com"}},
		{"an allowed origin, in capitals", "GET", with("Origin", "https://APP.Example.com"), []string{"*.example.com"}},
		{"a suffix trick", "GET", with("Origin", "https://example.com.evil.test"), []string{"*.example.com"}},
		{"origin null", "GET", with("Origin", "null"), []string{"*.example.com"}},
		{"origin without a host", "GET", with("Origin", "file:///x"), nil},
		{"origin not a URL", "GET", with("Origin", "http://[::1"), nil},
		{"scheme pattern, right scheme", "GET", with("Origin", "https://app.example.com"), []string{"https://*.example.com"}},
		{"scheme pattern, wrong scheme", "GET", with("Origin", "http://app.example.com"), []string{"https://*.example.com"}},
		{"a bad pattern", "GET", with("Origin", "https://evil.test"), []string{"[", "*"}},
		{"no patterns", "GET", with("Origin", "https://app.example.com"), nil},
	}
	for _, c := range cases {
		serve := func(ours bool) (int, http.Header, []byte) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if ours && refuseUpgrade(w, r, c.patterns) {
					return
				}
				conn, err := websocket.Accept(w, r, &websocket.AcceptOptions{OriginPatterns: c.patterns})
				if err == nil {
					conn.CloseNow()
				}
			}))
			defer srv.Close()
			req, _ := http.NewRequest(c.method, srv.URL, nil)
			req.Header = c.h.Clone()
			resp, err := srv.Client().Do(req)
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			defer resp.Body.Close()
			var body []byte
			if resp.StatusCode != http.StatusSwitchingProtocols {
				body, _ = io.ReadAll(resp.Body)
			}
			return resp.StatusCode, resp.Header, body
		}
		want, _, plain := serve(false)
		got, h, body := serve(true)
		if got != want {
			t.Errorf("%s: %d, Accept answers %d (%s)", c.name, got, want, strings.TrimSpace(string(plain)))
			continue
		}
		if got == http.StatusSwitchingProtocols {
			continue
		}
		var e errorBody
		if err := json.Unmarshal(body, &e); err != nil || e.Error.Code == "" || e.Error.Message == "" || !strings.HasPrefix(h.Get("Content-Type"), "application/json") {
			t.Errorf("%s: %d %q (%s), want the JSON error body", c.name, got, body, h.Get("Content-Type"))
		}
		wantCode := "invalid"
		if got == http.StatusForbidden {
			wantCode = "forbidden"
		}
		if e.Error.Code != wantCode {
			t.Errorf("%s: code %q, want %q", c.name, e.Error.Code, wantCode)
		}
	}
}
