package server_test

import (
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/server"
)

// TestFleetMembership: issue 14 across two processes on one PostgreSQL
// database and one Redis prefix. A read on a device connected to one
// process reaches the reader's device on the other; read markers stored
// through one are listed by the other; chat events of a change made
// through one process reach the devices on the other; and a member
// removed through one process stops at once on the other: the message it
// held unacknowledged there is not delivered again when its lease ends,
// its history and read receipts there answer 403, new messages skip it.
func TestFleetMembership(t *testing.T) {
	t.Parallel()
	// A short lease and poll: a message left pending is redelivered
	// within the quiet period below unless the exclusion dropped it.
	fleet := newFleet(t, 2, func(c *server.Config) {
		c.Tuning.Lease = time.Second
		c.Tuning.PollInterval = 100 * time.Millisecond
	})
	f0, f1 := fleet[0], fleet[1]
	g := f0.createGroup("alice", "Team", "bob", "carol")
	phone := f0.dial("alice", dialOpts{device: "phone"})
	laptop := f1.dial("alice", dialOpts{device: "laptop"})
	bob := f1.dial("bob", dialOpts{})
	carol := f0.dial("carol", dialOpts{})
	dave := f1.dial("dave", dialOpts{})

	// Read state across processes.
	m0 := carol.sendOK(g.ChatID, "c-0", "hello")
	phone.ack(phone.next("m0 on the phone", messageID(m0.MessageID)).MessageID)
	laptop.ack(laptop.next("m0 on the laptop", messageID(m0.MessageID)).MessageID)
	bob.ack(bob.next("m0 to bob", messageID(m0.MessageID)).MessageID)
	phone.write(map[string]string{"type": "read", "chatId": g.ChatID, "messageId": m0.MessageID})
	if r := laptop.next("the phone's read on the laptop, another process", isType("read")); r.UserID != "alice" || r.MessageID != m0.MessageID {
		t.Errorf("laptop got %s", r)
	}
	eventually(t, waitLong, "alice's read marker listed by the other process", func() bool {
		c, _ := f1.chatOf("alice", g.ChatID)
		return c.LastRead["alice"] == m0.MessageID && *c.Unread == 0
	})
	if c, _ := f1.chatOf("bob", g.ChatID); *c.Unread != 1 || c.CreatedBy != "alice" {
		t.Errorf("bob's chat on the other process = %+v, want unread 1, createdBy alice", c)
	}

	// Chat events across processes: added through f0, dave on f1.
	if status, raw := f0.addMember("alice", g.ChatID, "dave"); status != http.StatusOK {
		t.Fatalf("add dave: %d %s", status, raw)
	}
	if ev := asChatEvent(t, dave.next("dave's added event from the other process", isType("chat"))); ev.Event != "added" || !slices.Contains(ev.Chat.Members, "dave") {
		t.Errorf("dave got %+v", ev)
	}
	bob.next("bob's updated event (other process)", chatEventOf(g.ChatID, "updated"))
	carol.next("carol's updated event (same process)", chatEventOf(g.ChatID, "updated"))
	laptop.next("the laptop's updated event (other process)", chatEventOf(g.ChatID, "updated"))

	// bob, on f1, holds m1 unacknowledged, and his read receipt puts the
	// chat in f1's member cache; f0 removes him.
	m1 := carol.sendOK(g.ChatID, "c-1", "before")
	bob.next("m1 to bob", messageID(m1.MessageID))
	bob.write(map[string]string{"type": "read", "chatId": g.ChatID, "messageId": m0.MessageID})
	phone.next("bob's read", isType("read"))
	status, raw := f0.removeMember("alice", g.ChatID, "bob")
	if status != http.StatusOK {
		t.Fatalf("remove bob through f0: %d %s", status, raw)
	}
	if ev := asChatEvent(t, bob.next("bob's removed event from the other process", isType("chat"))); ev.Event != "removed" {
		t.Errorf("bob got %+v", ev)
	}
	if status, raw := f1.call("GET", "/api/chats/"+g.ChatID+"/messages", f1.token("bob"), nil); status != http.StatusForbidden && status != http.StatusNotFound {
		t.Errorf("bob's history through the other process right after the removal: %d %s", status, raw)
	}
	bob.write(map[string]string{"type": "read", "chatId": g.ChatID, "messageId": m1.MessageID})
	if f := bob.expect("error"); f.Code != "forbidden" {
		t.Errorf("bob's read receipt on the other process answered %s, want forbidden", f)
	}
	m2 := carol.sendOK(g.ChatID, "c-2", "after")
	dave.ack(dave.next("m2 to dave", messageID(m2.MessageID)).MessageID)
	// The lease is 1 s: without the exclusion m1 would come again.
	bob.expectNone("m1 again, or m2, after the removal", isType("message"), 2500*time.Millisecond)
}
