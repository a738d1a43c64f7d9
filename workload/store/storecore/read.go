package storecore

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/tetra-messenger/tetra/workload/history"
)

// ReadTx is one read-only transaction on one snapshot, for the reads of
// PROTOCOL.md §7. Errors other than those named wrap
// history.ErrUnavailable.
type ReadTx interface {
	// Memberships lists the open chats of member user (all, or only chatID
	// when it is not ""), each with what the list and the visibility need.
	// A backend may read the closed intervals with them (Vis.Spans);
	// else Spans does.
	Memberships(ctx context.Context, user, chatID string) ([]Membership, error)
	// Spans completes vis with user's closed intervals of chatID when
	// Memberships did not (it is called for "member" groups only).
	Spans(ctx context.Context, chatID, user string, vis *history.Visibility) error
	// ChatOpen reports whether chatID exists and is not closed.
	ChatOpen(ctx context.Context, chatID string) (bool, error)
	// Page reads up to limit messages of m's chat that user may see (m.Vis),
	// above m.Vis.Floor(): forward, oldest first, after the message cursor
	// (from the floor when cursor does not resolve within the chat);
	// backward, newest first, before it (from the newest message when it
	// does not resolve).
	Page(ctx context.Context, m Membership, user, cursor string, backward bool, limit int) ([]history.Message, error)
	// Fill reads, for the chats of f as user sees them, the members, admins
	// and read markers (Fill.Member, one call a member) and the unread
	// count and last message (Fill.Last, one call a chat).
	Fill(ctx context.Context, f *Fill, user string) error
	// Rollback ends the transaction.
	Rollback()
}

// Membership is what the reading member's row says about one chat.
type Membership struct {
	Chat      history.Chat // kind, title, creator, creation, history
	JoinedAt  int64        // Unix nanoseconds
	JoinedSeq int64
	Mark      int64 // the member's read marker's Seq, 0 for none
	Newest    int64 // SentAt of the newest message of the current interval (or chat), 0 for none
	Vis       history.Visibility
}

// NewMembership is the Membership of a row: the chat's creation time and
// the member's join time and newest message in Unix nanoseconds, its
// visibility from the chat's history setting and joinedSeq.
func NewMembership(c history.Chat, created, joinedAt, joinedSeq, mark, newest int64) Membership {
	c.CreatedAt = FromNanos(created)
	return Membership{Chat: c, JoinedAt: joinedAt, JoinedSeq: joinedSeq, Mark: mark, Newest: newest,
		Vis: history.Visibility{Shared: c.History != history.HistoryMember, Joined: joinedSeq}}
}

// Activity is m's LastActivity (PROTOCOL.md §7.2).
func (m Membership) Activity() time.Time {
	var newest time.Time
	if m.Newest != 0 {
		newest = FromNanos(m.Newest)
	}
	return history.Activity(m.Chat.CreatedAt, FromNanos(m.JoinedAt), newest)
}

// member reads user's membership of chatID with its intervals:
// ErrNotFound for an unknown or closed chat, ErrNotMember for a
// non-member.
func member(ctx context.Context, tx ReadTx, chatID, user string) (Membership, error) {
	if !Storable(chatID) {
		return Membership{}, notFound(chatID)
	}
	ms, err := tx.Memberships(ctx, user, chatID)
	if err != nil {
		return Membership{}, err
	}
	if len(ms) == 1 {
		m := ms[0]
		if !m.Vis.Shared {
			if err := tx.Spans(ctx, chatID, user, &m.Vis); err != nil {
				return Membership{}, err
			}
		}
		return m, nil
	}
	open, err := tx.ChatOpen(ctx, chatID)
	if err != nil {
		return Membership{}, err
	}
	if !open {
		return Membership{}, notFound(chatID)
	}
	return Membership{}, fmt.Errorf("%w: %q in chat %q", history.ErrNotMember, user, chatID)
}

