package storecore

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/history"
)

// fake is a Backend whose transactions record the calls made on them.
type fake struct {
	chat  history.Chat // what Chat reads; SetTitle, SetAdmin and KeepAdmin change the transaction's copy, Commit keeps it
	calls []string
}

func (f *fake) Begin(_ context.Context, op string) (ChangeTx, error) {
	f.calls = append(f.calls, "begin "+op)
	c := f.chat
	c.Admins = slices.Clone(c.Admins)
	return &fakeTx{f: f, chat: c}, nil
}
func (f *fake) Read(context.Context, string) (ReadTx, error) { return nil, errors.New("no reads") }
func (f *fake) InsertGroup(context.Context, history.Chat) error {
	f.calls = append(f.calls, "insert group")
	return nil
}

type fakeTx struct {
	f    *fake
	chat history.Chat // the chat as this transaction wrote it
}

func (t *fakeTx) call(format string, args ...any) error {
	t.f.calls = append(t.f.calls, fmt.Sprintf(format, args...))
	return nil
}
func (t *fakeTx) LockAppend(context.Context) error           { return t.call("lock append") }
func (t *fakeTx) LockChat(_ context.Context, c string) error { return t.call("lock chat %s", c) }
func (t *fakeTx) Chat(_ context.Context, c string) (history.Chat, error) {
	_ = t.call("chat %s", c)
	if c != t.chat.ID {
		return history.Chat{}, NotFound(c)
	}
	c2 := t.chat // a read of its own, as a store's is
	c2.Admins = slices.Clone(c2.Admins)
	return c2, nil
}
func (t *fakeTx) MaxSeq(context.Context) (int64, error) { return 7, t.call("max seq") }
func (t *fakeTx) InsertMember(_ context.Context, c, u string, _ int64) error {
	return t.call("insert member %s %s", c, u)
}
func (t *fakeTx) EndSpan(_ context.Context, c, u string, cut int64) error {
	return t.call("end span %s %s %d", c, u, cut)
}
func (t *fakeTx) DeleteMember(_ context.Context, c, u string) error {
	return t.call("delete member %s %s", c, u)
}
func (t *fakeTx) KeepAdmin(_ context.Context, c string, _ int64, down string) error {
	if len(t.chat.Admins) == 0 && len(t.chat.Members) > 0 {
		next := down
		for _, m := range t.chat.Members {
			if m != down {
				next = m
				break
			}
		}
		t.chat.Admins = []string{next}
	}
	return t.call("keep admin %s %q", c, down)
}
func (t *fakeTx) CloseChat(_ context.Context, c string) error { return t.call("close %s", c) }
func (t *fakeTx) BumpEpoch(context.Context) error             { return t.call("bump epoch") }
func (t *fakeTx) SetTitle(_ context.Context, c, title string) error {
	t.chat.Title = title
	return t.call("set title %s %q", c, title)
}
func (t *fakeTx) SetAdmin(_ context.Context, c, u string, at int64) error {
	t.chat.Admins = slices.DeleteFunc(t.chat.Admins, func(a string) bool { return a == u })
	if at > 0 {
		t.chat.Admins = append(t.chat.Admins, u)
	}
	return t.call("set admin %s %s %v", c, u, at > 0)
}
func (t *fakeTx) Commit(context.Context) error {
	t.f.chat = t.chat
	return t.call("commit")
}
func (t *fakeTx) Rollback() { _ = t.call("rollback") }

func group(members ...string) history.Chat {
	return history.Chat{ID: "g", Kind: history.KindGroup, CreatedBy: members[0], Members: members,
		Admins: []string{members[0]}, History: history.HistoryShared}
}

