package historytest

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/history"
)

// testRemoveMember: the rules of PROTOCOL.md §2 DELETE members, the cutoff,
// commits after a removal, re-adding, and IsMember.
func testRemoveMember(t *testing.T, s history.Store) {
	ctx := ctxFor(t)
	g := mustGroup(t, s, "alice", "g", "bob", "carol")
	d := mustDirect(t, s, "alice", "bob")
	if g.CreatedBy != "alice" {
		t.Errorf("CreatedBy = %q, want alice", g.CreatedBy)
	}
	if c, err := s.Chat(ctx, g.ID); err != nil || c.CreatedBy != "alice" {
		t.Errorf("Chat = %+v, %v; want CreatedBy alice", c, err)
	}
	for _, tc := range []struct {
		chat, by, user string
		want           error
	}{
		{g.ID, "carol", "bob", history.ErrForbidden},
		{g.ID, "dave", "dave", history.ErrNotMember},
		{d.ID, "alice", "bob", history.ErrInvalid},
		{"c_nosuch", "alice", "bob", history.ErrNotFound},
		{g.ID, "alice", "", history.ErrInvalid},
	} {
		if _, _, err := s.RemoveMember(ctx, tc.chat, tc.by, tc.user); !errors.Is(err, tc.want) {
			t.Errorf("RemoveMember(%s, by %q, %q) = %v, want %v", tc.chat, tc.by, tc.user, err, tc.want)
		}
	}
	before := MustCommit(t, s, Draft(g.ID, "alice", "1", "before"))[0]
	c, cutoff, err := s.RemoveMember(ctx, g.ID, "alice", "bob")
	if err != nil || !slices.Equal(c.Members, []string{"alice", "carol"}) {
		t.Fatalf("RemoveMember = %+v, %v", c, err)
	}
	if cutoff < before.Message.Seq {
		t.Errorf("cutoff %d below the Seq %d of a message committed before", cutoff, before.Message.Seq)
	}
	if ok, err := s.IsMember(ctx, g.ID, "bob"); err != nil || ok {
		t.Errorf("IsMember(bob) after removal = %v, %v", ok, err)
	}
	if _, err := s.IsMember(ctx, "c_nosuch", "bob"); !errors.Is(err, history.ErrNotFound) {
		t.Errorf("IsMember of an unknown chat: %v, want ErrNotFound", err)
	}
	after := MustCommit(t, s, Draft(g.ID, "alice", "2", "after"))[0]
	if slices.Contains(after.Members, "bob") || after.Message.Seq <= cutoff {
		t.Errorf("a commit after the removal: members %v, Seq %d (cutoff %d)", after.Members, after.Message.Seq, cutoff)
	}
	for _, dl := range after.Deliveries {
		if dl.Recipient == "bob" {
			t.Errorf("an outbox row for bob after his removal")
		}
	}
	if r := commit(t, s, Draft(g.ID, "bob", "b", "still here?"))[0]; !errors.Is(r.Err, history.ErrNotMember) {
		t.Errorf("bob's send after removal: %v, want ErrNotMember", r.Err)
	}
	if _, _, err := s.RemoveMember(ctx, g.ID, "alice", "bob"); err != nil {
		t.Errorf("removing a non-member: %v, want nil", err)
	}
	if chats, _ := s.ChatsOf(ctx, "bob"); len(chats) != 1 || chats[0].ID != d.ID {
		t.Errorf("bob's chats after removal = %+v, want only the direct chat", chats)
	}
	if _, err := s.AddMember(ctx, g.ID, "carol", "bob"); err != nil {
		t.Fatal(err)
	}
	if back := MustCommit(t, s, Draft(g.ID, "alice", "3", "back"))[0]; !slices.Contains(back.Members, "bob") {
		t.Errorf("a commit after re-adding bob: members %v", back.Members)
	}
	// Leaving, creator included.
	if c, _, err := s.RemoveMember(ctx, g.ID, "alice", "alice"); err != nil || slices.Contains(c.Members, "alice") {
		t.Errorf("alice leaves = %+v, %v", c, err)
	}
}

