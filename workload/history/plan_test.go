package history

import (
	"errors"
	"testing"
	"time"
)

// The commit rules, decided once for every store: each draft's outcome
// from what the store read, in draft order.
func TestCommitPlan(t *testing.T) {
	now := time.Now()
	d := func(id, chat, sender, corr, body string) Draft {
		return Draft{ID: id, ChatID: chat, SenderID: sender, SenderDevice: "d", CorrelationID: corr, Body: body, SentAt: now}
	}
	orig := Message{Seq: 7, ID: "m0", ChatID: "c1", SenderID: "alice", CorrelationID: "k0", Body: "hi"}
	drafts := []Draft{
		d("m1", "c1", "alice", "k1", "one"),                                           // 0: insert
		d("m2", "c1", "alice", "k1", "one"),                                           // 1: resend of 0 in this batch
		d("m3", "c1", "alice", "k1", "other"),                                         // 2: key of 0, another body: invalid
		d("m4", "c1", "alice", "k0", "hi"),                                            // 3: resend of a committed message
		d("m5", "c2", "alice", "k0", "hi"),                                            // 4: committed key, another chat: invalid
		d("m6", "c1", "mallory", "k6", "x"),                                           // 5: not a member
		d("m7", "nope", "alice", "k7", "x"),                                           // 6: unknown chat
		d("m0", "c1", "alice", "k8", "x"),                                             // 7: message id used
		d("", "c1", "alice", "k9", "x"),                                               // 8: its own checks fail
		{ID: "m10", ChatID: "c1", SenderID: "alice", CorrelationID: "k10", Body: "x"}, // 9: no SentAt
	}
	p := NewCommitPlan(drafts)
	if got := p.Chats(); len(got) != 3 {
		t.Fatalf("Chats() = %v, want the 3 chats of the valid drafts", got)
	}
	p.Decide(Known{
		Members:   map[string][]string{"c1": {"alice", "bob"}, "c2": {"alice", "carol"}},
		Committed: map[Key]Message{{"alice", "k0"}: orig},
		UsedIDs:   map[string]bool{"m0": true},
	})
	if len(p.Inserts) != 1 || p.Inserts[0] != 0 {
		t.Fatalf("Inserts = %v, want [0]", p.Inserts)
	}
	p.Inserted(0, 8, []Delivery{{Recipient: "alice", Pos: 1}, {Recipient: "bob", Pos: 2}})
	rs := p.Finish()
	if rs[0].Message.Seq != 8 || len(rs[0].Members) != 2 {
		t.Errorf("draft 0: %+v", rs[0])
	}
	if !rs[1].Duplicate || rs[1].Message.Seq != 8 || rs[1].Message.ID != "m1" {
		t.Errorf("draft 1, a resend in the batch: %+v", rs[1])
	}
	if !rs[3].Duplicate || rs[3].Message.ID != "m0" {
		t.Errorf("draft 3, a resend of a committed message: %+v", rs[3])
	}
	for i, want := range map[int]error{2: ErrInvalid, 4: ErrInvalid, 5: ErrNotMember, 6: ErrNotFound, 7: ErrInvalid, 8: ErrInvalid, 9: ErrInvalid} {
		if !errors.Is(rs[i].Err, want) {
			t.Errorf("draft %d: err %v, want %v", i, rs[i].Err, want)
		}
	}
}

// A resend under the key of a message deleted or edited since is the
// original's resend: its first body is erased or replaced, so only the
// chat can be compared (a fresh user's retry after a delete was refused
// "another body").
func TestResendOfAnEditedOrDeletedMessage(t *testing.T) {
	now := time.Now()
	for name, orig := range map[string]Message{
		"deleted": {Seq: 7, ID: "m0", ChatID: "c1", SenderID: "alice", CorrelationID: "k0", Body: "", Deleted: true},
		"edited":  {Seq: 7, ID: "m0", ChatID: "c1", SenderID: "alice", CorrelationID: "k0", Body: "new text", EditedAt: now},
	} {
		p := NewCommitPlan([]Draft{
			{ID: "m1", ChatID: "c1", SenderID: "alice", SenderDevice: "d", CorrelationID: "k0", Body: "hello bob", SentAt: now},
			{ID: "m2", ChatID: "c2", SenderID: "alice", SenderDevice: "d", CorrelationID: "k0", Body: "hello bob", SentAt: now},
		})
		p.Decide(Known{
			Members:   map[string][]string{"c1": {"alice", "bob"}, "c2": {"alice", "carol"}},
			Committed: map[Key]Message{{"alice", "k0"}: orig},
		})
		rs := p.Finish()
		if !rs[0].Duplicate || rs[0].Err != nil || rs[0].Message.ID != "m0" {
			t.Errorf("%s: a resend to the same chat = %+v, want the original m0", name, rs[0])
		}
		if rs[1].Err == nil {
			t.Errorf("%s: a resend to another chat was not refused: %+v", name, rs[1])
		}
	}
}

// Another user's deleted message is still forbidden to a non-admin: the
// permission is checked before the tombstone is answered (a fresh user
// saw 403 for bob deleting alice's message, then 200 once it was deleted).
func TestDeleteOfAnotherUsersDeletedMessageIsForbidden(t *testing.T) {
	now := time.Now()
	orig := Message{Seq: 7, ID: "m0", ChatID: "c1", SenderID: "alice", CorrelationID: "k0", Deleted: true}
	p := NewCommitPlan([]Draft{{ID: "d1", ChatID: "c1", SenderID: "bob", SenderDevice: "d", CorrelationID: "delete-d1", Deletes: "m0", SentAt: now}})
	p.Decide(Known{
		Members: map[string][]string{"c1": {"alice", "bob"}},
		Targets: map[string]Message{"m0": orig},
		Admin:   func(string, string) bool { return false },
	})
	rs := p.Finish()
	if !errors.Is(rs[0].Err, ErrForbidden) {
		t.Fatalf("bob deleting alice's deleted message: %+v, want ErrForbidden", rs[0])
	}
}
