package storecore

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tetra-messenger/tetra/workload/history"
)

// Backend is what a relational store offers the algorithms of this
// package.
type Backend interface {
	// Begin opens a read-write transaction for the change op (op names it
	// in errors). SQLite runs it on its one writer connection; PostgreSQL
	// on a pooled one.
	Begin(ctx context.Context, op string) (ChangeTx, error)
	// Read opens a read-only transaction on one snapshot; op names it in
	// errors.
	Read(ctx context.Context, op string) (ReadTx, error)
	// InsertGroup writes the new group chat c (NewGroup) in one
	// transaction: its row and one members row per member, joined at its
	// creation, its admins admins since then.
	InsertGroup(ctx context.Context, c history.Chat) error
}

// ChangeTx is one read-write transaction of a change of members, admins or
// title. Each method is one statement. A backend may defer the writes
// (PostgreSQL queues them in one pipelined batch) until the next read or
// Commit, whose error then reports them. Errors other than those named
// wrap history.ErrUnavailable.
type ChangeTx interface {
	// LockAppend serializes the rest of the transaction with Commit's
	// write: a commit either finished before or reads what this
	// transaction wrote (PostgreSQL: the advisory append lock; SQLite:
	// nothing, its writer connection is that lock already).
	LockAppend(ctx context.Context) error
	// LockChat locks chatID's row against other changes of the chat
	// (PostgreSQL: FOR NO KEY UPDATE, which does not block Commit's foreign
	// key checks; SQLite: nothing). No such row is history.ErrNotFound.
	LockChat(ctx context.Context, chatID string) error
	// Chat reads chatID with its members sorted and its admins in the
	// order they became admins; unknown or closed is history.ErrNotFound.
	Chat(ctx context.Context, chatID string) (history.Chat, error)
	// MaxSeq is the highest history Seq committed (0 for none).
	MaxSeq(ctx context.Context) (int64, error)

	// InsertMember adds user to chatID, joined at joinedAt (Unix
	// nanoseconds), its membership interval starting after every Seq
	// taken so far (PROTOCOL.md §7.6), not an admin.
	InsertMember(ctx context.Context, chatID, user string, joinedAt int64) error
	// EndSpan keeps user's current interval of chatID, ending at cutoff,
	// among its closed ones (an empty interval is not kept).
	EndSpan(ctx context.Context, chatID, user string, cutoff int64) error
	// DeleteMember removes user's members row of chatID.
	DeleteMember(ctx context.Context, chatID, user string) error
	// KeepAdmin makes the member of group chatID who joined earliest
	// (then by id; last the member steppingDown) an admin since at when
	// the group has none left (PROTOCOL.md §7.5); nothing otherwise.
	KeepAdmin(ctx context.Context, chatID string, at int64, steppingDown string) error
	// CloseChat marks chatID closed: its last member left.
	CloseChat(ctx context.Context, chatID string) error
	// BumpEpoch moves the membership epoch, which invalidates every
	// process's cache of member lists (Commit checks it).
	BumpEpoch(ctx context.Context) error
	// SetTitle sets chatID's title.
	SetTitle(ctx context.Context, chatID, title string) error
	// SetAdmin sets user's admin_at in chatID: Unix nanoseconds, 0 for
	// not an admin.
	SetAdmin(ctx context.Context, chatID, user string, at int64) error

	// Commit commits; Rollback ends the transaction when it was not
	// committed (after Commit it does nothing).
	Commit(ctx context.Context) error
	Rollback()
}

// validPair checks the acting user by ("user id") and the user acted on
// (named what in the error).
func validPair(by, what, user string) error {
	if err := ValidUser("user id", by); err != nil {
		return err
	}
	return ValidUser(what, user)
}

// now is the clock of the changes, in the stored form.
func now() int64 { return Nanos(time.Now()) }

// begin opens the transaction of op on chatID, takes the locks asked for
// and reads the chat; on an error it is rolled back.
func begin(ctx context.Context, b Backend, op, chatID string, appendLock, chatLock bool) (ChangeTx, history.Chat, error) {
	if !Storable(chatID) {
		return nil, history.Chat{}, notFound(chatID)
	}
	tx, err := b.Begin(ctx, op)
	if err != nil {
		return nil, history.Chat{}, err
	}
	c, err := lockLoad(ctx, tx, chatID, appendLock, chatLock)
	if err != nil {
		tx.Rollback()
		return nil, history.Chat{}, err
	}
	return tx, c, nil
}

// lockLoad takes the locks and reads the chat.
func lockLoad(ctx context.Context, tx ChangeTx, chatID string, appendLock, chatLock bool) (history.Chat, error) {
	if appendLock {
		if err := tx.LockAppend(ctx); err != nil {
			return history.Chat{}, err
		}
	}
	// The row is locked first, and the chat read in a statement of its
	// own: under READ COMMITTED a statement that waited for the lock still
	// sees the member list of its own snapshot, taken before the wait, so
	// two concurrent additions at the limit would both count 999
	// (TestGroupLimits caught it, about one run in six).
	if chatLock {
		if err := tx.LockChat(ctx, chatID); err != nil {
			return history.Chat{}, err
		}
	}
	return tx.Chat(ctx, chatID)
}

