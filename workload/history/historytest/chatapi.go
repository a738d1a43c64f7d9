package historytest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/history"
)

// chatAPITests are the conformance tests of history.ChatAPI (PROTOCOL.md
// §7.1, §7.2, §7.5, §7.6).
var chatAPITests = []struct {
	name string
	fn   func(t *testing.T, s history.Store)
}{
	{"PageBefore", testPageBefore},
	{"PagesCarryEdits", testPagesCarryEdits},
	{"PageQueryErrors", testPageQueryErrors},
	{"ChatListOrder", testChatListOrder},
	{"ChatListPaging", testChatListPaging},
	{"ChatFor", testChatFor},
	{"Admins", testAdmins},
	{"AdminNoOps", testAdminNoOps},
	{"LastAdminLeaves", testLastAdminLeaves},
	{"LastMemberLeavesClosesGroup", testLastMemberLeaves},
	{"HistoryMember", testHistoryMember},
	{"HistoryShared", testHistoryShared},
}

func messages(t testing.TB, s history.Store, q history.PageQuery) ([]history.Message, bool) {
	t.Helper()
	msgs, more, err := s.Messages(ctxFor(t), q)
	if err != nil {
		t.Fatalf("Messages(%+v): %v", q, err)
	}
	return msgs, more
}

func commitN(t testing.TB, s history.Store, chatID, sender string, n int) []string {
	t.Helper()
	drafts := make([]history.Draft, n)
	for i := range drafts {
		drafts[i] = Draft(chatID, sender, ulidish(i)+time.Now().Format("150405.000000000"), "m")
	}
	var out []string
	for _, r := range MustCommit(t, s, drafts...) {
		out = append(out, r.Message.ID)
	}
	return out
}

// testPagesCarryEdits: both page directions of Messages carry an edit's
// Edits, a delete's Deletes, an edited original's EditedAt and a deleted
// one's Deleted (PROTOCOL.md §7.3), as a client rebuilds its view from them.
func testPagesCarryEdits(t *testing.T, s history.Store) {
	g := mustGroup(t, s, "alice", "g", "bob")
	a := MustCommit(t, s, Draft(g.ID, "alice", "p1", "teh plan"))[0].Message
	b := MustCommit(t, s, Draft(g.ID, "alice", "p2", "a secret"))[0].Message
	e := MustCommit(t, s, EditDraft(g.ID, "alice", "p3", a.ID, "the plan"))[0].Message
	d := MustCommit(t, s, DeleteDraft(g.ID, "alice", "p4", b.ID))[0].Message
	for _, q := range []history.PageQuery{
		{ChatID: g.ID, User: "bob", Before: history.PageEnd, Limit: 10},
		{ChatID: g.ID, User: "bob", Limit: 10},
	} {
		got, _ := messages(t, s, q)
		byID := map[string]history.Message{}
		for _, m := range got {
			byID[m.ID] = m
		}
		if m := byID[a.ID]; m.Body != "the plan" || !m.EditedAt.Equal(e.SentAt) {
			t.Errorf("%+v: edited original = %+v, want the new body and EditedAt %v", q, m, e.SentAt)
		}
		if m := byID[b.ID]; !m.Deleted || m.Body != "" {
			t.Errorf("%+v: deleted original = %+v, want a tombstone", q, m)
		}
		if m := byID[e.ID]; m.Edits != a.ID {
			t.Errorf("%+v: the edit = %+v, want Edits %s", q, m, a.ID)
		}
		if m := byID[d.ID]; m.Deletes != b.ID {
			t.Errorf("%+v: the delete = %+v, want Deletes %s", q, m, b.ID)
		}
	}
}

