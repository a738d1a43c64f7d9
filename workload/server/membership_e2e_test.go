package server_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/server"
)

// Issue 14, points 1-3 (PROTOCOL.md §2, §3, additions of 2026-12-01): read
// state, DELETE members, chat events. Each runs on the embedded default
// and on PostgreSQL + Redis; TestFleetMembership runs them across two
// processes.

// coreBackends runs fn on sqlite+memory and postgres+redis.
func coreBackends(t *testing.T, fn func(t *testing.T, b backend)) {
	t.Helper()
	for _, b := range backends(t) {
		if b.name != "sqlite+memory" && b.name != "postgres+redis" {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			fn(t, b)
		})
	}
}

// chatEvent is a chat frame.
type chatEvent struct {
	Type  string   `json:"type"`
	Event string   `json:"event"`
	Chat  chatJSON `json:"chat"`
}

func asChatEvent(t testing.TB, f frame) chatEvent {
	t.Helper()
	return decode[chatEvent](t, f.Raw)
}

// chatEventOf matches a chat frame of chatID with event.
func chatEventOf(chatID, event string) func(frame) bool {
	return func(f frame) bool {
		if f.Type != "chat" {
			return false
		}
		var ev chatEvent
		return json.Unmarshal(f.Raw, &ev) == nil && ev.Event == event && ev.Chat.ChatID == chatID
	}
}

// chatOf returns user's view of chatID from GET /api/chats (ok false when
// it is not listed).
func (e *env) chatOf(user, chatID string) (chatJSON, bool) {
	e.t.Helper()
	status, raw := e.call("GET", "/api/chats", e.token(user), nil)
	if status != http.StatusOK {
		e.t.Fatalf("GET /api/chats as %s: %d %s", user, status, raw)
	}
	list := decode[struct {
		Chats []chatJSON `json:"chats"`
	}](e.t, raw)
	for _, c := range list.Chats {
		if c.ChatID == chatID {
			if c.Unread == nil || c.LastRead == nil {
				e.t.Fatalf("GET /api/chats: chat without unread or lastRead: %s", raw)
			}
			return c, true
		}
	}
	return chatJSON{}, false
}

// removeMember calls DELETE /api/chats/{chatId}/members/{userId} as by.
func (e *env) removeMember(by, chatID, user string) (int, []byte) {
	e.t.Helper()
	return e.call("DELETE", "/api/chats/"+url.PathEscape(chatID)+"/members/"+url.PathEscape(user), e.token(by), nil)
}

func (e *env) addMember(by, chatID, user string) (int, []byte) {
	e.t.Helper()
	return e.call("POST", "/api/chats/"+url.PathEscape(chatID)+"/members", e.token(by), map[string]string{"userId": user})
}

