package server_test

import (
	"testing"
	"time"
)

func isTyping(chat, user string) func(frame) bool {
	return func(f frame) bool { return f.Type == "typing" && f.ChatID == chat && f.UserID == user }
}

// Typing (PROTOCOL.md §7.4), on every backend: a member's typing frame
// reaches the other members' devices as {"type":"typing","chatId","userId"}
// and not the typist's own devices; more within 2 s are dropped; one
// after the interval is forwarded again; a non-member and an unknown chat
// get an error; nothing is stored (no history, no outbox row).
func TestE2ETyping(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		chat := e.createGroup("alice", "team", "bob", "carol")
		a1, a2 := e.dial("alice", dialOpts{device: "a1"}), e.dial("alice", dialOpts{device: "a2"})
		bob, carol, mallory := e.dial("bob", dialOpts{}), e.dial("carol", dialOpts{}), e.dial("mallory", dialOpts{})
		depth := e.outboxDepth()

		a1.write(map[string]string{"type": "typing", "chatId": chat.ChatID})
		for _, c := range []*wsClient{bob, carol} {
			f := c.next("alice typing", isTyping(chat.ChatID, "alice"))
			expectKeys(t, "typing frame", f.Raw, "type", "chatId", "userId")
		}
		start := time.Now()
		// More within the interval are dropped, whatever device sends them.
		for range 5 {
			a1.write(map[string]string{"type": "typing", "chatId": chat.ChatID})
			a2.write(map[string]string{"type": "typing", "chatId": chat.ChatID})
		}
		a1.sync()
		a2.sync()
		bob.expectNone("a second typing frame within 2 s", isTyping(chat.ChatID, "alice"), time.Until(start.Add(1500*time.Millisecond)))
		a2.expectNone("alice's own typing", isTyping(chat.ChatID, "alice"), 10*time.Millisecond)
		a1.expectNone("alice's own typing", isTyping(chat.ChatID, "alice"), 10*time.Millisecond)
		// After the interval: forwarded again.
		time.Sleep(time.Until(start.Add(2100 * time.Millisecond)))
		a2.write(map[string]string{"type": "typing", "chatId": chat.ChatID})
		bob.next("alice typing after 2 s", isTyping(chat.ChatID, "alice"))
		if n := bob.count(isTyping(chat.ChatID, "alice")); n != 2 {
			t.Errorf("bob got %d typing frames of alice, want 2 (one per interval)", n)
		}
		// Bob typing reaches alice's devices.
		bob.write(map[string]string{"type": "typing", "chatId": chat.ChatID})
		a1.next("bob typing on a1", isTyping(chat.ChatID, "bob"))
		a2.next("bob typing on a2", isTyping(chat.ChatID, "bob"))

		// Not a member; no such chat: an error, nothing forwarded.
		mallory.write(map[string]string{"type": "typing", "chatId": chat.ChatID})
		if f := mallory.expect("error"); f.Code != "forbidden" {
			t.Errorf("non-member typing answered %s, want forbidden", f)
		}
		mallory.write(map[string]string{"type": "typing", "chatId": chat.ChatID})
		if f := mallory.expect("error"); f.Code != "forbidden" {
			t.Errorf("non-member typing again answered %s, want forbidden", f)
		}
		mallory.write(map[string]string{"type": "typing", "chatId": "no-such-chat"})
		if f := mallory.expect("error"); f.Code != "not_found" {
			t.Errorf("typing in no chat answered %s, want not_found", f)
		}
		carol.expectNone("mallory typing", isTyping(chat.ChatID, "mallory"), 200*time.Millisecond)

		// Never stored.
		if h := e.history("bob", chat.ChatID, ""); len(h) != 0 {
			t.Errorf("history holds %d messages after typing only", len(h))
		}
		if d := e.outboxDepth(); d != depth {
			t.Errorf("outbox depth %d after typing, was %d", d, depth)
		}
	})
}