// testPageBefore: before=end is the newest page, oldest first; paging
// back by the first id of each page reaches the beginning; an unknown
// before is before=end (PROTOCOL.md §7.1).
func testPageBefore(t *testing.T, s history.Store) {
	g := mustGroup(t, s, "alice", "g", "bob")
	all := commitN(t, s, g.ID, "alice", 25)
	got, more := messages(t, s, history.PageQuery{ChatID: g.ID, User: "bob", Before: history.PageEnd, Limit: 10})
	if !slices.Equal(ids(got), all[15:]) || !more {
		t.Fatalf("before=end: %v more=%v, want %v more=true", ids(got), more, all[15:])
	}
	got, more = messages(t, s, history.PageQuery{ChatID: g.ID, User: "bob", Before: all[15], Limit: 10})
	if !slices.Equal(ids(got), all[5:15]) || !more {
		t.Fatalf("before=%s: %v more=%v, want %v", all[15], ids(got), more, all[5:15])
	}
	got, more = messages(t, s, history.PageQuery{ChatID: g.ID, User: "bob", Before: all[5], Limit: 10})
	if !slices.Equal(ids(got), all[:5]) || more {
		t.Fatalf("before=%s: %v more=%v, want %v more=false", all[5], ids(got), more, all[:5])
	}
	got, more = messages(t, s, history.PageQuery{ChatID: g.ID, User: "bob", Before: all[0], Limit: 10})
	if len(got) != 0 || more {
		t.Errorf("before the first: %v more=%v, want none", ids(got), more)
	}
	// Exactly limit older ones: no more.
	got, more = messages(t, s, history.PageQuery{ChatID: g.ID, User: "bob", Before: all[10], Limit: 10})
	if !slices.Equal(ids(got), all[:10]) || more {
		t.Errorf("before=%s limit 10: %v more=%v, want %v more=false", all[10], ids(got), more, all[:10])
	}
	other := mustGroup(t, s, "alice", "other", "bob")
	foreign := commitN(t, s, other.ID, "alice", 1)[0]
	for _, before := range []string{"nosuch", foreign, "\xff"} {
		got, more = messages(t, s, history.PageQuery{ChatID: g.ID, User: "bob", Before: before, Limit: 3})
		if !slices.Equal(ids(got), all[22:]) || !more {
			t.Errorf("before=%q (unresolvable): %v more=%v, want the newest page %v", before, ids(got), more, all[22:])
		}
	}
	// Forward pages are unchanged.
	got, more = messages(t, s, history.PageQuery{ChatID: g.ID, User: "bob", Since: all[20], Limit: 100})
	if !slices.Equal(ids(got), all[21:]) || more {
		t.Errorf("since=%s: %v more=%v", all[20], ids(got), more)
	}
	got, _ = messages(t, s, history.PageQuery{ChatID: g.ID, User: "bob", Limit: 2})
	if !slices.Equal(ids(got), all[:2]) {
		t.Errorf("no cursor: %v, want %v", ids(got), all[:2])
	}
}

func testPageQueryErrors(t *testing.T, s history.Store) {
	ctx := ctxFor(t)
	g := mustGroup(t, s, "alice", "g", "bob")
	all := commitN(t, s, g.ID, "alice", 2)
	for _, tc := range []struct {
		q    history.PageQuery
		want error
	}{
		{history.PageQuery{ChatID: g.ID, User: "bob", Since: all[0], Before: all[1], Limit: 5}, history.ErrInvalid},
		{history.PageQuery{ChatID: g.ID, User: "bob", Limit: 0}, history.ErrInvalid},
		{history.PageQuery{ChatID: g.ID, User: "carol", Limit: 5}, history.ErrNotMember},
		{history.PageQuery{ChatID: g.ID, User: "carol", Before: history.PageEnd, Limit: 5}, history.ErrNotMember},
		{history.PageQuery{ChatID: "c_nosuch", User: "bob", Limit: 5}, history.ErrNotFound},
		{history.PageQuery{ChatID: g.ID, User: "", Limit: 5}, history.ErrInvalid},
	} {
		msgs, _, err := s.Messages(ctx, tc.q)
		if !errors.Is(err, tc.want) || len(msgs) != 0 {
			t.Errorf("Messages(%+v) = %d messages, %v; want %v", tc.q, len(msgs), err, tc.want)
		}
	}
}

func chatList(t testing.TB, s history.Store, user, cursor string, limit int) ([]history.Chat, string) {
	t.Helper()
	chats, next, err := s.ChatList(ctxFor(t), user, cursor, limit)
	if err != nil {
		t.Fatalf("ChatList(%s, %q, %d): %v", user, cursor, limit, err)
	}
	return chats, next
}

func chatIDs(chats []history.Chat) []string {
	out := make([]string, len(chats))
	for i, c := range chats {
		out[i] = c.ID
	}
	return out
}

