package history

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
	"time"
)

// History settings of a group (PROTOCOL.md §7.6).
const (
	// HistoryShared: a member reads the whole retained history (the
	// default, and what direct chats do).
	HistoryShared = "shared"
	// HistoryMember: a member reads only the messages committed while it
	// was a member, from each add to the following removal.
	HistoryMember = "member"
)

// PageEnd is the Before of the newest page (PROTOCOL.md §7.1 before=end).
const PageEnd = "end"

// Chat list page sizes (PROTOCOL.md §7.2).
const (
	DefaultListLimit = 100
	MaxListLimit     = 1000
)

// GroupSpec is a group to create (ChatAPI.CreateGroupWith).
type GroupSpec struct {
	Creator string
	Title   string
	Members []string
	// History is HistoryShared (also when empty) or HistoryMember; anything
	// else is ErrInvalid.
	History string
}

// PageQuery asks for one history page as User may read it (PROTOCOL.md
// §4, §7.1, §7.6).
type PageQuery struct {
	ChatID string
	// User is the reader: it must be a member (else ErrNotMember), and in a
	// HistoryMember group it sees only the messages of its membership
	// intervals.
	User string
	// Since pages forward: the messages after it, oldest first. Empty,
	// unknown, purged or foreign starts at the beginning (§4).
	Since string
	// Before, when not empty, pages backward: the Limit messages right
	// before it, still returned oldest first; PageEnd or an id that does
	// not resolve means after the newest (§7.1). Since and Before together
	// are ErrInvalid.
	Before string
	// Limit is at least 1 (else ErrInvalid); callers cap it.
	Limit int
}

// Check applies the rules of a PageQuery that need no store.
func (q PageQuery) Check() error {
	switch {
	case q.Limit < 1:
		return fmt.Errorf("%w: page limit %d, want at least 1", ErrInvalid, q.Limit)
	case q.Since != "" && q.Before != "":
		return fmt.Errorf("%w: since and before cannot be used together", ErrInvalid)
	}
	return CheckUser("user id", q.User)
}

// ChatAPI is what the client-facing API of PROTOCOL.md §7 needs from a
// store beyond the calls of §2-§6. Errors wrap the sentinels of this
// package; store failures ErrUnavailable.
type ChatAPI interface {
	// CreateGroupWith creates a group as CreateGroup does, with spec.History
	// (PROTOCOL.md §7.6) and the creator as its first admin (§7.5).
	CreateGroupWith(ctx context.Context, spec GroupSpec) (Chat, error)
	// Messages returns one page as q describes, oldest first, and whether
	// more follow (forward) or older ones exist (backward). A page is one
	// range of the (chat_id, id) index: the newest page of any chat costs
	// the same. An unknown or closed chat is ErrNotFound, a non-member
	// reader ErrNotMember.
	Messages(ctx context.Context, q PageQuery) (msgs []Message, hasMore bool, err error)
	// ChatList returns up to limit of user's chats (1..MaxListLimit, else
	// ErrInvalid) by LastActivity, newest first (ties by chat id,
	// descending), after cursor ("" for the first page; a cursor that
	// does not decode is ErrInvalid), each as ChatFor fills it, and the
	// cursor of the next page ("" when none follow). From one snapshot.
	ChatList(ctx context.Context, user, cursor string, limit int) (chats []Chat, next string, err error)
	// ChatFor returns chatID as user sees it: members, admins, LastRead,
	// Unread, LastMessage and LastActivity (PROTOCOL.md §7.2). An unknown
	// or closed chat is ErrNotFound, a non-member ErrNotMember.
	ChatFor(ctx context.Context, chatID, user string) (Chat, error)
	// Rename sets a group's title (trimmed, CheckGroup's title rule) on
	// behalf of by, who must be an admin (§7.5). Errors: ErrInvalid for bad
	// input or a direct chat, ErrNotFound, ErrNotMember, ErrForbidden.
	//
	// Rename, AddAdmin and RemoveAdmin return the chat after the call and
	// changed: whether it changed anything, decided in the change's own
	// transaction under the chat's lock (a no-op writes nothing and
	// commits nothing). A caller sends §7.5's "updated" only when changed
	// is true; comparing the chat before and after from outside would race
	// a concurrent change of the same chat.
	Rename(ctx context.Context, chatID, by, title string) (chat Chat, changed bool, err error)
	// AddAdmin makes the member user an admin on behalf of the admin by
	// (§7.5); already one is a no-op (changed false). Errors as Rename,
	// plus ErrInvalid when user is not a member.
	AddAdmin(ctx context.Context, chatID, by, user string) (chat Chat, changed bool, err error)
	// RemoveAdmin is user stepping down (by must equal user, else
	// ErrForbidden; not an admin is a no-op, changed false). A group never
	// loses its last admin: when none remain the member who joined
	// earliest becomes one (the one stepping down, when it is alone: a
	// no-op too).
	RemoveAdmin(ctx context.Context, chatID, by, user string) (chat Chat, changed bool, err error)
	// AddMemberChanged is Store.AddMember that also reports whether the
	// call changed anything (false: user was a member already), decided
	// in the change's transaction; the server sends the chat events of
	// PROTOCOL.md §3 only when it did.
	AddMemberChanged(ctx context.Context, chatID, by, user string) (chat Chat, changed bool, err error)
	// RemoveMemberChanged is Store.RemoveMember that also reports whether
	// the call changed anything (false: user was not a member), decided
	// in the change's transaction; the server excludes user from live
	// delivery and sends the chat events only when it did.
	RemoveMemberChanged(ctx context.Context, chatID, by, user string) (chat Chat, cutoff int64, changed bool, err error)
	// Sees reports whether user, a member of chatID, may read its message
	// of Seq seq (PROTOCOL.md §7.6: in a "member" group, only what was
	// committed while user was a member; in a shared one, all). An unknown
	// or closed chat is ErrNotFound, a non-member ErrNotMember. For a read
	// receipt of a message the reader may not see (§2: not_found).
	Sees(ctx context.Context, chatID, user string, seq int64) (bool, error)
	// IsAdmin reports whether user is an admin of the group chatID now (a
	// direct chat has none). An unknown or closed chat is ErrNotFound. For
	// PROTOCOL.md §7.3's "an admin deletes any message".
	IsAdmin(ctx context.Context, chatID, user string) (bool, error)
}

