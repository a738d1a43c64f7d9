package hostile_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/tetra-messenger/tetra/workload/protocol"
	"github.com/tetra-messenger/tetra/workload/server"
)

// The e2e suite (workload/server TestE2EAuthorization, TestE2EReadReceipts)
// covers a non-member's send, read, history, add member and receive. Not
// covered there: a non-member acknowledging a guessed (here: the real)
// messageId of someone else's message. It must not count as the
// recipient's ack: bob, who did not ack, still gets the message re-sent.
func TestForeignAckDoesNotClearRecipient(t *testing.T) {
	e := start(t, func(c *server.Config) { c.Tuning.Lease = 700 * time.Millisecond })
	alice := e.client("alice", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	chat, err := alice.CreateDirect(ctx, "bob")
	if err != nil {
		t.Fatal(err)
	}
	bob, _, err := e.rawWS("bob")
	if err != nil {
		t.Fatal(err)
	}
	mallory, _, err := e.rawWS("mallory")
	if err != nil {
		t.Fatal(err)
	}
	go func() { // mallory reads (hello, errors) so her socket stays healthy
		for {
			if _, _, err := mallory.Read(ctx); err != nil {
				return
			}
		}
	}()
	acc, err := alice.Send(ctx, chat.ChatID, "for bob")
	if err != nil {
		t.Fatal(err)
	}
	frames := 0
	for frames < 2 {
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		_, raw, err := bob.Read(rctx)
		rcancel()
		if err != nil {
			t.Fatalf("bob got the message %d time(s), then %v: a foreign ack cleared his pending message", frames, err)
		}
		var f protocol.Message
		_ = json.Unmarshal(raw, &f)
		if f.Type != protocol.TypeMessage || f.MessageID != acc.MessageID {
			continue
		}
		frames++
		if frames == 1 { // mallory "acknowledges" bob's message, repeatedly
			for range 3 {
				ack := fmt.Sprintf(`{"type":"ack","messageIds":[%q]}`, acc.MessageID)
				if err := mallory.Write(ctx, websocket.MessageText, []byte(ack)); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	// And a non-member asking for the chat's history with the real ids
	// (as since, and as the path) gets nothing.
	hc := &http.Client{Timeout: 5 * time.Second}
	for _, path := range []string{
		"/api/chats/" + url.PathEscape(chat.ChatID) + "/messages?since=" + acc.MessageID,
		"/api/chats/" + url.PathEscape(acc.MessageID) + "/messages",
	} {
		req, _ := http.NewRequest(http.MethodGet, e.srv.URL()+path, nil)
		req.Header.Set("Authorization", "Bearer "+e.token("mallory"))
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusForbidden && resp.StatusCode != http.StatusNotFound {
			t.Errorf("non-member GET %s: %d", path, resp.StatusCode)
		}
	}
}
