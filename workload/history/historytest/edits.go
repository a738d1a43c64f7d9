package historytest

import (
	"strings"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/outbox"
)

// Edits and deletes (PROTOCOL.md §7.3): committed by Commit in the chat's
// sequence like messages, applied to their original in the same
// transaction.

// EditDraft returns a draft of sender's edit of messageID to body.
func EditDraft(chatID, sender, correlationID, messageID, body string) history.Draft {
	d := Draft(chatID, sender, correlationID, body)
	d.Edits = messageID
	return d
}

// DeleteDraft returns a draft of sender's delete of messageID.
func DeleteDraft(chatID, sender, correlationID, messageID string) history.Draft {
	d := Draft(chatID, sender, correlationID, "")
	d.Deletes = messageID
	return d
}

// pageMap pages the whole chat and returns its messages by id, and the ids
// in sequence.
func pageMap(t testing.TB, s history.Store, chatID string) (map[string]history.Message, []string) {
	t.Helper()
	all := PageAll(t, s, chatID, "", 100)
	out := map[string]history.Message{}
	for _, m := range all {
		out[m.ID] = m
	}
	return out, ids(all)
}

func testEdit(t *testing.T, s history.Store) {
	g := mustGroup(t, s, "alice", "g", "bob")
	orig := MustCommit(t, s, Draft(g.ID, "alice", "c1", "helo"))[0].Message
	before := maybeHeads(t, s)
	res := MustCommit(t, s, EditDraft(g.ID, "alice", "c2", orig.ID, "hello"))
	checkDeliveries(t, s, before, res)
	e := res[0].Message
	if e.Edits != orig.ID || e.Deletes != "" || e.Body != "hello" || e.Seq <= orig.Seq || e.ID == orig.ID {
		t.Fatalf("edit committed as %+v, want a message of its own after %d editing %s", e, orig.Seq, orig.ID)
	}
	if o := res[0].Original; o.ID != orig.ID || o.Body != "hello" || !o.EditedAt.Equal(e.SentAt) {
		t.Errorf("Result.Original = %+v, want the original with the new body, editedAt %v", o, e.SentAt)
	}
	if got := len(res[0].Members); got != 2 {
		t.Errorf("edit has %d recipients, want the chat's 2 members", got)
	}
	msgs, order := pageMap(t, s, g.ID)
	if len(order) != 2 || order[0] != orig.ID || order[1] != e.ID {
		t.Fatalf("history = %v, want the original then the edit", order)
	}
	o := msgs[orig.ID]
	if o.Body != "hello" || !o.EditedAt.Equal(e.SentAt) || o.Deleted || o.Edits != "" || o.Kind() != history.KindMessage {
		t.Errorf("original in history = %+v, want body hello, editedAt %v", o, e.SentAt)
	}
	if o.EditedAt.Location() != time.UTC {
		t.Errorf("EditedAt location = %v, want UTC", o.EditedAt.Location())
	}
	if m := msgs[e.ID]; m.Edits != orig.ID || m.Body != "hello" || m.Kind() != history.KindEdit {
		t.Errorf("edit in history = %+v, want edits %s", m, orig.ID)
	}
	// A second edit: the newest wins; the first edit stays in sequence.
	e2 := MustCommit(t, s, EditDraft(g.ID, "alice", "c3", orig.ID, "hello!"))[0].Message
	msgs, order = pageMap(t, s, g.ID)
	if o := msgs[orig.ID]; o.Body != "hello!" || !o.EditedAt.Equal(e2.SentAt) {
		t.Errorf("after a second edit the original = %+v, want hello!", o)
	}
	if len(order) != 3 {
		t.Errorf("history holds %d messages, want 3", len(order))
	}
	// The outbox (when the store is one) carries the edit's target.
	if log, ok := s.(outbox.Log); ok && before != nil {
		for _, row := range scanSince(t, log, before) {
			if row.Message.ID == e.ID && row.Message.Edits != orig.ID {
				t.Errorf("outbox row of the edit carries %+v, want edits %s", row.Message, orig.ID)
			}
		}
	}
	MustCommit(t, s, DeleteDraft(g.ID, "alice", "c-del", MustCommit(t, s, Draft(g.ID, "alice", "c-gone", "gone"))[0].Message.ID))
	// A resend of the edit (same key, chat and body) is its duplicate.
	dup := commit(t, s, EditDraft(g.ID, "alice", "c2", orig.ID, "hello"))[0]
	if dup.Err != nil || !dup.Duplicate || dup.Message.ID != e.ID {
		t.Errorf("resent edit = %+v, want a duplicate of %s", dup, e.ID)
	}
	if o := mustPageOne(t, s, g.ID, orig.ID); o.Body != "hello!" {
		t.Errorf("a resent edit re-applied its body: %q", o.Body)
	}
	// The key of an edit reused for an edit of another message, or for a
	// plain send with the same body, is refused (PROTOCOL.md §3 rules hold
	// for edits).
	other := MustCommit(t, s, Draft(g.ID, "alice", "c4", "other"))[0].Message
	wantErr(t, "edit key reused for another target", commit(t, s, EditDraft(g.ID, "alice", "c2", other.ID, "hello"))[0].Err, history.ErrInvalid)
	wantErr(t, "message key reused for an edit", commit(t, s, EditDraft(g.ID, "alice", "c4", orig.ID, "other"))[0].Err, history.ErrInvalid)
	// Alone in its batch too: a plain send under the edit's key, with the
	// edit's chat and body, is no resend of it.
	wantErr(t, "edit key reused for a plain send", commit(t, s, Draft(g.ID, "alice", "c2", "hello"))[0].Err, history.ErrInvalid)
	wantErr(t, "delete key reused for a plain send", commit(t, s, Draft(g.ID, "alice", "c-del", ""))[0].Err, history.ErrInvalid)
	res2 := commit(t, s, EditDraft(g.ID, "alice", "k1", other.ID, "x"), EditDraft(g.ID, "alice", "k1", orig.ID, "x"))
	if res2[0].Err != nil {
		t.Errorf("first edit of a batch: %v", res2[0].Err)
	}
	wantErr(t, "edit key reused within a batch for another target", res2[1].Err, history.ErrInvalid)
	// After the message is deleted, its edits' bodies are erased: a resend
	// of an edit with the very body it was sent with is still its
	// duplicate (judged by chat and target, as a resend of a deleted
	// message is), not "another body".
	victim := MustCommit(t, s, Draft(g.ID, "alice", "v1", "to delete"))[0].Message
	ve := MustCommit(t, s, EditDraft(g.ID, "alice", "v2", victim.ID, "edited, then deleted"))[0].Message
	MustCommit(t, s, DeleteDraft(g.ID, "alice", "v3", victim.ID))
	if r := commit(t, s, EditDraft(g.ID, "alice", "v2", victim.ID, "edited, then deleted"))[0]; r.Err != nil || !r.Duplicate || r.Message.ID != ve.ID {
		t.Errorf("resent edit of a deleted message = %+v, want a duplicate of %s", r, ve.ID)
	}
}

