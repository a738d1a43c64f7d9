package client_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/internal/testenv"
	"github.com/tetra-messenger/tetra/workload/client"
	"github.com/tetra-messenger/tetra/workload/protocol"
	"github.com/tetra-messenger/tetra/workload/server"
)

// The client's calls of PROTOCOL.md §7 against a real server: the newest
// page and older pages, the chat list by activity with last messages and
// paging, GetChat, Rename, AddAdmin/RemoveAdmin with their chat events,
// and a group's history setting. On the embedded default and on
// PostgreSQL + Redis.
func TestClientChatAPI(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"sqlite+memory", "postgres+redis"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := server.DefaultConfig()
			cfg.Addr = "127.0.0.1:0"
			cfg.DataDir = t.TempDir()
			cfg.JWTSecret = "issue23-client-test-secret-0123456789"
			cfg.Tuning.PollInterval = 20 * time.Millisecond
			cfg.Tuning.SendsPerSecond = 1000
			cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
			if name == "postgres+redis" {
				cfg.Store = testenv.Postgres(t)
				cfg.Index, cfg.IndexPrefix = testenv.Redis(t)
			}
			srv, err := server.New(t.Context(), cfg)
			if err != nil {
				t.Fatal(err)
			}
			if err := srv.Start(t.Context()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				defer cancel()
				_ = srv.Shutdown(ctx)
			})
			testClientChatAPI(t, srv)
		})
	}
}

func testClientChatAPI(t *testing.T, srv *server.Server) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	events := map[string]chan client.ChatEvent{}
	dial := func(user string) *client.Client {
		t.Helper()
		tok, err := srv.Signer().Issue(user, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		ch := make(chan client.ChatEvent, 32)
		events[user] = ch
		c, err := client.Dial(ctx, client.Config{URL: srv.URL(), Token: tok, OnChat: func(ev client.ChatEvent) { ch <- ev }})
		if err != nil {
			t.Fatalf("dial %s: %v", user, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	nextUpdated := func(user, chatID string) client.ChatEvent {
		t.Helper()
		deadline := time.After(15 * time.Second)
		for {
			select {
			case ev := <-events[user]:
				if ev.Event == client.ChatUpdated && ev.Chat.ChatID == chatID {
					return ev
				}
			case <-deadline:
				t.Fatalf("%s: no updated event for %s", user, chatID)
			}
		}
	}
	alice, bob := dial("alice"), dial("bob")

	g, err := alice.CreateGroupWith(ctx, client.GroupOptions{Title: "Team", Members: []string{"bob"}, History: client.HistoryMember})
	if err != nil || g.History != client.HistoryMember || !slices.Equal(g.Admins, []string{"alice"}) {
		t.Fatalf("CreateGroupWith = %+v, %v", g, err)
	}
	var sent []string
	for range 7 {
		acc, err := alice.Send(ctx, g.ChatID, "hello")
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, acc.MessageID)
	}
	// The newest page, then the older ones, by the first id of each page.
	page, more, err := bob.HistoryBefore(ctx, g.ChatID, "", 3)
	if err != nil || !more || len(page) != 3 || page[2].MessageID != sent[6] || page[0].MessageID != sent[4] {
		t.Fatalf("HistoryBefore(newest) = %d messages, more %v, %v", len(page), more, err)
	}
	got := messageIDs(page)
	for more {
		page, more, err = bob.HistoryBefore(ctx, g.ChatID, page[0].MessageID, 3)
		if err != nil {
			t.Fatal(err)
		}
		got = append(messageIDs(page), got...)
	}
	if !slices.Equal(got, sent) {
		t.Errorf("newest page and older pages = %v, want %v", got, sent)
	}

	// The chat list: the chat with the newest message first, with it.
	d, err := alice.CreateDirect(ctx, "carol")
	if err != nil {
		t.Fatal(err)
	}
	chats, err := alice.Chats(ctx)
	if err != nil || len(chats) != 2 || chats[0].ChatID != d.ChatID {
		t.Fatalf("Chats = %+v, %v; want the direct chat (created last) first", chats, err)
	}
	acc, err := bob.Send(ctx, g.ChatID, "latest")
	if err != nil {
		t.Fatal(err)
	}
	first, next, err := alice.ChatPage(ctx, "", 1)
	if err != nil || len(first) != 1 || first[0].ChatID != g.ChatID || next == "" {
		t.Fatalf("ChatPage(limit 1) = %+v, %q, %v; want the group (newest message) and a cursor", first, next, err)
	}
	if lm := first[0].LastMessage; lm == nil || lm.MessageID != acc.MessageID || lm.Body != "latest" || !first[0].LastActivity.Equal(acc.SentAt) {
		t.Errorf("lastMessage %+v, lastActivity %v; want %s at %v", lm, first[0].LastActivity, acc.MessageID, acc.SentAt)
	}
	second, next, err := alice.ChatPage(ctx, next, 1)
	if err != nil || len(second) != 1 || second[0].ChatID != d.ChatID || next != "" {
		t.Errorf("ChatPage(cursor) = %+v, %q, %v", second, next, err)
	}
	one, err := bob.GetChat(ctx, g.ChatID)
	if err != nil || one.LastMessage == nil || one.LastMessage.MessageID != acc.MessageID || one.History != client.HistoryMember {
		t.Errorf("GetChat = %+v, %v", one, err)
	}
	if _, err := bob.GetChat(ctx, d.ChatID); client.CodeOf(err) != "forbidden" && client.CodeOf(err) != "not_found" {
		t.Errorf("GetChat of another's chat = %v", err)
	}

	// Admins.
	if _, err := bob.Rename(ctx, g.ChatID, "Bob's"); client.CodeOf(err) != "forbidden" {
		t.Errorf("Rename by a non-admin = %v, want forbidden", err)
	}
	if c, err := alice.AddAdmin(ctx, g.ChatID, "bob"); err != nil || !slices.Equal(c.Admins, []string{"alice", "bob"}) {
		t.Fatalf("AddAdmin = %+v, %v", c, err)
	}
	for _, u := range []string{"alice", "bob"} {
		if ev := nextUpdated(u, g.ChatID); !slices.Equal(ev.Chat.Admins, []string{"alice", "bob"}) {
			t.Errorf("%s's updated event = %+v", u, ev.Chat)
		}
	}
	if c, err := bob.Rename(ctx, g.ChatID, "Renamed"); err != nil || c.Title != "Renamed" {
		t.Fatalf("Rename by the new admin = %+v, %v", c, err)
	}
	if ev := nextUpdated("alice", g.ChatID); ev.Chat.Title != "Renamed" {
		t.Errorf("alice's updated event = %+v", ev.Chat)
	}
	if c, err := alice.RemoveAdmin(ctx, g.ChatID, "alice"); err != nil || !slices.Equal(c.Admins, []string{"bob"}) {
		t.Errorf("RemoveAdmin(self) = %+v, %v", c, err)
	}
	if _, err := alice.RemoveAdmin(ctx, g.ChatID, "bob"); client.CodeOf(err) != "forbidden" {
		t.Errorf("RemoveAdmin(another) = %v, want forbidden", err)
	}
}

func messageIDs(ms []protocol.Message) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.MessageID
	}
	return out
}