// testReadState: ChatsOf returns the read markers of current members and
// the caller's unread count of others' messages after its own marker.
func testReadState(t *testing.T, s history.Store) {
	ctx := ctxFor(t)
	g := mustGroup(t, s, "alice", "g", "bob", "carol")
	var ms []history.Result
	for _, sender := range []string{"bob", "bob", "alice", "carol"} {
		ms = append(ms, MustCommit(t, s, Draft(g.ID, sender, ulidish(len(ms)), "x"))[0])
	}
	read := func(user string, i int) history.Read {
		return history.Read{ChatID: g.ID, UserID: user, MessageID: ms[i].Message.ID, Seq: ms[i].Message.Seq}
	}
	chats, err := s.ChatsOf(ctx, "alice")
	if err != nil || len(chats) != 1 || chats[0].Unread != 3 || len(chats[0].LastRead) != 0 {
		t.Fatalf("alice's chats before reading = %+v, %v; want unread 3", chats, err)
	}
	if err := s.SaveReads(ctx, []history.Read{read("alice", 1), read("bob", 3)}); err != nil {
		t.Fatal(err)
	}
	chats, _ = s.ChatsOf(ctx, "alice")
	want := map[string]string{"alice": ms[1].Message.ID, "bob": ms[3].Message.ID}
	if c := chats[0]; c.Unread != 1 || len(c.LastRead) != 2 || c.LastRead["alice"] != want["alice"] || c.LastRead["bob"] != want["bob"] {
		t.Errorf("alice's chat after reads = unread %d, lastRead %v; want 1 and %v", c.Unread, c.LastRead, want)
	}
	if marks, err := s.ReadMarks(ctx, g.ID); err != nil || len(marks) != 2 {
		t.Errorf("ReadMarks = %v, %v", marks, err)
	}
	// A removed member's marker is not listed.
	if _, _, err := s.RemoveMember(ctx, g.ID, "alice", "bob"); err != nil {
		t.Fatal(err)
	}
	if chats, _ = s.ChatsOf(ctx, "carol"); len(chats[0].LastRead) != 1 || chats[0].Unread != 3 {
		t.Errorf("carol's chat = lastRead %v, unread %d; want only alice's marker, unread 3", chats[0].LastRead, chats[0].Unread)
	}
}

func ulidish(i int) string { return string(rune('a' + i)) }

// testSaveReadsKeepsLatest: a read marker only moves forward by Seq
// (PROTOCOL.md §3), whatever the order of the receipts, in one call or
// across calls; a receipt of a non-member is dropped (it does not surface
// once that user is added); a receipt without a message id is ErrInvalid.
func testSaveReadsKeepsLatest(t *testing.T, s history.Store) {
	ctx := ctxFor(t)
	g, err := s.CreateGroup(ctx, "alice", "g", []string{"bob"})
	if err != nil {
		t.Fatal(err)
	}
	read := func(msg string, seq int64) history.Read {
		return history.Read{ChatID: g.ID, UserID: "bob", MessageID: msg, Seq: seq, At: time.Now()}
	}
	check := func(user, want string) {
		t.Helper()
		marks, err := s.ReadMarks(ctx, g.ID)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := marks[user]; got != want || ok != (want != "") {
			t.Errorf("read marker of %s = %q (present %v), want %q", user, got, ok, want)
		}
	}
	if err := s.SaveReads(ctx, []history.Read{read("m2", 2), read("m1", 1)}); err != nil {
		t.Fatal(err)
	}
	check("bob", "m2")
	if err := s.SaveReads(ctx, []history.Read{read("m5", 5), read("m4", 4)}); err != nil {
		t.Fatal(err)
	}
	check("bob", "m5") // the highest Seq wins, not the last receipt
	if err := s.SaveReads(ctx, []history.Read{read("m1", 1)}); err != nil {
		t.Fatal(err)
	}
	check("bob", "m5")
	carol := read("m5", 5)
	carol.UserID = "carol"
	if err := s.SaveReads(ctx, []history.Read{carol}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AddMember(ctx, g.ID, "alice", "carol"); err != nil {
		t.Fatal(err)
	}
	check("carol", "")
	if err := s.SaveReads(ctx, []history.Read{{ChatID: g.ID, UserID: "bob"}}); !errors.Is(err, history.ErrInvalid) {
		t.Errorf("SaveReads without a message id: err = %v, want ErrInvalid", err)
	}
}