func mustPageOne(t testing.TB, s history.Store, chatID, id string) history.Message {
	t.Helper()
	msgs, _ := pageMap(t, s, chatID)
	m, ok := msgs[id]
	if !ok {
		t.Fatalf("message %s not in history", id)
	}
	return m
}

func testEditRules(t *testing.T, s history.Store) {
	g := mustGroup(t, s, "alice", "g", "bob")
	other := mustGroup(t, s, "alice", "other", "bob")
	orig := MustCommit(t, s, Draft(g.ID, "alice", "c1", "mine"))[0].Message
	elsewhere := MustCommit(t, s, Draft(other.ID, "alice", "c2", "there"))[0].Message
	edit := MustCommit(t, s, EditDraft(g.ID, "alice", "c3", orig.ID, "mine!"))[0].Message
	gone := MustCommit(t, s, Draft(g.ID, "alice", "c4", "to delete"))[0].Message
	MustCommit(t, s, DeleteDraft(g.ID, "alice", "c5", gone.ID))
	both := EditDraft(g.ID, "alice", "x6", orig.ID, "b")
	both.Deletes = orig.ID
	cases := []struct {
		name string
		d    history.Draft
		want error
	}{
		{"another user's message (as an unknown one: §7.6)", EditDraft(g.ID, "bob", "x1", orig.ID, "hacked"), history.ErrNotFound},
		{"unknown message", EditDraft(g.ID, "alice", "x2", "01NOSUCHMESSAGE", "x"), history.ErrNotFound},
		{"message of another chat", EditDraft(g.ID, "alice", "x3", elsewhere.ID, "x"), history.ErrNotFound},
		{"an edit", EditDraft(g.ID, "alice", "x4", edit.ID, "x"), history.ErrInvalid},
		{"a deleted message", EditDraft(g.ID, "alice", "x5", gone.ID, "x"), history.ErrDeleted},
		{"both edits and deletes", both, history.ErrInvalid},
		{"an empty body", EditDraft(g.ID, "alice", "x7", orig.ID, ""), history.ErrInvalid},
		{"a delete with a body", func() history.Draft {
			d := DeleteDraft(g.ID, "alice", "x8", orig.ID)
			d.Body = "x"
			return d
		}(), history.ErrInvalid},
		{"an over-long target id", EditDraft(g.ID, "alice", "x9", strings.Repeat("a", 129), "x"), history.ErrInvalid},
		{"a non-member", EditDraft(g.ID, "mallory", "x10", orig.ID, "x"), history.ErrNotMember},
	}
	for _, c := range cases {
		r := commit(t, s, c.d)[0]
		wantErr(t, "edit of "+c.name, r.Err, c.want)
	}
	if _, order := pageMap(t, s, g.ID); len(order) != 4 {
		t.Errorf("history of g holds %d messages after refused edits, want 4 (nothing stored)", len(order))
	}
	if o := mustPageOne(t, s, g.ID, orig.ID); o.Body != "mine!" {
		t.Errorf("refused edits changed the original: %q", o.Body)
	}
	// A refused edit keeps its key free.
	r := MustCommit(t, s, EditDraft(g.ID, "alice", "x1", orig.ID, "mine, again"))[0]
	if r.Duplicate {
		t.Errorf("key of a refused edit was taken")
	}
}