// AddMember implements history.Store.AddMember on b: user is added to the
// group chatID on behalf of by. Errors, in the order checked: ErrInvalid
// for bad user ids, ErrNotFound for an unknown chat, ErrNotMember when by
// is not a member, ErrInvalid for a direct chat or a group already at
// history.MaxGroupMembers. Adding an existing member changes nothing. The
// transaction takes the append lock, as RemoveMember does, so changes of
// one chat's members never interleave and none interleaves with a
// commit's write (a commit that follows the return sees the new member),
// and then the chat's lock, so concurrent additions cannot overshoot
// MaxGroupMembers. changed is false when user was a member already (the
// call wrote nothing), decided under those locks: PROTOCOL.md §3's chat
// events follow it, not a check made before the call, which would race.
func AddMember(ctx context.Context, b Backend, chatID, by, user string) (history.Chat, bool, error) {
	const op = "add member"
	if err := validPair(by, "member id", user); err != nil {
		return history.Chat{}, false, err
	}
	tx, c, err := begin(ctx, b, op, chatID, true, true)
	if err != nil {
		return history.Chat{}, false, err
	}
	defer tx.Rollback()
	if !c.HasMember(by) {
		return history.Chat{}, false, fmt.Errorf("%w: %q in chat %q", history.ErrNotMember, by, chatID)
	}
	if c.Kind != history.KindGroup {
		return history.Chat{}, false, fmt.Errorf("%w: members can be added to group chats only", history.ErrInvalid)
	}
	if c.HasMember(user) {
		return c, false, nil // the deferred rollback ends the transaction, which wrote nothing
	}
	if len(c.Members) >= history.MaxGroupMembers {
		return history.Chat{}, false, fmt.Errorf("%w: a group has at most %d members", history.ErrInvalid, history.MaxGroupMembers)
	}
	if err := tx.InsertMember(ctx, chatID, user, now()); err != nil {
		return history.Chat{}, false, err
	}
	if err := tx.BumpEpoch(ctx); err != nil {
		return history.Chat{}, false, err
	}
	if err := tx.Commit(ctx); err != nil {
		return history.Chat{}, false, err
	}
	i, _ := slices.BinarySearch(c.Members, user)
	c.Members = slices.Insert(c.Members, i, user)
	return c, true, nil
}