// CheckHistory returns the stored form of a group's history setting:
// HistoryShared for "" (the default), else h when it is a setting, else
// ErrInvalid.
func CheckHistory(h string) (string, error) {
	switch h {
	case "", HistoryShared:
		return HistoryShared, nil
	case HistoryMember:
		return HistoryMember, nil
	}
	return "", fmt.Errorf(`%w: history must be "shared" or "member"`, ErrInvalid)
}

// CheckTitle trims title and applies CheckGroup's title rule.
func CheckTitle(title string) (string, error) {
	title = strings.TrimSpace(title)
	if len(title) > MaxTitleBytes {
		return "", fmt.Errorf("%w: title is longer than %d bytes", ErrInvalid, MaxTitleBytes)
	}
	return title, CheckText("title", title)
}

// CheckAdminChange applies the rules of Rename, AddAdmin and removing
// another member to c as read in the change's transaction: by must be a
// member (ErrNotMember), c a group (ErrInvalid), by an admin (ErrForbidden).
func CheckAdminChange(c Chat, by, what string) error {
	switch {
	case !c.HasMember(by):
		return fmt.Errorf("%w: %q in chat %q", ErrNotMember, by, c.ID)
	case c.Kind != KindGroup:
		return fmt.Errorf("%w: %s: group chats only", ErrInvalid, what)
	case !c.IsAdmin(by):
		return fmt.Errorf("%w: only an admin of the group may %s", ErrForbidden, what)
	}
	return nil
}

// IsAdmin reports whether user is in c.Admins.
func (c Chat) IsAdmin(user string) bool { return slices.Contains(c.Admins, user) }

// Activity is the LastActivity of PROTOCOL.md §7.2 from its parts: the
// latest of the chat's creation, the member's last add and the newest
// visible message's SentAt (zero when there is none).
func Activity(created, joined, newest time.Time) time.Time {
	t := created
	if joined.After(t) {
		t = joined
	}
	if newest.After(t) {
		t = newest
	}
	return t.UTC()
}

// ListKey is a chat's place in a chat list: LastActivity in Unix
// nanoseconds, then the chat id, both descending.
type ListKey struct {
	Activity int64
	ChatID   string
}

// Before reports whether k comes before o in the list (is newer).
func (k ListKey) Before(o ListKey) bool {
	if k.Activity != o.Activity {
		return k.Activity > o.Activity
	}
	return k.ChatID > o.ChatID
}

// EncodeCursor is the opaque cursor that continues a list after k.
func EncodeCursor(k ListKey) string {
	b := binary.BigEndian.AppendUint64(nil, uint64(k.Activity))
	return base64.RawURLEncoding.EncodeToString(append(b, k.ChatID...))
}

// DecodeCursor reads a cursor of EncodeCursor; anything else is ErrInvalid.
func DecodeCursor(s string) (ListKey, error) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil || len(b) < 9 || len(b) > 8+MaxIDBytes {
		return ListKey{}, fmt.Errorf("%w: cursor is not one this server gave", ErrInvalid)
	}
	return ListKey{Activity: int64(binary.BigEndian.Uint64(b[:8])), ChatID: string(b[8:])}, nil
}

// PageList sorts keys newest first and returns the indexes of the up to
// limit keys after cursor (all when cursor is nil) and the cursor of the
// next page, "" when none follow.
func PageList(keys []ListKey, after *ListKey, limit int) (idx []int, next string) {
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		switch {
		case keys[a].Before(keys[b]):
			return -1
		case keys[b].Before(keys[a]):
			return 1
		}
		return 0
	})
	for _, i := range order {
		if after != nil && !after.Before(keys[i]) {
			continue
		}
		if len(idx) == limit {
			return idx, EncodeCursor(keys[idx[len(idx)-1]])
		}
		idx = append(idx, i)
	}
	return idx, ""
}

// Span is a closed membership interval: the Seqs in (From, To].
type Span struct{ From, To int64 }

// Visibility is what a member may read of a chat (PROTOCOL.md §7.6):
// everything (Shared), or the Seqs above Joined and those of Spans.
type Visibility struct {
	Shared bool
	Joined int64
	Spans  []Span
}

// Floor is the Seq below which the member reads nothing: 0 when shared,
// else the start of its first interval. A page's range starts above it,
// so a member added late costs no scan of what came before.
func (v Visibility) Floor() int64 {
	if v.Shared {
		return 0
	}
	f := v.Joined
	for _, s := range v.Spans {
		f = min(f, s.From)
	}
	return f
}

// Sees reports whether a message of Seq seq is visible.
func (v Visibility) Sees(seq int64) bool {
	if v.Shared || seq > v.Joined {
		return true
	}
	for _, s := range v.Spans {
		if seq > s.From && seq <= s.To {
			return true
		}
	}
	return false
}
