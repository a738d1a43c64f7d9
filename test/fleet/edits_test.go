package fleet_test

import (
	"context"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/client"
	"github.com/tetra-messenger/tetra/workload/protocol"
)

// PROTOCOL.md §7.3 and §7.4 across two `tetra serve` processes (one
// PostgreSQL database, one Redis prefix): bob, on the second process,
// gets alice's edit and delete live, her typing, and her presence
// (online, then offline 10 s after her socket closed).
func TestFleetEditsTypingPresence(t *testing.T) {
	f := newFleet(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	msgs := make(chan protocol.Message, 32)
	typing := make(chan protocol.Typing, 8)
	presence := make(chan protocol.Presence, 8)
	dial := func(user string, proc int, cfg client.Config) *client.Client {
		t.Helper()
		tok, err := f.signer.Issue(user, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		cfg.URL, cfg.Token = "http://"+f.procs[proc].addr, tok
		c, err := client.Dial(ctx, cfg)
		if err != nil {
			t.Fatalf("dial %s on %s: %v", user, f.procs[proc].name, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	bob := dial("bob", 1, client.Config{
		OnMessage:  func(m protocol.Message) { msgs <- m },
		OnTyping:   func(ty protocol.Typing) { typing <- ty },
		OnPresence: func(p protocol.Presence) { presence <- p },
	})
	chat, err := bob.CreateDirect(ctx, "alice")
	if err != nil {
		t.Fatal(err)
	}
	alice := dial("alice", 0, client.Config{})
	waitFor := func(what string, ok func() bool) {
		t.Helper()
		if !eventually(20*time.Second, ok) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
	var p protocol.Presence
	waitFor("alice online", func() bool {
		select {
		case p = <-presence:
			return p.UserID == "alice" && p.Online
		default:
			return false
		}
	})
	orig, err := alice.Send(ctx, chat.ChatID, "hullo")
	if err != nil {
		t.Fatal(err)
	}
	edit, err := alice.Edit(ctx, chat.ChatID, orig.MessageID, "hello")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alice.Delete(ctx, chat.ChatID, orig.MessageID); err != nil {
		t.Fatal(err)
	}
	seen := map[string]protocol.Message{}
	waitFor("the message, the edit and the delete on the other process", func() bool {
		select {
		case m := <-msgs:
			seen[m.MessageID] = m
		default:
		}
		return len(seen) >= 3
	})
	// The edit crosses to bob's process by that process's outbox scan;
	// when the scan comes after the delete's commit, the edit's body is
	// already erased (PROTOCOL.md §7.3: deleting an edited message erases
	// its edits' bodies), so it arrives empty, never with another text.
	if m := seen[edit.MessageID]; m.Edits != orig.MessageID || (m.Body != "hello" && m.Body != "") {
		t.Errorf("edit arrived as %+v", m)
	}
	deletes := 0
	for _, m := range seen {
		if m.Deletes == orig.MessageID {
			deletes++
		}
	}
	if deletes != 1 {
		t.Errorf("bob got %d deletes of the original: %+v", deletes, seen)
	}
	if err := alice.Typing(ctx, chat.ChatID); err != nil {
		t.Fatal(err)
	}
	waitFor("alice typing", func() bool {
		select {
		case ty := <-typing:
			return ty.UserID == "alice" && ty.ChatID == chat.ChatID
		default:
			return false
		}
	})
	alice.Close()
	closed := time.Now()
	waitFor("alice offline", func() bool {
		select {
		case p = <-presence:
			return p.UserID == "alice" && !p.Online
		default:
			return false
		}
	})
	if took := time.Since(closed); took < 9*time.Second || p.LastSeen == nil {
		t.Errorf("alice offline after %v with lastSeen %v, want 10 s and a lastSeen", took, p.LastSeen)
	}
}
