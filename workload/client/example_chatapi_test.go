package client_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/tetra-messenger/tetra/workload/client"
)

// Show the chat list as an app does (newest activity first, with a preview
// of each chat's last message), then open the first chat on its newest
// page and load one older page, as when the user scrolls up (PROTOCOL.md
// §7.1, §7.2). Compiled, not run: it needs a server and a token.
func ExampleClient_HistoryBefore() {
	ctx := context.Background()
	c, err := client.Dial(ctx, client.Config{URL: "http://127.0.0.1:8080", Token: os.Getenv("TETRA_TOKEN")})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	chats, next, err := c.ChatPage(ctx, "", 50) // next: the cursor of the following 50
	if err != nil {
		log.Fatal(err)
	}
	for _, ch := range chats {
		preview := ""
		if ch.LastMessage != nil {
			preview = ch.LastMessage.SenderID + ": " + ch.LastMessage.Body
		}
		fmt.Printf("%s (%d unread) %s  %s\n", ch.Title, ch.Unread, ch.LastActivity.Format("15:04"), preview)
	}
	_ = next
	if len(chats) == 0 {
		return
	}
	page, older, err := c.HistoryBefore(ctx, chats[0].ChatID, "", 30) // the newest 30, oldest first
	if err != nil {
		log.Fatal(err)
	}
	if older && len(page) > 0 {
		// Scrolled to the top: the 30 before the first one shown.
		above, _, err := c.HistoryBefore(ctx, chats[0].ChatID, page[0].MessageID, 30)
		if err != nil {
			log.Fatal(err)
		}
		page = append(above, page...)
	}
	fmt.Println(len(page), "messages on screen")
}
