package client_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/tetra-messenger/tetra/workload/client"
	"github.com/tetra-messenger/tetra/workload/protocol"
)

// Connect as alice, open the direct chat with bob, send a message and print
// every message received. It needs a running server (go run
// ./workload/cmd/tetra serve) and a token (tetra token --user alice), so it
// has no Output line and is compiled but not run by go test.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	c, err := client.Dial(ctx, client.Config{
		URL:   "http://127.0.0.1:8080",
		Token: os.Getenv("TETRA_TOKEN"),
		// Called once per new message, live or recovered from history
		// after a reconnect. Do not call Send from here: hand work off.
		OnMessage: func(m protocol.Message) {
			fmt.Printf("%s in %s: %s\n", m.SenderID, m.ChatID, m.Body)
		},
		OnState: func(s client.StateChange) {
			log.Printf("connection %s (close code %d)", s.State, s.CloseCode)
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	fmt.Println("connected as", c.Hello().UserID)

	chat, err := c.CreateDirect(ctx, "bob")
	if err != nil {
		log.Fatal(err)
	}
	// Send waits until the message is committed to history; across a
	// reconnect it resends under the same correlationId, so the message is
	// stored once.
	acc, err := c.Send(ctx, chat.ChatID, "hi bob")
	if err != nil {
		log.Fatal(err) // e.g. a *client.Error with Code "forbidden"
	}
	fmt.Println("stored as", acc.MessageID)

	<-ctx.Done() // receive for a while
}

// A caller that keeps its own idempotency keys (a retry queue persisted
// across restarts, the load generator) uses SendWithID: sending the same
// key twice stores the message once and returns the same messageId.
func ExampleClient_SendWithID() {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Config{URL: "http://127.0.0.1:8080", Token: os.Getenv("TETRA_TOKEN")})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	key := client.NewCorrelationID() // persist it with the outgoing message
	first, err := c.SendWithID(ctx, "chat-id", key, "exactly once")
	if err != nil {
		log.Fatal(err)
	}
	again, err := c.SendWithID(ctx, "chat-id", key, "exactly once")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(first.MessageID == again.MessageID) // true
}

// Tokens expire: the server closes a socket whose token's exp passed (close
// 4005). An application that mints short-lived tokens hands the client a
// way to get new ones; the client asks for one 30 s before exp
// (Config.RefreshBefore), sends it on the live socket and uses it for every
// later call and reconnect.
func ExampleConfig_tokenRefresh() {
	mint := func(ctx context.Context) (string, error) {
		// Ask the application's own auth service for a new token of the
		// same user, for example POST /session/refresh.
		return os.Getenv("TETRA_TOKEN"), nil
	}
	c, err := client.Dial(context.Background(), client.Config{
		URL:          "http://127.0.0.1:8080",
		Token:        os.Getenv("TETRA_TOKEN"),
		TokenRefresh: mint,
		OnError:      func(err error) { log.Print(err) }, // a failed refresh is retried
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
}

// Unread counts and read markers come from the server, so they agree on
// every device and survive restarts; chat events keep the chat list
// current without polling, and a read on another device of the same user
// arrives through OnRead.
func ExampleConfig_OnChat() {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Config{
		URL:   "http://127.0.0.1:8080",
		Token: os.Getenv("TETRA_TOKEN"),
		OnChat: func(ev client.ChatEvent) {
			switch ev.Event {
			case client.ChatAdded:
				fmt.Println("added to", ev.Chat.Title)
			case client.ChatRemoved:
				fmt.Println("no longer in", ev.Chat.Title)
			case client.ChatUpdated:
				fmt.Println(ev.Chat.Title, "now has", len(ev.Chat.Members), "members")
			}
		},
		OnRead: func(r protocol.Read) {
			fmt.Println(r.UserID, "read", r.ChatID, "up to", r.MessageID)
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	chats, err := c.Chats(ctx)
	if err != nil {
		log.Fatal(err)
	}
	for _, ch := range chats {
		fmt.Printf("%s: %d unread, created by %q, read markers %v\n", ch.Title, ch.Unread, ch.CreatedBy, ch.LastRead)
		if ch.Kind == client.KindGroup && ch.Unread == 0 {
			if _, err := c.Leave(ctx, ch.ChatID); err != nil {
				log.Print(err) // a *client.Error with Code "forbidden" or "invalid"
			}
		}
	}
}
