package client_test

import (
	"context"
	"errors"
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

// The client against a real server (issue 14): Chats carries createdBy,
// lastRead and unread; Leave and RemoveMember; OnChat gets the chat events
// and OnRead the user's own reads from its other devices. On the embedded
// default and on PostgreSQL + Redis.
func TestClientReadStateAndMembership(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"sqlite+memory", "postgres+redis"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := server.DefaultConfig()
			cfg.Addr = "127.0.0.1:0"
			cfg.DataDir = t.TempDir()
			cfg.JWTSecret = "issue14-client-test-secret-0123456789"
			cfg.Tuning.PollInterval = 20 * time.Millisecond
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
			testClientMembership(t, srv)
		})
	}
}

func testClientMembership(t *testing.T, srv *server.Server) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	events := map[string]chan client.ChatEvent{}
	reads := map[string]chan protocol.Read{}
	dial := func(user, device string) *client.Client {
		t.Helper()
		tok, err := srv.Signer().Issue(user, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		key := user + "/" + device
		events[key] = make(chan client.ChatEvent, 16)
		reads[key] = make(chan protocol.Read, 16)
		evs, rds := events[key], reads[key]
		c, err := client.Dial(ctx, client.Config{URL: srv.URL(), Token: tok, Device: device,
			OnChat: func(ev client.ChatEvent) { evs <- ev },
			OnRead: func(r protocol.Read) { rds <- r },
		})
		if err != nil {
			t.Fatalf("dial %s: %v", key, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	nextEvent := func(key string) client.ChatEvent {
		t.Helper()
		select {
		case ev := <-events[key]:
			return ev
		case <-time.After(15 * time.Second):
			t.Fatalf("%s: no chat event", key)
		}
		return client.ChatEvent{}
	}
	phone := dial("alice", "phone")
	laptop := dial("alice", "laptop")
	bob := dial("bob", "default")
	carol := dial("carol", "default")

	g, err := phone.CreateGroup(ctx, "Team", []string{"bob"})
	if err != nil {
		t.Fatal(err)
	}
	if g.CreatedBy != "alice" || !g.HasUnread || g.Unread != 0 {
		t.Errorf("CreateGroup = %+v", g)
	}
	// The new group reaches its members' connected devices as added.
	for _, key := range []string{"alice/phone", "alice/laptop", "bob/default"} {
		if ev := nextEvent(key); ev.Event != client.ChatAdded || ev.Chat.ChatID != g.ChatID {
			t.Errorf("%s's OnChat got %+v, want added for the new group", key, ev)
		}
	}
	acc, err := bob.Send(ctx, g.ChatID, "read me")
	if err != nil {
		t.Fatal(err)
	}
	if err := phone.Read(ctx, g.ChatID, acc.MessageID); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-reads["alice/laptop"]:
		if r.UserID != "alice" || r.MessageID != acc.MessageID {
			t.Errorf("laptop's OnRead got %+v", r)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the phone's read did not reach the laptop's OnRead")
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		chats, err := laptop.Chats(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(chats) == 1 && chats[0].LastRead["alice"] == acc.MessageID && chats[0].HasUnread && chats[0].Unread == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("laptop's Chats = %+v, want lastRead alice at %s and unread 0", chats, acc.MessageID)
		}
		time.Sleep(20 * time.Millisecond)
	}

	if _, err := bob.AddMember(ctx, g.ChatID, "carol"); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent("carol/default"); ev.Event != client.ChatAdded || ev.Chat.ChatID != g.ChatID || ev.Chat.HasUnread {
		t.Errorf("carol's OnChat got %+v, want added", ev)
	}
	for _, key := range []string{"alice/phone", "alice/laptop", "bob/default"} {
		if ev := nextEvent(key); ev.Event != client.ChatUpdated {
			t.Errorf("%s's OnChat got %+v, want updated", key, ev)
		}
	}
	// Only the creator removes others.
	_, err = bob.RemoveMember(ctx, g.ChatID, "carol")
	var ce *client.Error
	if !errors.As(err, &ce) || ce.Code != protocol.CodeForbidden {
		t.Errorf("bob removing carol: %v, want forbidden", err)
	}
	after, err := phone.RemoveMember(ctx, g.ChatID, "carol")
	if err != nil || slices.Contains(after.Members, "carol") {
		t.Fatalf("alice removing carol = %+v, %v", after, err)
	}
	if ev := nextEvent("carol/default"); ev.Event != client.ChatRemoved {
		t.Errorf("carol's OnChat got %+v, want removed", ev)
	}
	if ev := nextEvent("bob/default"); ev.Event != client.ChatUpdated || slices.Contains(ev.Chat.Members, "carol") {
		t.Errorf("bob's OnChat got %+v, want updated without carol", ev)
	}
	left, err := bob.Leave(ctx, g.ChatID)
	if err != nil || !slices.Equal(left.Members, []string{"alice"}) {
		t.Fatalf("bob leaves = %+v, %v", left, err)
	}
	if ev := nextEvent("bob/default"); ev.Event != client.ChatRemoved {
		t.Errorf("bob's OnChat got %+v, want removed", ev)
	}
	if _, _, err := bob.History(ctx, g.ChatID, "", 0); !errors.As(err, &ce) || ce.Code != protocol.CodeForbidden {
		t.Errorf("bob's history after leaving: %v, want forbidden", err)
	}
	_ = carol
}