// Messages implements history.ChatAPI.Messages on b: one page of q.ChatID
// as q.User may read it (PROTOCOL.md §4, §7.1, §7.6), from one snapshot.
// Forward pages start above Since (or the beginning); backward pages end
// below Before, or after the newest message when Before is
// history.PageEnd or does not resolve, and are returned oldest first.
func Messages(ctx context.Context, b Backend, q history.PageQuery) ([]history.Message, bool, error) {
	if err := q.Check(); err != nil {
		return nil, false, err
	}
	tx, err := b.Read(ctx, "page")
	if err != nil {
		return nil, false, err
	}
	defer tx.Rollback()
	m, err := member(ctx, tx, q.ChatID, q.User)
	if err != nil {
		return nil, false, err
	}
	cursor, backward := q.Since, false
	if q.Before != "" {
		cursor, backward = q.Before, true
	}
	if !Storable(cursor) {
		cursor = "" // no message: the beginning, or the end
	}
	// One row beyond the page tells whether more follow.
	msgs, err := tx.Page(ctx, m, q.User, cursor, backward, q.Limit+1)
	if err != nil {
		return nil, false, err
	}
	more := len(msgs) > q.Limit
	if more {
		msgs = msgs[:q.Limit]
	}
	if backward {
		slices.Reverse(msgs)
	}
	if msgs == nil {
		msgs = []history.Message{}
	}
	return msgs, more, nil
}

// ChatFor implements history.ChatAPI.ChatFor on b, on one snapshot.
func ChatFor(ctx context.Context, b Backend, chatID, user string) (history.Chat, error) {
	if err := ValidUser("user id", user); err != nil {
		return history.Chat{}, err
	}
	tx, err := b.Read(ctx, "chat")
	if err != nil {
		return history.Chat{}, err
	}
	defer tx.Rollback()
	m, err := member(ctx, tx, chatID, user)
	if err != nil {
		return history.Chat{}, err
	}
	chats, err := fill(ctx, tx, []Membership{m}, user)
	if err != nil {
		return history.Chat{}, err
	}
	return chats[0], nil
}

// Sees implements history.ChatAPI.Sees on b: user's membership of chatID
// with its intervals (history.Visibility), on one snapshot.
func Sees(ctx context.Context, b Backend, chatID, user string, seq int64) (bool, error) {
	if err := ValidUser("user id", user); err != nil {
		return false, err
	}
	tx, err := b.Read(ctx, "sees")
	if err != nil {
		return false, err
	}
	defer tx.Rollback()
	m, err := member(ctx, tx, chatID, user)
	if err != nil {
		return false, err
	}
	return m.Vis.Sees(seq), nil
}

// ChatList implements history.ChatAPI.ChatList on b: every chat of user is
// read with its activity (ReadTx.Memberships), the keys sorted in memory
// (history.PageList), and only the page's chats are filled. On one
// snapshot.
func ChatList(ctx context.Context, b Backend, user, cursor string, limit int) ([]history.Chat, string, error) {
	if err := ValidUser("user id", user); err != nil {
		return nil, "", err
	}
	if limit < 1 || limit > history.MaxListLimit {
		return nil, "", fmt.Errorf("%w: list limit %d, want 1..%d", history.ErrInvalid, limit, history.MaxListLimit)
	}
	var after *history.ListKey
	if cursor != "" {
		k, err := history.DecodeCursor(cursor)
		if err != nil {
			return nil, "", err
		}
		after = &k
	}
	tx, err := b.Read(ctx, "chat list")
	if err != nil {
		return nil, "", err
	}
	defer tx.Rollback()
	ms, err := tx.Memberships(ctx, user, "")
	if err != nil {
		return nil, "", err
	}
	keys := make([]history.ListKey, len(ms))
	for i, m := range ms {
		keys[i] = history.ListKey{Activity: Nanos(m.Activity()), ChatID: m.Chat.ID}
	}
	idx, next := history.PageList(keys, after, limit)
	pageMs := make([]Membership, len(idx))
	for j, i := range idx {
		pageMs[j] = ms[i]
		if !ms[i].Vis.Shared {
			if err := tx.Spans(ctx, ms[i].Chat.ID, user, &pageMs[j].Vis); err != nil {
				return nil, "", err
			}
		}
	}
	chats, err := fill(ctx, tx, pageMs, user)
	if err != nil {
		return nil, "", err
	}
	return chats, next, nil
}

