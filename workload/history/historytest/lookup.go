package historytest

import (
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/history"
)

// testMessageSeq: MessageSeq finds a committed message of its own chat,
// with its Seq, and nothing else: not another chat's message, not an
// unknown or purged id, not a chat that does not exist, not text the store
// never holds (issue 13, point 7: read receipts are checked with it).
func testMessageSeq(t *testing.T, s history.Store) {
	ctx := ctxFor(t)
	a := mustDirect(t, s, "alice", "bob")
	b := mustGroup(t, s, "carol", "b", "alice")
	old := Draft(a.ID, "alice", "old", "old")
	old.SentAt = time.Now().Add(-100 * 24 * time.Hour)
	res := MustCommit(t, s, Draft(a.ID, "alice", "k1", "one"), Draft(b.ID, "alice", "k2", "two"), old)
	if _, err := s.PurgeHistory(ctx, time.Now().Add(-90*24*time.Hour), 10); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		what, chat, id string
		want           bool
	}{
		{"a message of the chat", a.ID, res[0].Message.ID, true},
		{"a message of another chat", a.ID, res[1].Message.ID, false},
		{"the other chat's own", b.ID, res[1].Message.ID, true},
		{"a purged message", a.ID, res[2].Message.ID, false},
		{"an unknown id", a.ID, "01UNKNOWN00000000000000000", false},
		{"no such chat", "c_nope", res[0].Message.ID, false},
		{"an id with NUL", a.ID, res[0].Message.ID + "\x00", false},
		{"an id not UTF-8", a.ID, "\xff", false},
		{"an empty id", a.ID, "", false},
	} {
		seq, ok, err := s.MessageSeq(ctx, c.chat, c.id)
		if err != nil || ok != c.want {
			t.Errorf("%s: MessageSeq = %d, %v, %v; want ok %v", c.what, seq, ok, err, c.want)
			continue
		}
		if ok {
			want := res[0].Message.Seq
			if c.chat == b.ID {
				want = res[1].Message.Seq
			}
			if seq != want {
				t.Errorf("%s: seq %d, want %d", c.what, seq, want)
			}
		}
	}
}