// TestE2EReadState: read markers are stored per (chat, user), forward
// only, come back in GET /api/chats as lastRead with the caller's unread
// count (others' messages after its own marker), and the read frame
// reaches the reader's other devices but not the reading one.
func TestE2EReadState(t *testing.T) {
	t.Parallel()
	coreBackends(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		g := e.createGroup("alice", "Team", "bob", "carol")
		if g.CreatedBy != "alice" || g.Unread == nil || *g.Unread != 0 || g.LastRead == nil {
			t.Errorf("created group = %+v, want createdBy alice, unread 0, lastRead {}", g)
		}
		phone := e.dial("alice", dialOpts{device: "phone"})
		laptop := e.dial("alice", dialOpts{device: "laptop"})
		bob := e.dial("bob", dialOpts{})
		var ms []frame
		for i := range 3 {
			ms = append(ms, bob.sendOK(g.ChatID, fmt.Sprintf("b-%d", i), fmt.Sprintf("hi %d", i)))
		}
		if c, _ := e.chatOf("alice", g.ChatID); *c.Unread != 3 || len(c.LastRead) != 0 || c.CreatedBy != "alice" {
			t.Errorf("alice's chat before reading = %+v, want unread 3, no lastRead", c)
		}
		if c, _ := e.chatOf("bob", g.ChatID); *c.Unread != 0 {
			t.Errorf("bob's unread = %d, want 0 (his own messages do not count)", *c.Unread)
		}

		phone.write(map[string]string{"type": "read", "chatId": g.ChatID, "messageId": ms[1].MessageID})
		if r := laptop.next("alice's read echoed to her laptop", isType("read")); r.UserID != "alice" || r.MessageID != ms[1].MessageID || r.ChatID != g.ChatID {
			t.Errorf("laptop got %s, want alice's read of %s", r, ms[1].MessageID)
		}
		if r := bob.next("alice's read", isType("read")); r.UserID != "alice" || r.MessageID != ms[1].MessageID {
			t.Errorf("bob got %s", r)
		}
		phone.expectNone("the read echoed back to the reading connection", isType("read"), quiet)
		eventually(t, waitLong, "alice's read marker stored", func() bool {
			c, _ := e.chatOf("alice", g.ChatID)
			return c.LastRead["alice"] == ms[1].MessageID && *c.Unread == 1
		})
		if c, _ := e.chatOf("bob", g.ChatID); c.LastRead["alice"] != ms[1].MessageID {
			t.Errorf("bob sees lastRead %v, want alice at %s", c.LastRead, ms[1].MessageID)
		}

		// Backwards: stored markers do not move. carol's receipt after it
		// goes through the same read pipeline, so once it is stored the
		// backward one was handled.
		laptop.write(map[string]string{"type": "read", "chatId": g.ChatID, "messageId": ms[0].MessageID})
		carol := e.dial("carol", dialOpts{})
		carol.write(map[string]string{"type": "read", "chatId": g.ChatID, "messageId": ms[2].MessageID})
		eventually(t, waitLong, "carol's read marker stored", func() bool {
			c, _ := e.chatOf("carol", g.ChatID)
			return c.LastRead["carol"] == ms[2].MessageID && *c.Unread == 0
		})
		if c, _ := e.chatOf("alice", g.ChatID); c.LastRead["alice"] != ms[1].MessageID || *c.Unread != 1 {
			t.Errorf("after a read of an older message alice's chat = %+v, want lastRead still %s and unread 1", c, ms[1].MessageID)
		}
		// Her own messages do not count as unread.
		phone.sendOK(g.ChatID, "a-1", "mine")
		if c, _ := e.chatOf("alice", g.ChatID); *c.Unread != 1 {
			t.Errorf("alice's unread after her own send = %d, want 1", *c.Unread)
		}
		if c, _ := e.chatOf("carol", g.ChatID); *c.Unread != 1 {
			t.Errorf("carol's unread after alice's send = %d, want 1", *c.Unread)
		}
		// Restarted (reload): the markers are stored, not kept in memory.
		if b.name == "sqlite+memory" {
			for _, c := range []*wsClient{phone, laptop, bob, carol} {
				c.close()
			}
			e.restart()
			if c, _ := e.chatOf("alice", g.ChatID); c.LastRead["alice"] != ms[1].MessageID || c.LastRead["carol"] != ms[2].MessageID || *c.Unread != 1 {
				t.Errorf("after a restart alice's chat = %+v", c)
			}
		}
	})
}