// testChatListOrder: newest activity first, a message moves its chat to
// the top, a later add counts as activity, lastMessage is the newest
// (PROTOCOL.md §7.2).
func testChatListOrder(t *testing.T, s history.Store) {
	ctx := ctxFor(t)
	a := mustGroup(t, s, "alice", "a", "bob")
	time.Sleep(2 * time.Millisecond)
	b := mustDirect(t, s, "alice", "bob")
	time.Sleep(2 * time.Millisecond)
	c := mustGroup(t, s, "carol", "c", "dave")
	chats, next := chatList(t, s, "alice", "", 100)
	if !slices.Equal(chatIDs(chats), []string{b.ID, a.ID}) || next != "" {
		t.Fatalf("alice's list = %v next %q, want [%s %s] (newest first)", chatIDs(chats), next, b.ID, a.ID)
	}
	if chats[0].LastMessage != nil || !chats[0].LastActivity.Equal(b.CreatedAt) {
		t.Errorf("an idle chat: lastMessage %+v, lastActivity %v, want none and its creation %v", chats[0].LastMessage, chats[0].LastActivity, b.CreatedAt)
	}
	time.Sleep(2 * time.Millisecond)
	r := MustCommit(t, s, Draft(a.ID, "bob", "x1", "hello"))[0]
	chats, _ = chatList(t, s, "alice", "", 100)
	if !slices.Equal(chatIDs(chats), []string{a.ID, b.ID}) {
		t.Fatalf("after a message in %s: %v", a.ID, chatIDs(chats))
	}
	if lm := chats[0].LastMessage; lm == nil || lm.ID != r.Message.ID || lm.Body != "hello" || lm.SenderID != "bob" {
		t.Errorf("lastMessage = %+v, want %s", lm, r.Message.ID)
	}
	if !chats[0].LastActivity.Equal(r.Message.SentAt) {
		t.Errorf("lastActivity = %v, want the message's sentAt %v", chats[0].LastActivity, r.Message.SentAt)
	}
	if chats[0].Unread != 1 || !slices.Equal(chats[0].Members, []string{"alice", "bob"}) || !slices.Equal(chats[0].Admins, []string{"alice"}) {
		t.Errorf("chat a in the list = %+v", chats[0])
	}
	// Being added is activity: carol's group goes to the top of alice's list.
	time.Sleep(2 * time.Millisecond)
	if _, err := s.AddMember(ctx, c.ID, "carol", "alice"); err != nil {
		t.Fatal(err)
	}
	chats, _ = chatList(t, s, "alice", "", 100)
	if !slices.Equal(chatIDs(chats), []string{c.ID, a.ID, b.ID}) {
		t.Fatalf("after alice is added to %s: %v", c.ID, chatIDs(chats))
	}
	if !chats[0].LastActivity.After(r.Message.SentAt) {
		t.Errorf("lastActivity of a chat just joined = %v, want after %v", chats[0].LastActivity, r.Message.SentAt)
	}
	// The list of a user in no chat is empty, not an error.
	if chats, next := chatList(t, s, "nobody", "", 100); len(chats) != 0 || next != "" {
		t.Errorf("nobody's list = %v %q", chatIDs(chats), next)
	}
}

// testChatListPaging: limit and cursor walk the whole list once, in
// order; a bad cursor or limit is ErrInvalid.
func testChatListPaging(t *testing.T, s history.Store) {
	ctx := ctxFor(t)
	var want []string
	for i := range 7 {
		g := mustGroup(t, s, "alice", "g", "bob")
		MustCommit(t, s, Draft(g.ID, "bob", "p"+ulidish(i), "hi"))
		want = append([]string{g.ID}, want...)
	}
	var got []string
	cursor := ""
	for pages := 0; ; pages++ {
		chats, next := chatList(t, s, "alice", cursor, 3)
		if len(chats) > 3 || (next != "" && len(chats) != 3) {
			t.Fatalf("page %d: %d chats, next %q", pages, len(chats), next)
		}
		got = append(got, chatIDs(chats)...)
		if next == "" {
			break
		}
		if pages > 5 {
			t.Fatal("paging does not end")
		}
		cursor = next
	}
	if !slices.Equal(got, want) {
		t.Errorf("paged list = %v, want %v", got, want)
	}
	for _, tc := range []struct {
		cursor string
		limit  int
	}{{"not-a-cursor!", 3}, {"", 0}, {"", history.MaxListLimit + 1}} {
		if _, _, err := s.ChatList(ctx, "alice", tc.cursor, tc.limit); !errors.Is(err, history.ErrInvalid) {
			t.Errorf("ChatList(cursor %q, limit %d) = %v, want ErrInvalid", tc.cursor, tc.limit, err)
		}
	}
	if chats, _ := chatList(t, s, "alice", "", history.MaxListLimit); len(chats) != 7 {
		t.Errorf("limit %d: %d chats", history.MaxListLimit, len(chats))
	}
}