// fill completes the chats of ms as user sees them (ReadTx.Fill).
func fill(ctx context.Context, tx ReadTx, ms []Membership, user string) ([]history.Chat, error) {
	f := NewFill(ms)
	if len(ms) == 0 {
		return f.chats, nil
	}
	if err := tx.Fill(ctx, f, user); err != nil {
		return nil, err
	}
	return f.done(), nil
}

// Fill collects the chats of a page of memberships as their reader sees
// them: the backend's ReadTx.Fill reads the rows and hands them to Member
// and Last.
type Fill struct {
	ms     []Membership
	chats  []history.Chat
	index  map[string]int
	admins [][]Admin
}

// Admin is a member, User, who is an admin since At (Unix nanoseconds).
type Admin struct {
	User string
	At   int64
}

// NewFill starts the chats of ms: as their rows say, with their activity,
// no members, admins or read markers yet.
func NewFill(ms []Membership) *Fill {
	f := &Fill{ms: ms, chats: make([]history.Chat, len(ms)), index: make(map[string]int, len(ms)),
		admins: make([][]Admin, len(ms))}
	for i, m := range ms {
		f.chats[i] = m.Chat
		f.chats[i].LastRead = map[string]string{}
		f.chats[i].Members, f.chats[i].Admins = []string{}, []string{}
		f.chats[i].LastActivity = m.Activity()
		f.index[m.Chat.ID] = i
	}
	return f
}

// FillParams are the per-chat inputs of a fill's unread and last-message
// read, in step: the chat, the Seq the unread count starts after (the
// reader's marker, at least the floor), the floor (history.Visibility.Floor),
// whether history is shared and the Seq the current interval starts after.
type FillParams struct {
	IDs    []string
	Marks  []int64
	Floors []int64
	Shared []bool
	Joined []int64
}

// Params returns the inputs of the unread and last-message read.
func (f *Fill) Params() FillParams {
	n := len(f.ms)
	p := FillParams{IDs: make([]string, n), Marks: make([]int64, n), Floors: make([]int64, n),
		Shared: make([]bool, n), Joined: make([]int64, n)}
	for i, m := range f.ms {
		p.IDs[i] = m.Chat.ID
		p.Floors[i] = m.Vis.Floor()
		p.Marks[i] = max(m.Mark, p.Floors[i])
		p.Shared[i] = m.Vis.Shared
		p.Joined[i] = m.Vis.Joined
	}
	return p
}

// Member records that user is a member of chatID (rows in user order),
// an admin since adminAt (Unix nanoseconds; 0 for not an admin), its read
// marker read (nil for none).
func (f *Fill) Member(chatID, user string, adminAt int64, read *string) {
	i, ok := f.index[chatID]
	if !ok {
		return
	}
	f.chats[i].Members = append(f.chats[i].Members, user)
	if read != nil {
		f.chats[i].LastRead[user] = *read
	}
	if adminAt > 0 {
		f.admins[i] = append(f.admins[i], Admin{user, adminAt})
	}
}

// Last records chatID's unread count and its last visible message, nil
// for none: an ordinary message (kind 0) whose edited_at (Unix
// nanoseconds, 0 for never) and deleted columns give its current body,
// EditedAt after an edit, or its tombstone after a delete (§7.3).
func (f *Fill) Last(chatID string, unread int, last *history.Message, editedAt int64, deleted bool) {
	i, ok := f.index[chatID]
	if !ok {
		return
	}
	f.chats[i].Unread = unread
	if last != nil {
		last.ChatID = chatID
		SetKind(last, history.KindMessage, "", editedAt, deleted)
		f.chats[i].LastMessage = last
	}
}

// done returns the chats, each's admins in the order they became admins,
// then by id.
func (f *Fill) done() []history.Chat {
	for i := range f.chats {
		f.chats[i].Admins = AdminOrder(f.admins[i])
	}
	return f.chats
}

// AdminOrder lists admins in the order they became admins, then by id.
func AdminOrder(admins []Admin) []string {
	slices.SortFunc(admins, func(a, b Admin) int {
		if a.At != b.At {
			return cmp.Compare(a.At, b.At)
		}
		return cmp.Compare(a.User, b.User)
	})
	out := make([]string, len(admins))
	for i, a := range admins {
		out[i] = a.User
	}
	return out
}