// RemoveMember implements history.Store.RemoveMember on b: user leaves,
// or is removed by the chat's creator or an admin (history.CheckRemove),
// and the chat after it comes back with the cutoff Seq. Errors: ErrInvalid
// for bad ids or a direct chat, ErrNotFound for an unknown chat,
// ErrNotMember when by is not a member, ErrForbidden. Removing a
// non-member changes nothing (changed false, decided in the transaction,
// so the server's exclusion and chat events follow what happened).
//
// Serializing with Commit: the transaction takes the append lock
// (ChangeTx.LockAppend) first. A commit holding it finishes first, and
// its messages are at or below cutoff (read under the lock). A commit
// that waits for it reads the membership epoch this transaction bumps, so
// it reads the member list again, without user. Either way a message
// committed after RemoveMember returned never has user among its
// recipients.
func RemoveMember(ctx context.Context, b Backend, chatID, by, user string) (history.Chat, int64, bool, error) {
	const op = "remove member"
	if err := validPair(by, "member id", user); err != nil {
		return history.Chat{}, 0, false, err
	}
	tx, c, err := begin(ctx, b, op, chatID, true, false)
	if err != nil {
		return history.Chat{}, 0, false, err
	}
	defer tx.Rollback()
	if err := history.CheckRemove(c, by, user); err != nil {
		return history.Chat{}, 0, false, err
	}
	cutoff, err := tx.MaxSeq(ctx)
	if err != nil {
		return history.Chat{}, 0, false, err
	}
	if !c.HasMember(user) {
		return c, cutoff, false, nil // the deferred rollback ends the transaction, which wrote nothing
	}
	last := len(c.Members) == 1
	// The membership interval ends at cutoff (PROTOCOL.md §7.6); a group
	// never loses its last admin; the last member leaving closes it
	// (§7.5).
	err = tx.EndSpan(ctx, chatID, user, cutoff)
	if err == nil {
		err = tx.DeleteMember(ctx, chatID, user)
	}
	if err == nil {
		err = tx.KeepAdmin(ctx, chatID, now(), "")
	}
	if err == nil && last {
		err = tx.CloseChat(ctx, chatID)
	}
	if err == nil {
		err = tx.BumpEpoch(ctx)
	}
	if err != nil {
		return history.Chat{}, 0, false, err
	}
	// A group the removal emptied is closed and comes back with no
	// members.
	after := history.Chat{ID: c.ID, Kind: c.Kind, Title: c.Title, CreatedBy: c.CreatedBy, CreatedAt: c.CreatedAt,
		History: c.History, Members: []string{}, Admins: []string{}}
	if !last {
		if after, err = tx.Chat(ctx, chatID); err != nil {
			return history.Chat{}, 0, false, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return history.Chat{}, 0, false, err
	}
	return after, cutoff, true, nil
}

// change runs fn in one transaction with the chat's row locked
// (ChangeTx.LockChat, so concurrent changes of one chat serialize) and the
// chat as read after the lock, and returns the chat as read after fn and
// whether the change changed it. fn returns false to change nothing (the
// chat is then returned as read, and changed is false). When fn wrote but
// the chat reads the same as before (its title and admins, in order: a
// member alone stepping down is made admin again by KeepAdmin), the
// transaction is rolled back and changed is false too, so a no-op leaves
// the stored chat as it was (admin_at included). Deciding it here, under
// the chat's lock, is what lets a caller skip the "updated" event of
// PROTOCOL.md §7.5 without racing a concurrent change.
func change(ctx context.Context, b Backend, op, chatID string, fn func(tx ChangeTx, c history.Chat) (bool, error)) (history.Chat, bool, error) {
	tx, c, err := begin(ctx, b, op, chatID, false, true)
	if err != nil {
		return history.Chat{}, false, err
	}
	defer tx.Rollback()
	wrote, err := fn(tx, c)
	if err != nil {
		return history.Chat{}, false, err
	}
	if !wrote {
		return c, false, nil // the deferred rollback ends the transaction, which wrote nothing
	}
	after, err := tx.Chat(ctx, chatID)
	if err != nil {
		return history.Chat{}, false, err
	}
	if after.Title == c.Title && slices.Equal(after.Admins, c.Admins) {
		return c, false, nil // rolled back: nothing a member sees changed
	}
	if err := tx.Commit(ctx); err != nil {
		return history.Chat{}, false, err
	}
	return after, true, nil
}

// Rename implements history.ChatAPI.Rename on b: renaming to the title
// the group has (after trimming) changes nothing (changed false).
func Rename(ctx context.Context, b Backend, chatID, by, title string) (history.Chat, bool, error) {
	if err := ValidUser("user id", by); err != nil {
		return history.Chat{}, false, err
	}
	title, err := history.CheckTitle(title)
	if err != nil {
		return history.Chat{}, false, err
	}
	return change(ctx, b, "rename", chatID, func(tx ChangeTx, c history.Chat) (bool, error) {
		if err := history.CheckAdminChange(c, by, "rename it"); err != nil {
			return false, err
		}
		if c.Title == title {
			return false, nil
		}
		return true, tx.SetTitle(ctx, chatID, title)
	})
}

// AddAdmin implements history.ChatAPI.AddAdmin on b: making an admin of
// an admin changes nothing (changed false).
func AddAdmin(ctx context.Context, b Backend, chatID, by, user string) (history.Chat, bool, error) {
	if err := validPair(by, "userId", user); err != nil {
		return history.Chat{}, false, err
	}
	return change(ctx, b, "add admin", chatID, func(tx ChangeTx, c history.Chat) (bool, error) {
		if err := history.CheckAdminChange(c, by, "make admins"); err != nil {
			return false, err
		}
		if !c.HasMember(user) {
			return false, fmt.Errorf("%w: %q is not a member of the group", history.ErrInvalid, user)
		}
		if c.IsAdmin(user) {
			return false, nil
		}
		return true, tx.SetAdmin(ctx, chatID, user, now())
	})
}

// RemoveAdmin implements history.ChatAPI.RemoveAdmin on b: an admin steps
// down; the group keeps an admin (ChangeTx.KeepAdmin). A member who is not
// an admin, or an admin alone in its group (it would be made admin again),
// changes nothing (changed false).
func RemoveAdmin(ctx context.Context, b Backend, chatID, by, user string) (history.Chat, bool, error) {
	if err := validPair(by, "userId", user); err != nil {
		return history.Chat{}, false, err
	}
	return change(ctx, b, "remove admin", chatID, func(tx ChangeTx, c history.Chat) (bool, error) {
		switch {
		case !c.HasMember(by):
			return false, fmt.Errorf("%w: %q in chat %q", history.ErrNotMember, by, chatID)
		case c.Kind != history.KindGroup:
			return false, fmt.Errorf("%w: admins: group chats only", history.ErrInvalid)
		case by != user:
			return false, fmt.Errorf("%w: an admin may only step down itself", history.ErrForbidden)
		case !c.IsAdmin(user):
			return false, nil
		}
		if err := tx.SetAdmin(ctx, chatID, user, 0); err != nil {
			return false, err
		}
		return true, tx.KeepAdmin(ctx, chatID, now(), user)
	})
}