func testChatFor(t *testing.T, s history.Store) {
	ctx := ctxFor(t)
	g := mustGroup(t, s, "alice", "g", "bob")
	r := MustCommit(t, s, Draft(g.ID, "alice", "f1", "one"), Draft(g.ID, "alice", "f2", "two"))
	c, err := s.ChatFor(ctx, g.ID, "bob")
	if err != nil {
		t.Fatal(err)
	}
	if c.ID != g.ID || c.Title != "g" || c.Unread != 2 || c.LastMessage == nil || c.LastMessage.ID != r[1].Message.ID ||
		c.History != history.HistoryShared || !slices.Equal(c.Admins, []string{"alice"}) || !slices.Equal(c.Members, []string{"alice", "bob"}) {
		t.Errorf("ChatFor = %+v", c)
	}
	if _, err := s.ChatFor(ctx, g.ID, "carol"); !errors.Is(err, history.ErrNotMember) {
		t.Errorf("ChatFor(non-member) = %v, want ErrNotMember", err)
	}
	if _, err := s.ChatFor(ctx, "c_nosuch", "bob"); !errors.Is(err, history.ErrNotFound) {
		t.Errorf("ChatFor(unknown) = %v, want ErrNotFound", err)
	}
	d := mustDirect(t, s, "alice", "bob")
	if c, err := s.ChatFor(ctx, d.ID, "alice"); err != nil || len(c.Admins) != 0 || c.History != history.HistoryShared {
		t.Errorf("ChatFor(direct) = %+v, %v; want no admins, shared history", c, err)
	}
}