// TestE2ERemoveMember: DELETE members answers 200 with the chat; only the
// creator removes others, anyone leaves, group chats only; the removed
// member's devices get a "removed" event and the others "updated"; its
// pending messages of the chat stop pinning the outbox at once; it gets no
// more messages of the chat, 403 on its history and on read receipts, and
// adding it again restores everything with an "added" event.
func TestE2ERemoveMember(t *testing.T) {
	t.Parallel()
	coreBackends(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		g := e.createGroup("alice", "Team", "bob", "carol")
		direct := e.createDirect("alice", "bob")
		alice := e.dial("alice", dialOpts{})
		bob := e.dial("bob", dialOpts{})
		carol := e.dial("carol", dialOpts{})

		// Refusals first: each leaves the chat as it was.
		for _, tc := range []struct {
			by, chat, user string
			status         int
		}{
			{"carol", g.ChatID, "bob", http.StatusForbidden},       // not the creator
			{"dave", g.ChatID, "dave", http.StatusForbidden},       // not a member
			{"alice", direct.ChatID, "bob", http.StatusBadRequest}, // a direct chat
			{"alice", "c_nosuchchat", "bob", http.StatusNotFound},
			{"alice", g.ChatID, "bad\x01id", http.StatusBadRequest},
			{"alice", g.ChatID, string(make([]byte, 300)), http.StatusBadRequest},
		} {
			status, raw := e.removeMember(tc.by, tc.chat, tc.user)
			if status != tc.status {
				t.Errorf("DELETE %s from %s as %s: %d %s, want %d", tc.user, tc.chat, tc.by, status, raw, tc.status)
			}
			if status == http.StatusBadRequest {
				expectInvalid(t, "DELETE members", status, raw)
			}
		}

		// bob holds a message of the chat unacknowledged: it pins the outbox.
		m1 := alice.sendOK(g.ChatID, "a-1", "before")
		bob.next("m1", messageID(m1.MessageID)) // not acknowledged
		carol.ack(carol.next("m1", messageID(m1.MessageID)).MessageID)

		status, raw := e.removeMember("alice", g.ChatID, "bob")
		if status != http.StatusOK {
			t.Fatalf("DELETE bob as the creator: %d %s", status, raw)
		}
		if c := decode[chatJSON](t, raw); !slices.Equal(c.Members, []string{"alice", "carol"}) || c.CreatedBy != "alice" {
			t.Errorf("answer %s, want the chat without bob", raw)
		}
		if ev := asChatEvent(t, bob.next("bob's removed event", isType("chat"))); ev.Event != "removed" || ev.Chat.ChatID != g.ChatID || slices.Contains(ev.Chat.Members, "bob") {
			t.Errorf("bob got %+v, want removed", ev)
		}
		for _, c := range []*wsClient{alice, carol} {
			if ev := asChatEvent(t, c.next("updated event", isType("chat"))); ev.Event != "updated" || !slices.Equal(ev.Chat.Members, []string{"alice", "carol"}) {
				t.Errorf("%s got %+v, want updated without bob", c.name, ev)
			}
		}
		// The pending row stops counting against bob's pin at once: the
		// outbox drains well within the lease (5 s), without bob's ack.
		alice.ack() // nothing; alice sent m1
		eventually(t, 3*time.Second, "the outbox to drain without bob's ack", func() bool { return e.outboxDepth() == 0 })

		m2 := alice.sendOK(g.ChatID, "a-2", "after")
		carol.ack(carol.next("m2", messageID(m2.MessageID)).MessageID)
		bob.expectNone("a message of a chat he was removed from", isType("message"), quiet)
		if status, raw := e.call("GET", "/api/chats/"+g.ChatID+"/messages", e.token("bob"), nil); status != http.StatusForbidden && status != http.StatusNotFound {
			t.Errorf("bob's history after removal: %d %s, want 403 or 404", status, raw)
		}
		bob.write(map[string]string{"type": "read", "chatId": g.ChatID, "messageId": m1.MessageID})
		if f := bob.expect("error"); f.Code != "forbidden" {
			t.Errorf("bob's read receipt after removal answered %s, want forbidden", f)
		}
		bob.sendErr(g.ChatID, "b-x", "still here?", "forbidden")
		if _, listed := e.chatOf("bob", g.ChatID); listed {
			t.Errorf("bob's chat list still has the chat")
		}
		// Removing a non-member changes nothing and answers the chat.
		if status, raw := e.removeMember("alice", g.ChatID, "bob"); status != http.StatusOK {
			t.Errorf("removing bob again: %d %s, want 200", status, raw)
		}

		// Adding him again restores access and live delivery.
		if status, raw := e.addMember("carol", g.ChatID, "bob"); status != http.StatusOK {
			t.Fatalf("re-add bob: %d %s", status, raw)
		}
		if ev := asChatEvent(t, bob.next("bob's added event", isType("chat"))); ev.Event != "added" || !slices.Contains(ev.Chat.Members, "bob") {
			t.Errorf("bob got %+v, want added", ev)
		}
		alice.next("alice's updated event", chatEventOf(g.ChatID, "updated"))
		m3 := alice.sendOK(g.ChatID, "a-3", "welcome back")
		bob.ack(bob.next("m3 after re-adding", messageID(m3.MessageID)).MessageID)
		if got := ids(e.history("bob", g.ChatID, "")); !slices.Equal(got, []string{m1.MessageID, m2.MessageID, m3.MessageID}) {
			t.Errorf("bob's history after re-adding = %v", got)
		}

		// Leaving: any member, itself.
		status, raw = e.removeMember("carol", g.ChatID, "carol")
		if status != http.StatusOK || slices.Contains(decode[chatJSON](t, raw).Members, "carol") {
			t.Errorf("carol leaves: %d %s", status, raw)
		}
		carol.next("carol's removed event", chatEventOf(g.ChatID, "removed"))
		bob.next("bob's updated event", chatEventOf(g.ChatID, "updated"))
	})
}

// TestE2EChatAddedEvent: a user added to a group gets an "added" event on
// every connected device (the chat appears without a reload), the other
// members "updated".
func TestE2EChatAddedEvent(t *testing.T) {
	t.Parallel()
	coreBackends(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		g := e.createGroup("alice", "Team", "bob")
		phone := e.dial("dave", dialOpts{device: "phone"})
		laptop := e.dial("dave", dialOpts{device: "laptop"})
		bob := e.dial("bob", dialOpts{})
		if status, raw := e.addMember("bob", g.ChatID, "dave"); status != http.StatusOK {
			t.Fatalf("add dave: %d %s", status, raw)
		}
		for _, c := range []*wsClient{phone, laptop} {
			ev := asChatEvent(t, c.next("dave's added event", isType("chat")))
			if ev.Event != "added" || ev.Chat.ChatID != g.ChatID || ev.Chat.Title != "Team" || ev.Chat.CreatedBy != "alice" ||
				!slices.Equal(ev.Chat.Members, []string{"alice", "bob", "dave"}) || ev.Chat.LastRead == nil {
				t.Errorf("%s got %s", c.name, ev.Chat.ChatID)
			}
		}
		bob.next("bob's updated event", chatEventOf(g.ChatID, "updated"))
		// Adding an existing member changes nothing: no event.
		if status, _ := e.addMember("bob", g.ChatID, "dave"); status != http.StatusOK {
			t.Fatalf("add dave again: %d", status)
		}
		phone.expectNone("an event for a change that changed nothing", isType("chat"), quiet)
	})
}

