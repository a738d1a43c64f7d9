package server_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tetra-messenger/tetra/internal/testenv"
	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/server"
)

// downStore fails the chat API's reads with ErrUnavailable while down is
// set, as a store that cannot be reached does.
type downStore struct {
	history.Store
	down *atomic.Bool
}

func (d downStore) fail() error {
	if d.down.Load() {
		return fmt.Errorf("test: %w", history.ErrUnavailable)
	}
	return nil
}

func (d downStore) Messages(ctx context.Context, q history.PageQuery) ([]history.Message, bool, error) {
	if err := d.fail(); err != nil {
		return nil, false, err
	}
	return d.Store.Messages(ctx, q)
}

func (d downStore) ChatList(ctx context.Context, user, cursor string, limit int) ([]history.Chat, string, error) {
	if err := d.fail(); err != nil {
		return nil, "", err
	}
	return d.Store.ChatList(ctx, user, cursor, limit)
}

func (d downStore) ChatFor(ctx context.Context, chatID, user string) (history.Chat, error) {
	if err := d.fail(); err != nil {
		return history.Chat{}, err
	}
	return d.Store.ChatFor(ctx, chatID, user)
}

// TestE2EUnavailable: a store that cannot answer gets HTTP 503 with the
// code unavailable (PROTOCOL.md §7.8), never a 500, the server logs it at
// WARN with the path and the store's error, and the calls answer again
// once it is back.
func TestE2EUnavailable(t *testing.T) {
	t.Parallel()
	var down atomic.Bool
	logs := &testenv.LogBuffer{}
	e := newEnv(t, backends(t)[0], func(c *server.Config) {
		c.WrapStore = func(s history.Store) history.Store { return downStore{Store: s, down: &down} }
		c.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	g := e.createGroup("alice", "T", "bob")
	down.Store(true)
	for _, p := range []string{"/api/chats", "/api/chats/" + g.ChatID, "/api/chats/" + g.ChatID + "/messages?before=end"} {
		// Not e.call: it counts every 5xx as a failure, and a 503 is the
		// answer here.
		req, err := http.NewRequestWithContext(t.Context(), "GET", e.srv.URL()+p, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+e.token("alice"))
		resp, err := e.http.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if ej := decode[errorJSON](t, raw); resp.StatusCode != http.StatusServiceUnavailable || ej.Error.Code != "unavailable" {
			t.Errorf("GET %s with the store down: %d %s, want 503 unavailable", p, resp.StatusCode, raw)
		}
	}
	if l := logs.Tail(1000); !strings.Contains(l, `level=WARN msg="HTTP request answered 503: the store failed" method=GET path=/api/chats err="test: history: store unavailable"`) {
		t.Errorf("no WARN line for the first 503 in the server's log:\n%s", l)
	}
	down.Store(false)
	if l := e.list7("alice", ""); len(l.Chats) != 1 {
		t.Errorf("after the store is back: %+v", l)
	}
}