// testAdmins: the creator is the first admin; any admin renames, removes
// members and makes admins; others get ErrForbidden (PROTOCOL.md §7.5).
func testAdmins(t *testing.T, s history.Store) {
	ctx := ctxFor(t)
	g := mustGroup(t, s, "alice", "Team", "bob", "carol", "dave")
	if !slices.Equal(g.Admins, []string{"alice"}) {
		t.Errorf("new group's admins = %v, want [alice]", g.Admins)
	}
	if c, err := s.Chat(ctx, g.ID); err != nil || !slices.Equal(c.Admins, []string{"alice"}) {
		t.Errorf("Chat admins = %v, %v", c.Admins, err)
	}
	if _, _, err := s.Rename(ctx, g.ID, "bob", "Bob's"); !errors.Is(err, history.ErrForbidden) {
		t.Errorf("rename by a non-admin = %v, want ErrForbidden", err)
	}
	if _, _, err := s.Rename(ctx, g.ID, "eve", "Eve's"); !errors.Is(err, history.ErrNotMember) {
		t.Errorf("rename by a non-member = %v, want ErrNotMember", err)
	}
	if _, _, err := s.AddAdmin(ctx, g.ID, "bob", "bob"); !errors.Is(err, history.ErrForbidden) {
		t.Errorf("AddAdmin by a non-admin = %v, want ErrForbidden", err)
	}
	if _, _, err := s.AddAdmin(ctx, g.ID, "alice", "eve"); !errors.Is(err, history.ErrInvalid) {
		t.Errorf("AddAdmin of a non-member = %v, want ErrInvalid", err)
	}
	if c, _ := s.Chat(ctx, g.ID); c.Title != "Team" || !slices.Equal(c.Admins, []string{"alice"}) {
		t.Errorf("refused changes changed the chat: %+v", c)
	}
	c, _, err := s.AddAdmin(ctx, g.ID, "alice", "bob")
	if err != nil || !slices.Equal(c.Admins, []string{"alice", "bob"}) {
		t.Fatalf("AddAdmin(bob) = %v, %v; want admins [alice bob]", c.Admins, err)
	}
	if ok, err := s.IsAdmin(ctx, g.ID, "bob"); err != nil || !ok {
		t.Errorf("IsAdmin(bob) = %v, %v", ok, err)
	}
	if ok, err := s.IsAdmin(ctx, g.ID, "carol"); err != nil || ok {
		t.Errorf("IsAdmin(carol) = %v, %v", ok, err)
	}
	if _, err := s.IsAdmin(ctx, "c_nosuch", "bob"); !errors.Is(err, history.ErrNotFound) {
		t.Errorf("IsAdmin(unknown chat) = %v, want ErrNotFound", err)
	}
	if c, _, err := s.Rename(ctx, g.ID, "bob", "  Renamed  "); err != nil || c.Title != "Renamed" {
		t.Errorf("rename by the new admin = %+v, %v", c, err)
	}
	if _, _, err := s.Rename(ctx, g.ID, "bob", string(make([]byte, history.MaxTitleBytes+1))); !errors.Is(err, history.ErrInvalid) {
		t.Errorf("rename to an over-long title = %v, want ErrInvalid", err)
	}
	if c, _, err := s.RemoveMember(ctx, g.ID, "bob", "carol"); err != nil || c.HasMember("carol") {
		t.Errorf("an admin other than the creator removes a member = %+v, %v", c, err)
	}
	if _, _, err := s.RemoveMember(ctx, g.ID, "dave", "alice"); !errors.Is(err, history.ErrForbidden) {
		t.Errorf("a non-admin removes an admin = %v, want ErrForbidden", err)
	}
	if _, _, err := s.RemoveAdmin(ctx, g.ID, "bob", "alice"); !errors.Is(err, history.ErrForbidden) {
		t.Errorf("an admin removes another admin = %v, want ErrForbidden (only stepping down)", err)
	}
	c, _, err = s.RemoveAdmin(ctx, g.ID, "alice", "alice")
	if err != nil || !slices.Equal(c.Admins, []string{"bob"}) {
		t.Errorf("alice steps down = %v, %v; want [bob]", c.Admins, err)
	}
	if c, _, err := s.RemoveAdmin(ctx, g.ID, "dave", "dave"); err != nil || !slices.Equal(c.Admins, []string{"bob"}) {
		t.Errorf("a non-admin steps down (no-op) = %v, %v", c.Admins, err)
	}
	// The only admin stepping down: the earliest-joined other member
	// takes over (alice and dave joined together at the creation; alice's
	// id sorts first).
	c, _, err = s.RemoveAdmin(ctx, g.ID, "bob", "bob")
	if err != nil || !slices.Equal(c.Admins, []string{"alice"}) {
		t.Errorf("the last admin steps down = %v, %v; want [alice]", c.Admins, err)
	}
	c, _, err = s.RemoveAdmin(ctx, g.ID, "alice", "alice")
	if err != nil || len(c.Admins) != 1 || c.IsAdmin("alice") {
		t.Errorf("alice, the earliest joined, steps down as the last admin = %v, %v; want another member", c.Admins, err)
	}
	d := mustDirect(t, s, "alice", "bob")
	if _, _, err := s.Rename(ctx, d.ID, "alice", "x"); !errors.Is(err, history.ErrInvalid) {
		t.Errorf("rename a direct chat = %v, want ErrInvalid", err)
	}
	if _, _, err := s.AddAdmin(ctx, d.ID, "alice", "bob"); !errors.Is(err, history.ErrInvalid) {
		t.Errorf("AddAdmin in a direct chat = %v, want ErrInvalid", err)
	}
}