func testDelete(t *testing.T, s history.Store) {
	g := mustGroup(t, s, "alice", "g", "bob")
	orig := MustCommit(t, s, Draft(g.ID, "alice", "c1", "secret one"))[0].Message
	edit := MustCommit(t, s, EditDraft(g.ID, "alice", "c2", orig.ID, "secret two"))[0].Message
	keep := MustCommit(t, s, Draft(g.ID, "bob", "c3", "kept"))[0].Message
	before := maybeHeads(t, s)
	res := MustCommit(t, s, DeleteDraft(g.ID, "alice", "c4", orig.ID))
	checkDeliveries(t, s, before, res)
	del := res[0].Message
	if del.Deletes != orig.ID || del.Body != "" || del.Seq <= keep.Seq {
		t.Fatalf("delete committed as %+v", del)
	}
	tomb := res[0].Original
	if tomb.ID != orig.ID || !tomb.Deleted || tomb.Body != "" || !tomb.EditedAt.IsZero() || tomb.SenderID != "alice" || !tomb.SentAt.Equal(orig.SentAt) {
		t.Errorf("Result.Original = %+v, want the tombstone of %s", tomb, orig.ID)
	}
	msgs, order := pageMap(t, s, g.ID)
	if want := []string{orig.ID, edit.ID, keep.ID, del.ID}; strings.Join(order, ",") != strings.Join(want, ",") {
		t.Errorf("history = %v, want %v", order, want)
	}
	if o := msgs[orig.ID]; !o.Deleted || o.Body != "" || !o.EditedAt.IsZero() {
		t.Errorf("deleted original in history = %+v, want a tombstone", o)
	}
	if e := msgs[edit.ID]; e.Body != "" || e.Edits != orig.ID {
		t.Errorf("edit of a deleted message = %+v, want its body erased", e)
	}
	if k := msgs[keep.ID]; k.Body != "kept" || k.Deleted {
		t.Errorf("another message changed: %+v", k)
	}
	if d := msgs[del.ID]; d.Deletes != orig.ID || d.Body != "" || d.Kind() != history.KindDelete {
		t.Errorf("delete in history = %+v", d)
	}
	// No store answer holds the text: history, the outbox, the feed.
	for _, m := range PageAll(t, s, g.ID, "", 1) {
		if strings.Contains(m.Body, "secret") {
			t.Errorf("history still holds %q in %s", m.Body, m.ID)
		}
	}
	if log, ok := s.(outbox.Log); ok {
		zero := map[int32]int64{}
		for p := range heads(t, log) {
			zero[p] = -1
		}
		for _, row := range scanSince(t, log, zero) {
			if strings.Contains(row.Message.Body, "secret") {
				t.Errorf("outbox row %d still carries %q", row.Pos, row.Message.Body)
			}
		}
	}
	if f, ok := s.(history.Feed); ok {
		for _, c := range FeedAll(t, f, 0, 10) {
			if strings.Contains(c.Message.Body, "secret") {
				t.Errorf("feed still carries %q", c.Message.Body)
			}
		}
	}
	// Deleting twice: refused with ErrDeleted, with the same tombstone.
	again := commit(t, s, DeleteDraft(g.ID, "alice", "c5", orig.ID))[0]
	wantErr(t, "second delete", again.Err, history.ErrDeleted)
	if !again.Original.Deleted || again.Original.ID != orig.ID || !again.Original.SentAt.Equal(orig.SentAt) {
		t.Errorf("second delete's Original = %+v, want the tombstone", again.Original)
	}
	if _, order := pageMap(t, s, g.ID); len(order) != 4 {
		t.Errorf("a second delete stored something: %d messages", len(order))
	}
}

