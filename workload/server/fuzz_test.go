package server_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/client"
	"github.com/tetra-messenger/tetra/workload/server"
)

// FuzzHistoryQuery drives GET /api/chats/{chatId}/messages?since=&limit=
// of a real in-process server (SQLite) with arbitrary since and limit
// values, and a raw query string. Whatever they are: never a 5xx, never a
// message of another chat, pages strictly in commit order, at most the
// limit cap; and a non-member never gets the data.
func FuzzHistoryQuery(f *testing.F) {
	cfg := server.DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.DataDir = f.TempDir()
	cfg.JWTSecret = "fuzz-history-secret-0123456789"
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := server.New(context.Background(), cfg)
	if err != nil {
		f.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	tok := func(u string) string { s, _ := srv.Signer().Issue(u, time.Hour); return s }
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dial := func(u string) *client.Client {
		c, err := client.Dial(ctx, client.Config{URL: srv.URL(), Token: tok(u)})
		if err != nil {
			f.Fatal(err)
		}
		f.Cleanup(func() { c.Close() })
		return c
	}
	alice, carol := dial("alice"), dial("carol")
	mine, err := alice.CreateDirect(ctx, "bob")
	if err != nil {
		f.Fatal(err)
	}
	theirs, err := carol.CreateDirect(ctx, "dave")
	if err != nil {
		f.Fatal(err)
	}
	var mineIDs, theirIDs []string
	for i := range 5 {
		a, err := alice.Send(ctx, mine.ChatID, "to bob "+string(rune('a'+i)))
		if err != nil {
			f.Fatal(err)
		}
		mineIDs = append(mineIDs, a.MessageID)
		c, err := carol.Send(ctx, theirs.ChatID, "to dave "+string(rune('a'+i)))
		if err != nil {
			f.Fatal(err)
		}
		theirIDs = append(theirIDs, c.MessageID)
	}
	foreign := map[string]bool{}
	for _, id := range theirIDs {
		foreign[id] = true
	}
	pos := map[string]int{}
	for i, id := range mineIDs {
		pos[id] = i
	}
	base := srv.URL() + "/api/chats/" + url.PathEscape(mine.ChatID) + "/messages"
	hc := &http.Client{Timeout: 10 * time.Second}
	get := func(t *testing.T, rawQuery, user string) (int, []byte, bool) {
		req, err := http.NewRequest(http.MethodGet, base+"?"+rawQuery, nil)
		if err != nil {
			return 0, nil, false // not a request a client could send
		}
		req.Header.Set("Authorization", "Bearer "+tok(user))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("GET ?%s: %v (the server dropped the request)", rawQuery, err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		return resp.StatusCode, raw, true
	}

	for _, s := range []string{"", mineIDs[0], mineIDs[2], mineIDs[4], theirIDs[1], "01ARZ3NDEKTSV4RRFFQ69G5FAV", "0", "-1", "'; DROP TABLE history; --", "%00", strings.Repeat("z", 300)} {
		for _, l := range []string{"", "0", "1", "2", "-1", "100", "500", "501", "99999999999999999999", "1e3", "0x10", " 3", "abc"} {
			f.Add(s, l, "")
		}
	}
	f.Add("", "", "since=a&since=b&limit=1&limit=2")
	f.Add("", "", "limit=%zz")
	f.Add("", "", "since="+theirIDs[0]+"&limit=1")
	f.Add("", "", ";;;&&&==")

	f.Fuzz(func(t *testing.T, since, limit, raw string) {
		q := url.Values{}
		if since != "" {
			q.Set("since", since)
		}
		if limit != "" {
			q.Set("limit", limit)
		}
		for _, rq := range []string{q.Encode(), raw} {
			status, body, ok := get(t, rq, "alice")
			if !ok {
				continue
			}
			if status >= 500 {
				t.Fatalf("GET ?%s: %d %s", rq, status, body)
			}
			if status != http.StatusOK {
				if status != http.StatusBadRequest {
					t.Fatalf("GET ?%s as a member: %d %s (want 200 or 400)", rq, status, body)
				}
				continue
			}
			var page struct {
				Messages []struct {
					MessageID string `json:"messageId"`
					ChatID    string `json:"chatId"`
				} `json:"messages"`
				HasMore bool `json:"hasMore"`
			}
			if err := json.Unmarshal(body, &page); err != nil {
				t.Fatalf("GET ?%s: not JSON: %v %s", rq, err, body)
			}
			last := -1
			for _, m := range page.Messages {
				if m.ChatID != mine.ChatID || foreign[m.MessageID] {
					t.Fatalf("GET ?%s returned a message of another chat: %+v", rq, m)
				}
				p, known := pos[m.MessageID]
				if !known || p <= last {
					t.Fatalf("GET ?%s: unknown or out-of-order message %s in %s", rq, m.MessageID, body)
				}
				last = p
			}
			if len(page.Messages) > 1000 {
				t.Fatalf("GET ?%s: %d messages, the limit is not capped", rq, len(page.Messages))
			}
			// A non-member asking the same thing never gets the data.
			status, body, _ = get(t, rq, "mallory")
			if status != http.StatusForbidden && status != http.StatusNotFound && status != http.StatusBadRequest {
				t.Fatalf("GET ?%s as a non-member: %d %s", rq, status, body)
			}
			if strings.Contains(string(body), mineIDs[0]) {
				t.Fatalf("GET ?%s as a non-member leaked data: %s", rq, body)
			}
		}
	})
}

// FuzzRemoveMemberPath drives DELETE /api/chats/{chatId}/members/{userId}
// of a real in-process server (SQLite) with arbitrary path segments, as a
// member and as the group's creator: never a 5xx, a 400 always says
// invalid, and a 200 always answers a group chat (PROTOCOL.md §2).
func FuzzRemoveMemberPath(f *testing.F) {
	cfg := server.DefaultConfig()
	cfg.Addr = "127.0.0.1:0"
	cfg.DataDir = f.TempDir()
	cfg.JWTSecret = "fuzz-remove-secret-0123456789"
	cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	srv, err := server.New(context.Background(), cfg)
	if err != nil {
		f.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	})
	tok := func(u string) string { s, _ := srv.Signer().Issue(u, time.Hour); return s }
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	alice, err := client.New(client.Config{URL: srv.URL(), Token: tok("alice")})
	if err != nil {
		f.Fatal(err)
	}
	g, err := alice.CreateGroup(ctx, "g", []string{"bob", "carol"})
	if err != nil {
		f.Fatal(err)
	}
	d, err := alice.CreateDirect(ctx, "bob")
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range [][2]string{{g.ChatID, "zed"}, {g.ChatID, "alice"}, {d.ChatID, "bob"}, {"", ""},
		{"x\x00", "y"}, {g.ChatID, "\xff"}, {g.ChatID, strings.Repeat("u", 500)}, {"../..", "%2F"}} {
		f.Add(seed[0], seed[1], false)
	}
	hc := &http.Client{Timeout: 10 * time.Second}
	f.Fuzz(func(t *testing.T, chatID, userID string, asCarol bool) {
		as := "alice"
		if asCarol {
			as = "carol"
		}
		req, err := http.NewRequest("DELETE", srv.URL()+"/api/chats/"+url.PathEscape(chatID)+"/members/"+url.PathEscape(userID), nil)
		if err != nil {
			return
		}
		req.Header.Set("Authorization", "Bearer "+tok(as))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		switch {
		case resp.StatusCode >= 500:
			t.Fatalf("DELETE %q/%q as %s: %d %s", chatID, userID, as, resp.StatusCode, raw)
		case resp.StatusCode == http.StatusBadRequest && !strings.Contains(string(raw), `"code":"invalid"`):
			t.Fatalf("400 without code invalid: %s", raw)
		case resp.StatusCode == http.StatusOK:
			var c struct {
				Kind string `json:"kind"`
			}
			if json.Unmarshal(raw, &c) != nil || c.Kind != "group" {
				t.Fatalf("200 for a non-group: %s", raw)
			}
		}
		// Put the members back for the next input.
		if userID == "bob" || userID == "carol" || userID == "alice" {
			_, _ = alice.AddMember(ctx, g.ChatID, userID)
		}
	})
}