// testAdminNoOps: Rename, AddAdmin and RemoveAdmin report whether they
// changed the chat (the server sends PROTOCOL.md §7.5's "updated" only
// then): a rename to the same title (after trimming), making an admin of
// an admin, stepping down when not an admin, and stepping down alone in
// the group (made admin again) change nothing and report so; the real
// changes report changed. AddMemberChanged and RemoveMemberChanged report
// the same way (adding a member, removing a non-member: false).
func testAdminNoOps(t *testing.T, s history.Store) {
	ctx := ctxFor(t)
	g := mustGroup(t, s, "alice", "Team", "bob")
	type call struct {
		name    string
		do      func() (history.Chat, bool, error)
		changed bool
		title   string
		admins  []string
	}
	for _, c := range []call{
		{"rename to the same title", func() (history.Chat, bool, error) { return s.Rename(ctx, g.ID, "alice", " Team  ") }, false, "Team", []string{"alice"}},
		{"make an admin of an admin", func() (history.Chat, bool, error) { return s.AddAdmin(ctx, g.ID, "alice", "alice") }, false, "Team", []string{"alice"}},
		{"a non-admin steps down", func() (history.Chat, bool, error) { return s.RemoveAdmin(ctx, g.ID, "bob", "bob") }, false, "Team", []string{"alice"}},
		{"rename", func() (history.Chat, bool, error) { return s.Rename(ctx, g.ID, "alice", "Crew") }, true, "Crew", []string{"alice"}},
		{"make bob an admin", func() (history.Chat, bool, error) { return s.AddAdmin(ctx, g.ID, "alice", "bob") }, true, "Crew", []string{"alice", "bob"}},
		{"make bob an admin again", func() (history.Chat, bool, error) { return s.AddAdmin(ctx, g.ID, "bob", "bob") }, false, "Crew", []string{"alice", "bob"}},
		{"alice steps down", func() (history.Chat, bool, error) { return s.RemoveAdmin(ctx, g.ID, "alice", "alice") }, true, "Crew", []string{"bob"}},
		{"alice steps down again", func() (history.Chat, bool, error) { return s.RemoveAdmin(ctx, g.ID, "alice", "alice") }, false, "Crew", []string{"bob"}},
		{"alice leaves", func() (history.Chat, bool, error) {
			c, _, err := s.RemoveMember(ctx, g.ID, "alice", "alice")
			return c, true, err
		}, true, "Crew", []string{"bob"}},
		{"bob, alone, steps down", func() (history.Chat, bool, error) { return s.RemoveAdmin(ctx, g.ID, "bob", "bob") }, false, "Crew", []string{"bob"}},
		{"bob adds himself", func() (history.Chat, bool, error) { return s.AddMemberChanged(ctx, g.ID, "bob", "bob") }, false, "Crew", []string{"bob"}},
		{"bob removes carol, no member", func() (history.Chat, bool, error) {
			c, _, changed, err := s.RemoveMemberChanged(ctx, g.ID, "bob", "carol")
			return c, changed, err
		}, false, "Crew", []string{"bob"}},
		{"bob adds carol", func() (history.Chat, bool, error) { return s.AddMemberChanged(ctx, g.ID, "bob", "carol") }, true, "Crew", []string{"bob"}},
		{"bob adds carol again", func() (history.Chat, bool, error) { return s.AddMemberChanged(ctx, g.ID, "bob", "carol") }, false, "Crew", []string{"bob"}},
		{"bob removes carol", func() (history.Chat, bool, error) {
			c, _, changed, err := s.RemoveMemberChanged(ctx, g.ID, "bob", "carol")
			return c, changed, err
		}, true, "Crew", []string{"bob"}},
	} {
		got, changed, err := c.do()
		if err != nil || changed != c.changed || got.Title != c.title || !slices.Equal(got.Admins, c.admins) {
			t.Errorf("%s = title %q admins %v, changed %v, %v; want %q %v, changed %v", c.name, got.Title, got.Admins, changed, err, c.title, c.admins, c.changed)
		}
		if stored, err := s.Chat(ctx, g.ID); err != nil || stored.Title != c.title || !slices.Equal(stored.Admins, c.admins) {
			t.Errorf("after %s: stored title %q admins %v, %v", c.name, stored.Title, stored.Admins, err)
		}
	}
}

// testLastAdminLeaves: when the last admin leaves, the member who joined
// earliest becomes one (PROTOCOL.md §7.5).
func testLastAdminLeaves(t *testing.T, s history.Store) {
	ctx := ctxFor(t)
	g := mustGroup(t, s, "alice", "g", "zed")
	time.Sleep(2 * time.Millisecond)
	if _, err := s.AddMember(ctx, g.ID, "alice", "bob"); err != nil {
		t.Fatal(err)
	}
	c, _, err := s.RemoveMember(ctx, g.ID, "alice", "alice")
	if err != nil {
		t.Fatal(err)
	}
	// zed joined with the group's creation, bob later: zed it is, although
	// bob sorts first.
	if !slices.Equal(c.Admins, []string{"zed"}) {
		t.Errorf("admins after the last admin left = %v, want [zed] (joined earliest)", c.Admins)
	}
	if ok, _ := s.IsAdmin(ctx, g.ID, "zed"); !ok {
		t.Error("IsAdmin(zed) = false")
	}
	if c, _, err := s.RemoveMember(ctx, g.ID, "zed", "zed"); err != nil || !slices.Equal(c.Admins, []string{"bob"}) {
		t.Errorf("after zed leaves: %v, %v; want [bob]", c.Admins, err)
	}
}