func testDeleteRules(t *testing.T, s history.Store) {
	g := mustGroup(t, s, "alice", "g", "bob", "carol")
	d := mustDirect(t, s, "bob", "carol")
	byBob := MustCommit(t, s, Draft(g.ID, "bob", "b1", "bob's"))[0].Message
	byAlice := MustCommit(t, s, Draft(g.ID, "alice", "a1", "alice's"))[0].Message
	inDirect := MustCommit(t, s, Draft(d.ID, "bob", "b2", "direct"))[0].Message
	// Not the sender, not an admin.
	wantErr(t, "carol deletes bob's", commit(t, s, DeleteDraft(g.ID, "carol", "c1", byBob.ID))[0].Err, history.ErrForbidden)
	wantErr(t, "bob deletes alice's", commit(t, s, DeleteDraft(g.ID, "bob", "b3", byAlice.ID))[0].Err, history.ErrForbidden)
	wantErr(t, "carol deletes bob's direct message", commit(t, s, DeleteDraft(d.ID, "carol", "c2", inDirect.ID))[0].Err, history.ErrForbidden)
	wantErr(t, "delete of an unknown message", commit(t, s, DeleteDraft(g.ID, "alice", "a2", "01NOSUCH"))[0].Err, history.ErrNotFound)
	wantErr(t, "delete via another chat", commit(t, s, DeleteDraft(g.ID, "bob", "b4", inDirect.ID))[0].Err, history.ErrNotFound)
	// The group's creator is its first admin (PROTOCOL.md §7.5): it may
	// delete any message.
	r := MustCommit(t, s, DeleteDraft(g.ID, "alice", "a3", byBob.ID))[0]
	if !r.Original.Deleted {
		t.Errorf("admin delete = %+v", r)
	}
	if m := mustPageOne(t, s, g.ID, byBob.ID); !m.Deleted || m.Body != "" {
		t.Errorf("after the admin's delete: %+v", m)
	}
	// Any admin, not only the creator: bob, once made one, deletes
	// alice's message (PROTOCOL.md §7.5).
	if _, _, err := s.AddAdmin(ctxFor(t), g.ID, "alice", "bob"); err != nil {
		t.Fatalf("AddAdmin: %v", err)
	}
	if r := MustCommit(t, s, DeleteDraft(g.ID, "bob", "b5", byAlice.ID))[0]; !r.Original.Deleted {
		t.Errorf("delete by an admin who is not the creator = %+v", r)
	}
}

