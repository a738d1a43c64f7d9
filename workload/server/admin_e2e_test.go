package server_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/server"
)

// POST /admin/rebuild needs an admin token and rebuilds the waterline index
// from the outbox; GET /admin/stats reports the counters.
func TestE2EAdminEndpoints(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, func(*server.Config) {})
		admin, err := e.srv.Signer().IssueAdmin(time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		do := func(method, path, token string) (int, map[string]any) {
			req, _ := http.NewRequest(method, e.srv.URL()+path, nil)
			if token != "" {
				req.Header.Set("Authorization", "Bearer "+token)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var body map[string]any
			_ = json.NewDecoder(resp.Body).Decode(&body)
			return resp.StatusCode, body
		}
		// No token: 401; a user token: 403 (a token, not an admin one).
		for tok, want := range map[string]int{"": http.StatusUnauthorized, e.token("alice"): http.StatusForbidden} {
			if code, _ := do("POST", "/admin/rebuild", tok); code != want {
				t.Errorf("rebuild with token %.10q: %d, want %d", tok, code, want)
			}
			if code, _ := do("GET", "/admin/stats", tok); code != want {
				t.Errorf("stats with token %.10q: %d, want %d", tok, code, want)
			}
		}
		// An admin token is not a user token either.
		if code, _ := do("GET", "/api/chats", admin); code != http.StatusUnauthorized {
			t.Errorf("an admin token opened the user API: %d", code)
		}
		before := e.srv.Engine().Stats().Rebuilds["requested"]
		if code, body := do("POST", "/admin/rebuild", admin); code != http.StatusOK || body["rebuilt"] != true {
			t.Fatalf("rebuild: %d %v", code, body)
		}
		if n := e.srv.Engine().Stats().Rebuilds["requested"]; n != before+1 {
			t.Fatalf("requested rebuilds %d -> %d, want +1", before, n)
		}
		code, body := do("GET", "/admin/stats", admin)
		if code != http.StatusOK {
			t.Fatalf("stats: %d", code)
		}
		if _, ok := body["outboxDepth"]; !ok {
			t.Fatalf("stats lacks outboxDepth: %v", body)
		}
		// Runtime profiles, behind the same admin token.
		for tok, want := range map[string]int{"": http.StatusUnauthorized, e.token("alice"): http.StatusForbidden} {
			if code, _ := do("GET", "/debug/pprof/heap?debug=1", tok); code != want {
				t.Errorf("pprof with token %.10q: %d, want %d", tok, code, want)
			}
		}
		req, _ := http.NewRequest("GET", e.srv.URL()+"/debug/pprof/heap?debug=1", nil)
		req.Header.Set("Authorization", "Bearer "+admin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(raw), "heap profile") {
			t.Fatalf("pprof heap with the admin token: %d %.80s", resp.StatusCode, raw)
		}
	})
}

// The retention job purges history older than historyRetention and keeps
// the rest.
func TestE2EHistoryRetention(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, func(*server.Config) {})
		chat := e.createDirect("alice", "bob")
		old := time.Now().Add(-e.srv.Tuning().HistoryRetention - time.Hour).UTC()
		res, err := e.srv.Store().Commit(t.Context(), []history.Draft{
			{ID: "01OLD0000000000000000000AA", ChatID: chat.ChatID, SenderID: "alice", SenderDevice: "d", CorrelationID: "old", Body: "ancient", SentAt: old},
		})
		if err != nil || res[0].Err != nil {
			t.Fatalf("commit: %v %v", err, res)
		}
		alice := e.dial("alice", dialOpts{})
		fresh := alice.sendOK(chat.ChatID, "new", "recent")
		// The server's own retention loop may run first and purge it; either
		// way one pass must leave only the fresh message.
		if _, err := e.srv.PurgeHistory(t.Context()); err != nil {
			t.Fatalf("purge: %v", err)
		}
		got := ids(e.history("bob", chat.ChatID, ""))
		if len(got) != 1 || got[0] != fresh.MessageID {
			t.Fatalf("history after the purge %v, want only %s", got, fresh.MessageID)
		}
	})
}