// testLastMemberLeaves: the last member leaving closes the group: adding
// to it or reading it answers ErrNotFound (PROTOCOL.md §7.5).
func testLastMemberLeaves(t *testing.T, s history.Store) {
	ctx := ctxFor(t)
	g := mustGroup(t, s, "alice", "g", "bob")
	MustCommit(t, s, Draft(g.ID, "alice", "l1", "hi"))
	if _, _, err := s.RemoveMember(ctx, g.ID, "alice", "alice"); err != nil {
		t.Fatal(err)
	}
	c, _, err := s.RemoveMember(ctx, g.ID, "bob", "bob")
	if err != nil || len(c.Members) != 0 {
		t.Fatalf("the last member leaves = %+v, %v", c, err)
	}
	if _, err := s.AddMember(ctx, g.ID, "bob", "bob"); !errors.Is(err, history.ErrNotFound) {
		t.Errorf("adding to a closed group = %v, want ErrNotFound", err)
	}
	if _, err := s.Chat(ctx, g.ID); !errors.Is(err, history.ErrNotFound) {
		t.Errorf("Chat of a closed group = %v, want ErrNotFound", err)
	}
	if _, err := s.IsMember(ctx, g.ID, "bob"); !errors.Is(err, history.ErrNotFound) {
		t.Errorf("IsMember of a closed group = %v, want ErrNotFound", err)
	}
	if _, _, err := s.Messages(ctx, history.PageQuery{ChatID: g.ID, User: "bob", Limit: 5}); !errors.Is(err, history.ErrNotFound) {
		t.Errorf("Messages of a closed group = %v, want ErrNotFound", err)
	}
	if _, err := s.ChatFor(ctx, g.ID, "bob"); !errors.Is(err, history.ErrNotFound) {
		t.Errorf("ChatFor of a closed group = %v, want ErrNotFound", err)
	}
	if r := commit(t, s, Draft(g.ID, "bob", "l2", "anyone?"))[0]; r.Err == nil {
		t.Error("a send to a closed group was committed")
	}
}

