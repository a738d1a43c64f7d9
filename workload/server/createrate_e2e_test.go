package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/tetra-messenger/tetra/workload/server"
)

// TestE2EChatCreateRateLimited: POST /api/chats is limited per user
// (chatCreatesPerMinute, here 3): the creation over it is answered 429
// rate_limited with retryAfterMs and Retry-After (PROTOCOL.md §7.7) and
// creates nothing; a direct chat that exists (200) and a refused body
// (400) cost nothing; another user has a budget of its own. Before, a
// client could create chats without bound.
func TestE2EChatCreateRateLimited(t *testing.T) {
	t.Parallel()
	coreBackends(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, func(c *server.Config) { c.Tuning.ChatCreatesPerMinute = 3 })
		create := func(user string, body map[string]any) (int, http.Header, []byte) {
			t.Helper()
			raw, _ := json.Marshal(body)
			req, _ := http.NewRequestWithContext(t.Context(), "POST", e.srv.URL()+"/api/chats", strings.NewReader(string(raw)))
			req.Header.Set("Authorization", "Bearer "+e.token(user))
			req.Header.Set("Content-Type", "application/json")
			resp, err := e.http.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			out, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, resp.Header, out
		}
		group := map[string]any{"kind": "group", "title": "g", "members": []string{"bob"}}
		direct := map[string]any{"kind": "direct", "members": []string{"bob"}}
		if status, _, raw := create("alice", direct); status != http.StatusCreated {
			t.Fatalf("the direct chat: %d %s", status, raw)
		}
		for range 5 {
			if status, _, raw := create("alice", direct); status != http.StatusOK {
				t.Fatalf("the direct chat again: %d %s, want 200", status, raw)
			}
			if status, _, raw := create("alice", map[string]any{"kind": "channel"}); status != http.StatusBadRequest {
				t.Fatalf("a bad kind: %d %s, want 400", status, raw)
			}
		}
		for i := range 2 {
			if status, _, raw := create("alice", group); status != http.StatusCreated {
				t.Fatalf("group %d (creation %d of 3): %d %s; the 200s and 400s must not count", i+1, i+2, status, raw)
			}
		}
		before := len(e.list7("alice", "").Chats)
		status, h, raw := create("alice", group)
		var body struct {
			Error struct {
				Code         string `json:"code"`
				RetryAfterMs int64  `json:"retryAfterMs"`
			} `json:"error"`
		}
		_ = json.Unmarshal(raw, &body)
		// 3 a minute: the next token is 20 s away.
		if status != http.StatusTooManyRequests || body.Error.Code != "rate_limited" || body.Error.RetryAfterMs < 19000 || body.Error.RetryAfterMs > 20000 {
			t.Errorf("the 4th creation: %d %s, want 429 rate_limited with retryAfterMs about 20000", status, raw)
		}
		if s, err := strconv.Atoi(h.Get("Retry-After")); err != nil || s < 19 || s > 20 {
			t.Errorf("Retry-After %q, want about 20 (seconds)", h.Get("Retry-After"))
		}
		if after := len(e.list7("alice", "").Chats); after != before {
			t.Errorf("a refused creation created a chat: %d -> %d chats", before, after)
		}
		if status, _, raw := create("bob", group); status != http.StatusCreated {
			t.Errorf("bob's first creation: %d %s, want 201 (a budget of his own)", status, raw)
		}
	})
}