// TestE2EChatCreatedEvent: the members of a chat just created get an
// "added" event on every connected device, the creator's other devices
// too (found by the web page's tester: a new group appeared only with its
// first message or a reload).
func TestE2EChatCreatedEvent(t *testing.T) {
	t.Parallel()
	coreBackends(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		bob := e.dial("bob", dialOpts{})
		carol := e.dial("carol", dialOpts{})
		aliceLaptop := e.dial("alice", dialOpts{device: "laptop"})
		g := e.createGroup("alice", "New", "bob", "carol")
		for _, c := range []*wsClient{bob, carol, aliceLaptop} {
			ev := asChatEvent(t, c.next(c.name+"'s added event", chatEventOf(g.ChatID, "added")))
			if ev.Chat.Title != "New" || !slices.Equal(ev.Chat.Members, []string{"alice", "bob", "carol"}) {
				t.Errorf("%s got %+v", c.name, ev.Chat)
			}
		}
		d := e.createDirect("carol", "bob")
		bob.next("bob's added event for the direct chat", chatEventOf(d.ChatID, "added"))
		// The same pair again: nothing was created, no event.
		e.createDirect("bob", "carol")
		carol.next("carol's added event for the direct chat", chatEventOf(d.ChatID, "added"))
		carol.expectNone("an event for a chat that already existed", isType("chat"), quiet)
	})
}

// TestE2ERemovalVersusSends: alice and carol send to the group without a
// pause while alice removes bob. No message sent after the removal was
// answered reaches bob, live or from history; every message bob got live
// precedes, in history order, every message sent after the answer; and
// carol (still a member) gets everything.
func TestE2ERemovalVersusSends(t *testing.T) {
	t.Parallel()
	coreBackends(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, func(c *server.Config) {
			c.Tuning.SendsPerSecond = 100_000
			c.Tuning.FanoutPerSecond = 1_000_000
		})
		g := e.createGroup("alice", "Team", "bob", "carol")
		bob := e.dial("bob", dialOpts{})
		senders := []*wsClient{e.dial("alice", dialOpts{device: "s"}), e.dial("carol", dialOpts{device: "s"})}

		var mu sync.Mutex
		var answeredAt time.Time // zero until the removal answered
		after := map[string]bool{}
		var wg sync.WaitGroup
		stop := make(chan struct{})
		for i, s := range senders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for k := 0; ; k++ {
					select {
					case <-stop:
						return
					default:
					}
					mu.Lock()
					sentAfter := !answeredAt.IsZero()
					mu.Unlock()
					f, err := s.sendOKE(g.ChatID, fmt.Sprintf("s%d-%d", i, k), "race")
					if err != nil {
						t.Errorf("send: %v", err)
						return
					}
					if sentAfter {
						mu.Lock()
						after[f.MessageID] = true
						mu.Unlock()
					}
				}
			}()
		}
		// bob acknowledges what he gets so that he is never withdrawn.
		got := map[string]bool{}
		done := make(chan struct{})
		go func() {
			defer close(done)
			for {
				f, err := bob.nextE(isType("message"), 2*time.Second)
				if err != nil {
					return
				}
				got[f.MessageID] = true
				bob.ack(f.MessageID)
			}
		}()
		time.Sleep(300 * time.Millisecond)
		status, raw := e.removeMember("alice", g.ChatID, "bob")
		if status != http.StatusOK {
			t.Fatalf("remove bob: %d %s", status, raw)
		}
		mu.Lock()
		answeredAt = time.Now()
		mu.Unlock()
		time.Sleep(500 * time.Millisecond)
		close(stop)
		wg.Wait()
		<-done

		all := ids(e.history("carol", g.ChatID, ""))
		firstAfter := len(all)
		for i, id := range all {
			if after[id] {
				firstAfter = min(firstAfter, i)
			}
		}
		if len(after) == 0 || firstAfter == len(all) {
			t.Fatalf("no message was sent after the removal answered (%d in all): the test proves nothing", len(all))
		}
		leaked := 0
		for i, id := range all {
			if got[id] && (after[id] || i >= firstAfter) {
				leaked++
			}
		}
		if leaked > 0 {
			t.Errorf("%d messages committed after the removal answered reached bob", leaked)
		}
		t.Logf("%d messages, %d to bob, %d sent after the removal answered", len(all), len(got), len(after))
	})
}
