package server_test

import (
	"net/http"
	"testing"
	"time"
)

// What crosses processes in PROTOCOL.md §7.3 and §7.4: alice on one
// process, bob on another (one PostgreSQL database, one Redis prefix).
// Bob gets alice's edit and delete pushed live (the fleet's wake-up), the
// delete answered on a third process, and alice's typing (the fleet
// broadcast, one PUBLISH), never stored.
func TestFleetEditDeleteTyping(t *testing.T) {
	fleet := newFleet(t, 3, nil)
	chat := fleet[0].createGroup("alice", "team", "bob")
	alice, bob := fleet[0].dial("alice", dialOpts{}), fleet[1].dial("bob", dialOpts{})
	orig := alice.sendOK(chat.ChatID, "m1", "first draft")
	bob.ack(bob.next("the original", messageID(orig.MessageID)).MessageID)

	start := time.Now()
	alice.write(editFrame{Type: "send", ChatID: chat.ChatID, CorrelationID: "e1", Body: "final", Edits: orig.MessageID})
	acc := alice.next("edit answer", answers("e1"))
	if acc.Type != "accepted" {
		t.Fatalf("edit answered %s", acc)
	}
	f := bob.next("the edit on another process", messageID(acc.MessageID))
	if f.Edits != orig.MessageID || f.Body != "final" {
		t.Fatalf("edit pushed as %s", f)
	}
	bob.ack(f.MessageID)
	if took := time.Since(start); took > fleetPollInterval/2 {
		t.Errorf("the edit took %v to cross processes: the poll, not the wake-up", took)
	}

	status, raw := fleet[2].deleteMessage("alice", chat.ChatID, orig.MessageID)
	if status != http.StatusOK {
		t.Fatalf("delete on a third process: %d %s", status, raw)
	}
	d := bob.next("the delete on another process", func(f frame) bool { return f.Type == "message" && f.Deletes == orig.MessageID })
	bob.ack(d.MessageID)
	if h := fleet[1].history("bob", chat.ChatID, ""); len(h) != 3 || !h[0].Deleted || h[1].Body != "" {
		t.Errorf("history on bob's process = %+v, want the tombstone, the erased edit, the delete", h)
	}

	alice.write(map[string]string{"type": "typing", "chatId": chat.ChatID})
	bob.next("typing from another process", isTyping(chat.ChatID, "alice"))
	if h := fleet[1].history("bob", chat.ChatID, ""); len(h) != 3 {
		t.Errorf("typing was stored: history holds %d messages", len(h))
	}
}

// TestFleetTypingGate: the typing gate of PROTOCOL.md §7.4 ("at most one
// per (user, chat) every 2 s") holds for the deployment, not per process:
// alice types on two devices connected to two processes, and bob and
// carol, one on each process, get one typing frame of hers per interval;
// after the interval one goes through again. With a gate per process,
// each process forwarded one (two frames within the interval).
func TestFleetTypingGate(t *testing.T) {
	fleet := newFleet(t, 2, nil)
	chat := fleet[0].createGroup("alice", "team", "bob", "carol")
	a0, a1 := fleet[0].dial("alice", dialOpts{device: "a0"}), fleet[1].dial("alice", dialOpts{device: "a1"})
	bob, carol := fleet[0].dial("bob", dialOpts{}), fleet[1].dial("carol", dialOpts{})
	typing := map[string]string{"type": "typing", "chatId": chat.ChatID}
	start := time.Now()
	a0.write(typing)
	a0.sync()
	a1.write(typing)
	a1.sync()
	for _, c := range []*wsClient{bob, carol} {
		c.next("alice typing", isTyping(chat.ChatID, "alice"))
	}
	bob.expectNone("a second typing frame of alice within 2 s (from the other process)", isTyping(chat.ChatID, "alice"), time.Until(start.Add(1500*time.Millisecond)))
	carol.expectNone("a second typing frame of alice within 2 s (from the other process)", isTyping(chat.ChatID, "alice"), 10*time.Millisecond)
	time.Sleep(time.Until(start.Add(2100 * time.Millisecond)))
	a1.write(typing)
	for _, c := range []*wsClient{bob, carol} {
		c.next("alice typing after 2 s", isTyping(chat.ChatID, "alice"))
		if n := c.count(isTyping(chat.ChatID, "alice")); n != 2 {
			t.Errorf("%d typing frames of alice, want 2 (one per interval in the fleet)", n)
		}
	}
}