// testDeleteByAdmins: every admin of a group (ChatAPI.AddAdmin), not only
// its creator, may delete any message of it; a member who stepped down may
// not (PROTOCOL.md §7.3 "by a group admin (§7.5)").
func testDeleteByAdmins(t *testing.T, s history.Store) {
	ctx := ctxFor(t)
	g := mustGroup(t, s, "alice", "g", "bob", "carol", "dave")
	byDave := MustCommit(t, s, Draft(g.ID, "dave", "d1", "dave's one"))[0].Message
	byDave2 := MustCommit(t, s, Draft(g.ID, "dave", "d2", "dave's two"))[0].Message
	byAlice := MustCommit(t, s, Draft(g.ID, "alice", "a1", "alice's"))[0].Message
	wantErr(t, "carol (not an admin) deletes dave's", commit(t, s, DeleteDraft(g.ID, "carol", "c1", byDave.ID))[0].Err, history.ErrForbidden)
	if _, _, err := s.AddAdmin(ctx, g.ID, "alice", "bob"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.AddAdmin(ctx, g.ID, "alice", "carol"); err != nil {
		t.Fatal(err)
	}
	// bob, a second admin, deletes dave's message and the creator's.
	for _, m := range []history.Message{byDave, byAlice} {
		r := commit(t, s, DeleteDraft(g.ID, "bob", "b-"+m.ID, m.ID))[0]
		if r.Err != nil || !r.Original.Deleted {
			t.Errorf("second admin deletes %s's message: %+v", m.SenderID, r)
		}
	}
	// carol steps down: it may no longer delete another's message.
	if _, _, err := s.RemoveAdmin(ctx, g.ID, "carol", "carol"); err != nil {
		t.Fatal(err)
	}
	wantErr(t, "carol (stepped down) deletes dave's", commit(t, s, DeleteDraft(g.ID, "carol", "c2", byDave2.ID))[0].Err, history.ErrForbidden)
	if m := mustPageOne(t, s, g.ID, byDave2.ID); m.Deleted || m.Body != "dave's two" {
		t.Errorf("a refused delete changed the message: %+v", m)
	}
}

// testEditDeleteOneBatch commits an edit and a delete of one message, and
// a second edit after the delete, in one batch: the edit applies, the
// delete erases it, the late edit is refused.
func testEditDeleteOneBatch(t *testing.T, s history.Store) {
	g := mustGroup(t, s, "alice", "g", "bob")
	orig := MustCommit(t, s, Draft(g.ID, "alice", "c1", "secret a"))[0].Message
	res := commit(t, s,
		EditDraft(g.ID, "alice", "c2", orig.ID, "secret b"),
		DeleteDraft(g.ID, "alice", "c3", orig.ID),
		EditDraft(g.ID, "alice", "c4", orig.ID, "secret c"),
		Draft(g.ID, "bob", "c5", "plain"),
	)
	if res[0].Err != nil || res[1].Err != nil || res[3].Err != nil {
		t.Fatalf("batch results: %v, %v, %v", res[0].Err, res[1].Err, res[3].Err)
	}
	wantErr(t, "edit after a delete in the same batch", res[2].Err, history.ErrDeleted)
	for _, m := range PageAll(t, s, g.ID, "", 100) {
		if strings.Contains(m.Body, "secret") {
			t.Errorf("history holds %q in %s (%+v)", m.Body, m.ID, m)
		}
	}
	if o := mustPageOne(t, s, g.ID, orig.ID); !o.Deleted {
		t.Errorf("original = %+v, want deleted", o)
	}
}

// testUnreadOrdinaryOnly: edits and deletes are not counted as unread
// (PROTOCOL.md §7.3), and neither is a deleted message (§7.3 is silent;
// docs/design.md "Edit and delete": nothing is left to read), in every
// read that carries unread (ChatsOf, ChatFor, ChatList).
func testUnreadOrdinaryOnly(t *testing.T, s history.Store) {
	g := mustGroup(t, s, "alice", "g", "bob")
	m := MustCommit(t, s, Draft(g.ID, "alice", "c1", "one"))[0].Message
	MustCommit(t, s, EditDraft(g.ID, "alice", "c2", m.ID, "one!"))
	m2 := MustCommit(t, s, Draft(g.ID, "alice", "c3", "two"))[0].Message
	MustCommit(t, s, DeleteDraft(g.ID, "alice", "c4", m2.ID))
	MustCommit(t, s, Draft(g.ID, "alice", "c5", "three"))
	chats, err := s.ChatsOf(ctxFor(t), "bob")
	if err != nil {
		t.Fatal(err)
	}
	if len(chats) != 1 || chats[0].Unread != 2 {
		t.Fatalf("bob's unread = %+v, want 2 (one and three: not the edit, the delete or the deleted two)", chats)
	}
	one, listed, _, _ := chatAPIViews(t, s, g.ID, "bob")
	if one.Unread != 2 || listed.Unread != 2 {
		t.Errorf("bob's unread: ChatFor %d, ChatList %d, want 2 (the deleted message is not unread)", one.Unread, listed.Unread)
	}
}

// testCoMembers: the users who share a chat with a user (history.CoMembers,
// when the store has it), for presence (PROTOCOL.md §7.4).
func testCoMembers(t *testing.T, s history.Store) {
	cm, ok := s.(history.CoMembers)
	if !ok {
		t.Skip("the store does not implement history.CoMembers")
	}
	mustGroup(t, s, "alice", "g", "bob", "carol")
	mustDirect(t, s, "alice", "dave")
	mustDirect(t, s, "bob", "erin")
	g2 := mustGroup(t, s, "frank", "g2", "alice")
	if _, _, err := s.RemoveMember(ctxFor(t), g2.ID, "frank", "alice"); err != nil {
		t.Fatal(err)
	}
	for user, want := range map[string]string{
		"alice": "bob,carol,dave", "bob": "alice,carol,erin", "erin": "bob", "nobody": "", "frank": "",
	} {
		got, err := cm.CoMembers(ctxFor(t), user)
		if err != nil {
			t.Fatal(err)
		}
		if strings.Join(got, ",") != want {
			t.Errorf("CoMembers(%s) = %v, want %s", user, got, want)
		}
	}
}

// chatAPIViews returns how user sees chatID through every read of
// history.ChatAPI: ChatFor, the chat in ChatList, and the newest page and
// the forward page of Messages.
func chatAPIViews(t *testing.T, s history.Store, chatID, user string) (history.Chat, history.Chat, []history.Message, []history.Message) {
	t.Helper()
	ctx := ctxFor(t)
	one, err := s.ChatFor(ctx, chatID, user)
	if err != nil {
		t.Fatalf("ChatFor(%s): %v", user, err)
	}
	list, _, err := s.ChatList(ctx, user, "", history.MaxListLimit)
	if err != nil {
		t.Fatalf("ChatList(%s): %v", user, err)
	}
	var listed history.Chat
	for _, c := range list {
		if c.ID == chatID {
			listed = c
		}
	}
	if listed.ID == "" {
		t.Fatalf("ChatList(%s) misses %s", user, chatID)
	}
	newest, _, err := s.Messages(ctx, history.PageQuery{ChatID: chatID, User: user, Before: history.PageEnd, Limit: 100})
	if err != nil {
		t.Fatalf("Messages(before=end): %v", err)
	}
	forward, _, err := s.Messages(ctx, history.PageQuery{ChatID: chatID, User: user, Limit: 100})
	if err != nil {
		t.Fatalf("Messages(forward): %v", err)
	}
	return one, listed, newest, forward
}

// testChatAPIEditsDeletes: the reads of PROTOCOL.md §7 (the chat list, one
// chat, the newest page) after edits and deletes (§7.3): unread and
// lastMessage count and show ordinary messages only, an edit shows as its
// original's new body, a deleted last message as its tombstone, and no
// answer holds a deleted body; lastActivity follows the newest ordinary
// message (an edit or a delete does not move the chat up the list); the
// pages carry edits, deletes, editedAt and deleted as Page does.
func testChatAPIEditsDeletes(t *testing.T, s history.Store) {
	g := mustGroup(t, s, "alice", "g", "bob")
	m1 := MustCommit(t, s, Draft(g.ID, "alice", "c1", "secret first"))[0].Message
	m2 := MustCommit(t, s, Draft(g.ID, "alice", "c2", "second"))[0].Message
	time.Sleep(2 * time.Millisecond) // the edit's SentAt is clearly after m2's
	edit := MustCommit(t, s, EditDraft(g.ID, "alice", "c3", m2.ID, "secret second"))[0].Message
	check := func(step string, wantLast history.Message, wantN int) {
		t.Helper()
		one, listed, newest, forward := chatAPIViews(t, s, g.ID, "bob")
		for how, c := range map[string]history.Chat{"ChatFor": one, "ChatList": listed} {
			l := c.LastMessage
			switch {
			case l == nil:
				t.Errorf("%s: %s LastMessage = nil, want %s", step, how, wantLast.ID)
			case l.ID != wantLast.ID || l.Body != wantLast.Body || l.Deleted != wantLast.Deleted ||
				!l.EditedAt.Equal(wantLast.EditedAt) || l.Kind() != history.KindMessage:
				t.Errorf("%s: %s LastMessage = %+v, want %+v", step, how, *l, wantLast)
			}
			if c.Unread != wantN {
				t.Errorf("%s: %s Unread = %d, want %d (ordinary messages not deleted)", step, how, c.Unread, wantN)
			}
			if !c.LastActivity.Equal(m2.SentAt) {
				t.Errorf("%s: %s LastActivity = %v, want the newest ordinary message's SentAt %v", step, how, c.LastActivity, m2.SentAt)
			}
		}
		for how, page := range map[string][]history.Message{"newest page": newest, "forward page": forward} {
			got := map[string]history.Message{}
			for _, m := range page {
				got[m.ID] = m
			}
			want, _ := pageMap(t, s, g.ID)
			if len(page) != len(want) {
				t.Errorf("%s: %s has %d messages, Page %d", step, how, len(page), len(want))
			}
			for id, w := range want {
				if m := got[id]; m.Body != w.Body || m.Edits != w.Edits || m.Deletes != w.Deletes ||
					m.Deleted != w.Deleted || !m.EditedAt.Equal(w.EditedAt) {
					t.Errorf("%s: %s holds %+v, Page %+v", step, how, m, w)
				}
			}
		}
	}
	o2 := mustPageOne(t, s, g.ID, m2.ID)
	if o2.Body != "secret second" || !o2.EditedAt.Equal(edit.SentAt) {
		t.Fatalf("edited original = %+v", o2)
	}
	check("after an edit of the last message", o2, 2)
	MustCommit(t, s, DeleteDraft(g.ID, "alice", "c4", m1.ID))
	check("after a delete of an older message", o2, 1)
	MustCommit(t, s, DeleteDraft(g.ID, "alice", "c5", m2.ID))
	check("after a delete of the last message", mustPageOne(t, s, g.ID, m2.ID), 0)
	if l := mustPageOne(t, s, g.ID, m2.ID); !l.Deleted || l.Body != "" {
		t.Errorf("deleted last message in Page = %+v", l)
	}
	one, listed, newest, _ := chatAPIViews(t, s, g.ID, "bob")
	for _, m := range append(newest, *one.LastMessage, *listed.LastMessage) {
		if strings.Contains(m.Body, "secret") {
			t.Errorf("a read of ChatAPI holds a deleted body: %+v", m)
		}
	}
}

// testMemberHistoryEdits: edits and deletes in a "member" group
// (PROTOCOL.md §7.3 with §7.6; docs/PROTOCOL.md, implementation notes).
// An edit or delete of a message the reader may not read reveals nothing
// of that message's body: an edit committed before the reader joined is
// not shown at all; one committed while it is a member is shown as the
// edit message (its body is the text the editor sent then), never with
// the original, which stays out of the reader's pages, lastMessage and
// unread. A visible original shows its current body, also after an edit
// committed while the reader was away (that edit message itself is not
// shown).
func testMemberHistoryEdits(t *testing.T, s history.Store) {
	ctx := ctxFor(t)
	g, err := s.CreateGroupWith(ctx, history.GroupSpec{Creator: "alice", Title: "m", Members: []string{"bob"}, History: history.HistoryMember})
	if err != nil {
		t.Fatal(err)
	}
	early := MustCommit(t, s, Draft(g.ID, "alice", "a1", "secret early"))[0].Message
	preJoinEdit := MustCommit(t, s, EditDraft(g.ID, "alice", "a2", early.ID, "secret early, edited before carol"))[0].Message
	older := MustCommit(t, s, Draft(g.ID, "alice", "a3", "secret older"))[0].Message
	if _, err := s.AddMember(ctx, g.ID, "alice", "carol"); err != nil {
		t.Fatal(err)
	}
	seen := MustCommit(t, s, Draft(g.ID, "alice", "a4", "carol sees this"))[0].Message
	edit := MustCommit(t, s, EditDraft(g.ID, "alice", "a5", older.ID, "new text while carol is here"))[0].Message
	del := MustCommit(t, s, DeleteDraft(g.ID, "alice", "a6", early.ID))[0].Message
	// carol away: an edit of a message it may read.
	if _, _, err := s.RemoveMember(ctx, g.ID, "alice", "carol"); err != nil {
		t.Fatal(err)
	}
	awayEdit := MustCommit(t, s, EditDraft(g.ID, "alice", "a7", seen.ID, "carol sees this, edited while away"))[0].Message
	if _, err := s.AddMember(ctx, g.ID, "alice", "carol"); err != nil {
		t.Fatal(err)
	}
	_, listed, newest, forward := chatAPIViews(t, s, g.ID, "carol")
	want := []string{seen.ID, edit.ID, del.ID}
	for how, page := range map[string][]history.Message{"newest page": newest, "forward page": forward} {
		if got := ids(page); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Errorf("carol's %s = %v, want %v (the message and the edit and delete committed while it was a member; not %s, %s, %s, %s)",
				how, got, want, early.ID, preJoinEdit.ID, older.ID, awayEdit.ID)
		}
		for _, m := range page {
			if strings.Contains(m.Body, "secret") {
				t.Errorf("carol's %s holds a body from before it joined: %+v", how, m)
			}
			switch m.ID {
			case edit.ID:
				if m.Edits != older.ID || m.Body != "new text while carol is here" {
					t.Errorf("the edit in carol's %s = %+v, want edits %s with the text sent while carol was there", how, m, older.ID)
				}
			case del.ID:
				if m.Deletes != early.ID || m.Body != "" {
					t.Errorf("the delete in carol's %s = %+v", how, m)
				}
			case seen.ID:
				if m.Body != awayEdit.Body || !m.EditedAt.Equal(awayEdit.SentAt) {
					t.Errorf("carol's visible original = %+v, want its current body %q", m, awayEdit.Body)
				}
			}
		}
	}
	if l := listed.LastMessage; l == nil || l.ID != seen.ID || l.Body != awayEdit.Body {
		t.Errorf("carol's lastMessage = %+v, want %s with its current body", l, seen.ID)
	}
	if listed.Unread != 1 {
		t.Errorf("carol's unread = %d, want 1 (%s only: edits and deletes and messages outside its intervals are not counted)", listed.Unread, seen.ID)
	}
}