// testHistoryMember: in a "member" group a member reads only what was
// committed while it was a member, in pages both ways, lastMessage and
// unread (PROTOCOL.md §7.6).
func testHistoryMember(t *testing.T, s history.Store) {
	ctx := ctxFor(t)
	if _, err := s.CreateGroupWith(ctx, history.GroupSpec{Creator: "alice", History: "secret"}); !errors.Is(err, history.ErrInvalid) {
		t.Errorf("history %q = %v, want ErrInvalid", "secret", err)
	}
	g, err := s.CreateGroupWith(ctx, history.GroupSpec{Creator: "alice", Title: "m", Members: []string{"carol"}, History: history.HistoryMember})
	if err != nil || g.History != history.HistoryMember {
		t.Fatalf("CreateGroupWith(member) = %+v, %v", g, err)
	}
	if c, err := s.Chat(ctx, g.ID); err != nil || c.History != history.HistoryMember {
		t.Errorf("Chat.History = %q, %v", c.History, err)
	}
	m1 := commitN(t, s, g.ID, "alice", 3)
	if _, err := s.AddMember(ctx, g.ID, "alice", "bob"); err != nil {
		t.Fatal(err)
	}
	m2 := commitN(t, s, g.ID, "alice", 2)
	if _, _, err := s.RemoveMember(ctx, g.ID, "alice", "bob"); err != nil {
		t.Fatal(err)
	}
	m3 := commitN(t, s, g.ID, "alice", 3)
	if _, err := s.AddMember(ctx, g.ID, "alice", "bob"); err != nil {
		t.Fatal(err)
	}
	m4 := commitN(t, s, g.ID, "alice", 2)
	want := append(slices.Clone(m2), m4...)
	if got, more := messages(t, s, history.PageQuery{ChatID: g.ID, User: "bob", Limit: 100}); !slices.Equal(ids(got), want) || more {
		t.Errorf("bob's history = %v, want %v (his intervals only)", ids(got), want)
	}
	if got, more := messages(t, s, history.PageQuery{ChatID: g.ID, User: "bob", Before: history.PageEnd, Limit: 3}); !slices.Equal(ids(got), want[1:]) || !more {
		t.Errorf("bob's newest page of 3 = %v more=%v, want %v more=true", ids(got), more, want[1:])
	}
	if got, more := messages(t, s, history.PageQuery{ChatID: g.ID, User: "bob", Before: m4[0], Limit: 5}); !slices.Equal(ids(got), m2) || more {
		t.Errorf("bob's page before %s = %v more=%v, want %v more=false", m4[0], ids(got), more, m2)
	}
	if got, _ := messages(t, s, history.PageQuery{ChatID: g.ID, User: "bob", Since: m2[1], Limit: 100}); !slices.Equal(ids(got), m4) {
		t.Errorf("bob's history since %s = %v, want %v", m2[1], ids(got), m4)
	}
	c, err := s.ChatFor(ctx, g.ID, "bob")
	if err != nil || c.Unread != 4 || c.LastMessage == nil || c.LastMessage.ID != m4[1] {
		t.Errorf("bob's chat: unread %d, lastMessage %+v, %v; want 4 and %s", c.Unread, c.LastMessage, err, m4[1])
	}
	if got, _ := messages(t, s, history.PageQuery{ChatID: g.ID, User: "carol", Limit: 100}); len(got) != 10 {
		t.Errorf("carol, a member throughout, reads %d messages, want 10", len(got))
	}
	// A member added after everything reads nothing, and has no last message.
	if _, err := s.AddMember(ctx, g.ID, "alice", "dave"); err != nil {
		t.Fatal(err)
	}
	if got, more := messages(t, s, history.PageQuery{ChatID: g.ID, User: "dave", Before: history.PageEnd, Limit: 100}); len(got) != 0 || more {
		t.Errorf("dave, just added, reads %v more=%v", ids(got), more)
	}
	if c, err := s.ChatFor(ctx, g.ID, "dave"); err != nil || c.LastMessage != nil || c.Unread != 0 {
		t.Errorf("dave's chat: %+v, %v; want no lastMessage, unread 0", c, err)
	}
	chats, _ := chatList(t, s, "dave", "", 10)
	if len(chats) != 1 || chats[0].LastMessage != nil {
		t.Errorf("dave's list = %+v", chats)
	}
	_ = m1
	_ = m3
}

// testHistoryShared: in a "shared" group (the default) a member reads
// everything, what came before it joined and while it was away included
// (PROTOCOL.md §7.6).
func testHistoryShared(t *testing.T, s history.Store) {
	ctx := ctxFor(t)
	g := mustGroup(t, s, "alice", "s", "carol")
	if g.History != history.HistoryShared {
		t.Errorf("default history = %q", g.History)
	}
	m1 := commitN(t, s, g.ID, "alice", 2)
	if _, err := s.AddMember(ctx, g.ID, "alice", "bob"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.RemoveMember(ctx, g.ID, "alice", "bob"); err != nil {
		t.Fatal(err)
	}
	m2 := commitN(t, s, g.ID, "alice", 2)
	if _, _, err := s.Messages(ctx, history.PageQuery{ChatID: g.ID, User: "bob", Limit: 100}); !errors.Is(err, history.ErrNotMember) {
		t.Errorf("bob reads while removed: %v, want ErrNotMember", err)
	}
	if _, err := s.AddMember(ctx, g.ID, "alice", "bob"); err != nil {
		t.Fatal(err)
	}
	want := append(slices.Clone(m1), m2...)
	if got, _ := messages(t, s, history.PageQuery{ChatID: g.ID, User: "bob", Limit: 100}); !slices.Equal(ids(got), want) {
		t.Errorf("bob's shared history = %v, want %v", ids(got), want)
	}
	if c, err := s.ChatFor(ctx, g.ID, "bob"); err != nil || c.Unread != 4 || c.LastMessage == nil || c.LastMessage.ID != m2[1] {
		t.Errorf("bob's chat = %+v, %v", c, err)
	}
}
