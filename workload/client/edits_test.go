package client_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/internal/testenv"
	"github.com/tetra-messenger/tetra/workload/client"
	"github.com/tetra-messenger/tetra/workload/protocol"
	"github.com/tetra-messenger/tetra/workload/server"
)

// The client's §7.3 and §7.4 calls against a real server, on the embedded
// default and on PostgreSQL + Redis: Edit and Delete (with the frames they
// push to the other member), Typing and OnTyping, OnPresence and Presence.
func TestClientEditDeleteTypingPresence(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"sqlite+memory", "postgres+redis"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			cfg := server.DefaultConfig()
			cfg.Addr = "127.0.0.1:0"
			cfg.DataDir = t.TempDir()
			cfg.JWTSecret = "issue23-client-test-secret-0123456789"
			cfg.Tuning.PollInterval = 20 * time.Millisecond
			cfg.PresenceGrace = time.Second
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
			testClientEdits(t, srv)
		})
	}
}

func wait[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(15 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

func testClientEdits(t *testing.T, srv *server.Server) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	msgs := make(chan protocol.Message, 64)
	typing := make(chan protocol.Typing, 16)
	presence := make(chan protocol.Presence, 16)
	dial := func(user string, cfg client.Config) *client.Client {
		t.Helper()
		tok, err := srv.Signer().Issue(user, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		cfg.URL, cfg.Token = srv.URL(), tok
		c, err := client.Dial(ctx, cfg)
		if err != nil {
			t.Fatalf("dial %s: %v", user, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	alice := dial("alice", client.Config{})
	bob := dial("bob", client.Config{
		OnMessage:  func(m protocol.Message) { msgs <- m },
		OnTyping:   func(ty protocol.Typing) { typing <- ty },
		OnPresence: func(p protocol.Presence) { presence <- p },
	})
	chat, err := alice.CreateDirect(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	orig, err := alice.Send(ctx, chat.ChatID, "helo")
	if err != nil {
		t.Fatal(err)
	}
	if m := wait(t, msgs, "the original"); m.MessageID != orig.MessageID {
		t.Fatalf("bob got %+v", m)
	}
	edit, err := alice.Edit(ctx, chat.ChatID, orig.MessageID, "hello")
	if err != nil || edit.MessageID == orig.MessageID {
		t.Fatalf("Edit = %+v, %v", edit, err)
	}
	if m := wait(t, msgs, "the edit"); m.MessageID != edit.MessageID || m.Edits != orig.MessageID || m.Body != "hello" {
		t.Errorf("bob got %+v, want the edit", m)
	}
	var ce *client.Error
	if _, err := bob.Edit(ctx, chat.ChatID, orig.MessageID, "mine now"); !errors.As(err, &ce) || ce.Code != protocol.CodeNotFound {
		t.Errorf("bob edits alice's message: %v, want not_found (as an unknown id)", err)
	}
	if _, err := bob.Delete(ctx, chat.ChatID, orig.MessageID); !errors.As(err, &ce) || ce.Code != protocol.CodeForbidden {
		t.Errorf("bob deletes alice's message: %v, want forbidden", err)
	}
	tomb, err := alice.Delete(ctx, chat.ChatID, orig.MessageID)
	if err != nil || !tomb.Deleted || tomb.Body != "" || tomb.MessageID != orig.MessageID {
		t.Fatalf("Delete = %+v, %v", tomb, err)
	}
	if m := wait(t, msgs, "the delete"); m.Deletes != orig.MessageID || m.Body != "" {
		t.Errorf("bob got %+v, want the delete", m)
	}
	if again, err := alice.Delete(ctx, chat.ChatID, orig.MessageID); err != nil || !again.SentAt.Equal(tomb.SentAt) || !again.Deleted {
		t.Errorf("second Delete = %+v, %v, want the same tombstone", again, err)
	}
	hist, _, err := bob.History(ctx, chat.ChatID, "", 0)
	if err != nil || len(hist) != 3 || !hist[0].Deleted || hist[1].Body != "" || hist[2].Deletes != orig.MessageID {
		t.Errorf("History = %+v, %v", hist, err)
	}

	if err := alice.Typing(ctx, chat.ChatID); err != nil {
		t.Fatal(err)
	}
	if ty := wait(t, typing, "alice typing"); ty.ChatID != chat.ChatID || ty.UserID != "alice" {
		t.Errorf("OnTyping got %+v", ty)
	}

	// dave shares a chat with bob; zed does not.
	if _, err := bob.CreateDirect(ctx, "dave"); err != nil {
		t.Fatal(err)
	}
	dave := dial("dave", client.Config{})
	for p := wait(t, presence, "dave online"); p.UserID != "dave"; p = wait(t, presence, "dave online") {
	}
	st, err := bob.Presence(ctx, []string{"dave", "zed"})
	if err != nil || len(st) != 1 || !st["dave"].Online {
		t.Errorf("Presence(dave, zed) = %+v, %v, want dave online and zed left out", st, err)
	}
	dave.Close()
	p := wait(t, presence, "dave offline")
	if p.UserID != "dave" || p.Online || p.LastSeen == nil {
		t.Errorf("OnPresence got %+v, want dave offline with lastSeen", p)
	}
	if st, err := bob.Presence(ctx, []string{"dave"}); err != nil || st["dave"].Online || st["dave"].LastSeen == nil {
		t.Errorf("Presence(dave) after = %+v, %v", st, err)
	}
	// A user id with a comma (docs/PROTOCOL.md: users repeated).
	if _, err := bob.CreateDirect(ctx, "d,e"); err != nil {
		t.Fatal(err)
	}
	for _, ask := range [][]string{{"d,e"}, {"d,e", "dave"}} {
		if st, err := bob.Presence(ctx, ask); err != nil || len(st) != len(ask) || st["d,e"].Online {
			t.Errorf("Presence(%q) = %+v, %v, want each offline", ask, st, err)
		}
	}
}
