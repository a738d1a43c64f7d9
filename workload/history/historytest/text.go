package historytest

import (
	"errors"
	"slices"
	"testing"

	"github.com/tetra-messenger/tetra/workload/history"
)

// testTextRules: text that is not valid UTF-8 or contains U+0000 (a body, a
// title, an id) and user ids with control characters (C0, DEL, C1) are
// refused with ErrInvalid by every store alike, and nothing of them is
// stored (PROTOCOL.md §3; package text). Before the shared rule SQLite
// stored a NUL body and a NUL title that PostgreSQL refused, and both
// stores refused C1 user ids that the token layer let through (issue 13,
// point 2).
func testTextRules(t *testing.T, s history.Store) {
	ctx := ctxFor(t)
	d := mustDirect(t, s, "alice", "bob")
	before := maybeHeads(t, s)

	bad := map[string]history.Draft{}
	add := func(name string, mutate func(*history.Draft)) {
		dr := Draft(d.ID, "alice", "k-"+name, "body of "+name)
		mutate(&dr)
		bad[name] = dr
	}
	add("body with NUL", func(dr *history.Draft) { dr.Body = "a\x00b" })
	add("body not UTF-8", func(dr *history.Draft) { dr.Body = "a\xffb" })
	add("correlationId with NUL", func(dr *history.Draft) { dr.CorrelationID = "k\x00" })
	add("correlationId not UTF-8", func(dr *history.Draft) { dr.CorrelationID = "k\xc3" })
	add("chat id with NUL", func(dr *history.Draft) { dr.ChatID = d.ID + "\x00" })
	add("message id with NUL", func(dr *history.Draft) { dr.ID = dr.ID[:10] + "\x00" })
	add("device with NUL", func(dr *history.Draft) { dr.SenderDevice = "d\x00" })
	add("sender with C1", func(dr *history.Draft) { dr.SenderID = "alice\u0085" })
	names := make([]string, 0, len(bad))
	for n := range bad {
		names = append(names, n)
	}
	slices.Sort(names)
	good := Draft(d.ID, "alice", "k-good", "a good one between them")
	drafts := []history.Draft{good}
	for _, n := range names {
		drafts = append(drafts, bad[n])
	}
	res := commit(t, s, drafts...)
	if res[0].Err != nil {
		t.Fatalf("the valid draft beside the invalid ones: %v", res[0].Err)
	}
	for i, n := range names {
		r := res[i+1]
		wantErr(t, n, r.Err, history.ErrInvalid)
		if r.Duplicate || len(r.Deliveries) != 0 {
			t.Errorf("%s: Duplicate %v, %d deliveries; want neither", n, r.Duplicate, len(r.Deliveries))
		}
	}
	checkDeliveries(t, s, before, res)
	if got := ids(PageAll(t, s, d.ID, "", 100)); !slices.Equal(got, []string{good.ID}) {
		t.Errorf("history = %v, want only the valid message %s", got, good.ID)
	}

	// Titles and members.
	for _, title := range []string{"Team\x00", "Team\xff"} {
		if _, err := s.CreateGroup(ctx, "alice", title, []string{"bob"}); !errors.Is(err, history.ErrInvalid) {
			t.Errorf("CreateGroup(title %q): err = %v, want ErrInvalid", title, err)
		}
	}
	for _, user := range []string{"bob\x00", "bob\u0085", "bob\u009f", "bob\x7f", "bob\n"} {
		if _, err := s.CreateGroup(ctx, "alice", "t", []string{user}); !errors.Is(err, history.ErrInvalid) {
			t.Errorf("CreateGroup(member %q): err = %v, want ErrInvalid", user, err)
		}
		if _, _, err := s.CreateDirect(ctx, "alice", user); !errors.Is(err, history.ErrInvalid) {
			t.Errorf("CreateDirect(alice, %q): err = %v, want ErrInvalid", user, err)
		}
	}
	g := mustGroup(t, s, "alice", "g", "bob")
	if _, err := s.AddMember(ctx, g.ID, "alice", "carol\u0085"); !errors.Is(err, history.ErrInvalid) {
		t.Errorf("AddMember(carol + C1): err = %v, want ErrInvalid", err)
	}
	if c, err := s.Chat(ctx, g.ID); err != nil || !slices.Equal(c.Members, []string{"alice", "bob"}) {
		t.Errorf("group after the refused calls = %+v, %v; want members [alice bob]", c, err)
	}
	if list, err := s.ChatsOf(ctx, "alice"); err != nil || len(list) != 2 {
		t.Errorf("alice has %d chats (%v), want 2: refused calls must create nothing", len(list), err)
	}

	// Read receipts: one bad receipt fails the call with ErrInvalid (the
	// ingest stage isolates it, see ingest.TestBadReadReceiptIsIsolated).
	ok := history.Read{ChatID: d.ID, UserID: "bob", MessageID: good.ID, At: good.SentAt}
	for name, r := range map[string]history.Read{
		"message id with NUL":  {ChatID: d.ID, UserID: "bob", MessageID: "m\x00", At: good.SentAt},
		"message id not UTF-8": {ChatID: d.ID, UserID: "bob", MessageID: "m\xff", At: good.SentAt},
		"chat id with NUL":     {ChatID: d.ID + "\x00", UserID: "bob", MessageID: good.ID, At: good.SentAt},
		"user with C1":         {ChatID: d.ID, UserID: "bob\u0085", MessageID: good.ID, At: good.SentAt},
	} {
		if err := s.SaveReads(ctx, []history.Read{ok, r}); !errors.Is(err, history.ErrInvalid) {
			t.Errorf("SaveReads(%s): err = %v, want ErrInvalid", name, err)
		}
	}
	if err := s.SaveReads(ctx, []history.Read{ok}); err != nil {
		t.Errorf("SaveReads(valid) after the refused ones: %v", err)
	}
}