// want compares the calls after the begin with the script.
func want(t *testing.T, f *fake, script ...string) {
	t.Helper()
	if got := f.calls; !slices.Equal(got, script) {
		t.Errorf("calls:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(script, "\n  "))
	}
}

// TestChangeScripts: each change takes its locks, reads the chat, checks
// it, and writes only what the rule asks, in the order the stores rely on
// (the removal's span before its row is deleted, the epoch last).
func TestChangeScripts(t *testing.T) {
	ctx := context.Background()

	f := &fake{chat: group("a", "b")}
	c, cut, changed, err := RemoveMember(ctx, f, "g", "a", "b")
	if err != nil || cut != 7 || !changed {
		t.Fatalf("RemoveMember: %v, cutoff %d, changed %v", err, cut, changed)
	}
	want(t, f, "begin remove member", "lock append", "chat g", "max seq", "end span g b 7", "delete member g b",
		`keep admin g ""`, "bump epoch", "chat g", "commit", "rollback")
	_ = c

	f = &fake{chat: group("a")}
	c, _, _, err = RemoveMember(ctx, f, "g", "a", "a")
	if err != nil || len(c.Members) != 0 || c.Members == nil || c.Admins == nil {
		t.Fatalf("the last member leaving: %+v, %v", c, err)
	}
	want(t, f, "begin remove member", "lock append", "chat g", "max seq", "end span g a 7", "delete member g a",
		`keep admin g ""`, "close g", "bump epoch", "commit", "rollback")

	f = &fake{chat: group("a", "b")}
	if _, _, changed, err = RemoveMember(ctx, f, "g", "a", "z"); err != nil || changed {
		t.Fatalf("removing a non-member: changed %v, %v; want a no-op", changed, err)
	}
	want(t, f, "begin remove member", "lock append", "chat g", "max seq", "rollback")

	f = &fake{chat: group("a", "b")}
	if _, _, _, err = RemoveMember(ctx, f, "g", "b", "a"); !errors.Is(err, history.ErrForbidden) {
		t.Fatalf("a member removing the creator: %v", err)
	}

	f = &fake{chat: group("a", "b")}
	c, changed, err = AddMember(ctx, f, "g", "b", "c")
	if err != nil || !changed || !slices.Equal(c.Members, []string{"a", "b", "c"}) {
		t.Fatalf("AddMember: %+v, %v", c, err)
	}
	want(t, f, "begin add member", "lock append", "lock chat g", "chat g", "insert member g c", "bump epoch", "commit", "rollback")

	f = &fake{chat: group("a", "b")}
	if _, changed, err = AddMember(ctx, f, "g", "b", "a"); err != nil || changed {
		t.Fatalf("adding a member: changed %v, %v; want a no-op", changed, err)
	}
	want(t, f, "begin add member", "lock append", "lock chat g", "chat g", "rollback")

	full := make([]string, history.MaxGroupMembers)
	for i := range full {
		full[i] = fmt.Sprintf("u%04d", i)
	}
	f = &fake{chat: group(full...)}
	if _, _, err = AddMember(ctx, f, "g", "u0000", "zed"); !errors.Is(err, history.ErrInvalid) {
		t.Fatalf("adding to a full group: %v", err)
	}
	want(t, f, "begin add member", "lock append", "lock chat g", "chat g", "rollback")

	for _, bad := range []func(*fake) error{
		func(f *fake) error { _, _, err := AddMember(ctx, f, "g", "", "c"); return err },
		func(f *fake) error { _, _, err := AddMember(ctx, f, "g", "a", "x\x00"); return err },
		func(f *fake) error { _, _, _, err := RemoveMember(ctx, f, "g", "a\n", "b"); return err },
		func(f *fake) error {
			_, _, err := Rename(ctx, f, "g", "a", strings.Repeat("t", history.MaxTitleBytes+1))
			return err
		},
	} {
		f = &fake{chat: group("a", "b")}
		if err := bad(f); !errors.Is(err, history.ErrInvalid) {
			t.Errorf("bad input: %v, want ErrInvalid", err)
		}
		want(t, f) // refused before any transaction
	}

	f = &fake{chat: group("a", "b")}
	if _, _, err = AddMember(ctx, f, "\xff", "a", "c"); !errors.Is(err, history.ErrNotFound) {
		t.Fatalf("a chat id no store holds: %v", err)
	}
	want(t, f)

	f = &fake{chat: group("a", "b")}
	if _, changed, err := RemoveAdmin(ctx, f, "g", "a", "a"); err != nil || !changed {
		t.Fatalf("RemoveAdmin: changed %v, %v", changed, err)
	}
	want(t, f, "begin remove admin", "lock chat g", "chat g", "set admin g a false", `keep admin g "a"`, "chat g", "commit", "rollback")

	f = &fake{chat: group("a", "b")}
	if _, changed, err := AddAdmin(ctx, f, "g", "a", "b"); err != nil || !changed {
		t.Fatalf("AddAdmin: changed %v, %v", changed, err)
	}
	want(t, f, "begin add admin", "lock chat g", "chat g", "set admin g b true", "chat g", "commit", "rollback")

	f = &fake{chat: group("a", "b")}
	if _, _, err := Rename(ctx, f, "g", "b", "x"); !errors.Is(err, history.ErrForbidden) {
		t.Fatalf("a non-admin renaming: %v", err)
	}
	want(t, f, "begin rename", "lock chat g", "chat g", "rollback")

	f = &fake{chat: group("a", "b")}
	if c, changed, err := Rename(ctx, f, "g", "a", " x "); err != nil || !changed || c.Title != "x" {
		t.Fatalf("Rename: %+v, changed %v, %v", c, changed, err)
	}
	want(t, f, "begin rename", "lock chat g", "chat g", `set title g "x"`, "chat g", "commit", "rollback")
}

// TestChangeNoOps: a change that changes nothing (PROTOCOL.md §7.5)
// reports changed false and commits nothing, so the server sends no
// "updated" event: renaming to the same title (after trimming), making an
// admin of an admin, a member who is not an admin stepping down, and an
// admin alone in its group stepping down (KeepAdmin makes it admin again:
// written, then rolled back).
func TestChangeNoOps(t *testing.T) {
	ctx := context.Background()
	titled := func(title string, members ...string) history.Chat {
		c := group(members...)
		c.Title = title
		return c
	}
	for _, tc := range []struct {
		name   string
		chat   history.Chat
		call   func(f *fake) (history.Chat, bool, error)
		script []string
	}{
		{"rename to the same title", titled("Team", "a", "b"),
			func(f *fake) (history.Chat, bool, error) { return Rename(ctx, f, "g", "a", "  Team ") },
			[]string{"begin rename", "lock chat g", "chat g", "rollback"}},
		{"make an admin of an admin", group("a", "b"),
			func(f *fake) (history.Chat, bool, error) { return AddAdmin(ctx, f, "g", "a", "a") },
			[]string{"begin add admin", "lock chat g", "chat g", "rollback"}},
		{"step down when not an admin", group("a", "b"),
			func(f *fake) (history.Chat, bool, error) { return RemoveAdmin(ctx, f, "g", "b", "b") },
			[]string{"begin remove admin", "lock chat g", "chat g", "rollback"}},
		{"the only member steps down", group("a"),
			func(f *fake) (history.Chat, bool, error) { return RemoveAdmin(ctx, f, "g", "a", "a") },
			[]string{"begin remove admin", "lock chat g", "chat g", "set admin g a false", `keep admin g "a"`, "chat g", "rollback"}},
	} {
		f := &fake{chat: tc.chat}
		c, changed, err := tc.call(f)
		if err != nil || changed {
			t.Errorf("%s: changed %v, %v; want a no-op", tc.name, changed, err)
		}
		if c.Title != tc.chat.Title || !slices.Equal(c.Admins, tc.chat.Admins) {
			t.Errorf("%s: answered %+v, want the chat as it was", tc.name, c)
		}
		want(t, f, tc.script...)
	}
}

// TestPurgeCut: the stored cutoff, none before the oldest storable time,
// every row at or after the newest.
func TestPurgeCut(t *testing.T) {
	if _, _, err := PurgeCut(time.Now(), 0); !errors.Is(err, history.ErrInvalid) {
		t.Errorf("limit 0: %v", err)
	}
	if _, none, err := PurgeCut(history.MinSentAt.Add(-time.Nanosecond), 1); !none || err != nil {
		t.Errorf("before MinSentAt: none %v, %v", none, err)
	}
	if cut, none, _ := PurgeCut(history.MaxSentAt, 1); none || cut != math.MaxInt64 {
		t.Errorf("at MaxSentAt: %d, none %v", cut, none)
	}
	at := time.Unix(1700000000, 5)
	if cut, none, _ := PurgeCut(at, 1); none || cut != at.UnixNano() {
		t.Errorf("%v: %d, none %v", at, cut, none)
	}
}
