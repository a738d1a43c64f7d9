package storecore

import (
	"context"

	"github.com/tetra-messenger/tetra/workload/history"
)

// Methods are the methods of history.Store and history.ChatAPI whose
// algorithm is this package's, on one Backend. A store embeds it, so its
// *DB has them as its own.
type Methods struct {
	Backend Backend
}

// CreateGroup implements history.Store: CreateGroupWith with shared
// history.
func (m Methods) CreateGroup(ctx context.Context, creator, title string, members []string) (history.Chat, error) {
	return m.CreateGroupWith(ctx, history.GroupSpec{Creator: creator, Title: title, Members: members})
}

// CreateGroupWith implements history.ChatAPI: a group chat of spec.Creator
// plus spec.Members, duplicates removed, members sorted, the creator its
// admin (PROTOCOL.md §7.5) and spec.History its history setting (§7.6),
// written by Backend.InsertGroup. The title is trimmed of surrounding
// white space and may be empty. Invalid user ids, a title over
// history.MaxTitleBytes, not UTF-8 or containing NUL (history.CheckText),
// more than history.MaxGroupMembers members and an unknown history
// setting give ErrInvalid (NewGroup).
func (m Methods) CreateGroupWith(ctx context.Context, spec history.GroupSpec) (history.Chat, error) {
	c, err := NewGroup(spec)
	if err != nil {
		return history.Chat{}, err
	}
	if err := m.Backend.InsertGroup(ctx, c); err != nil {
		return history.Chat{}, err
	}
	return c, nil
}

// AddMember implements history.Store (the package function AddMember).
func (m Methods) AddMember(ctx context.Context, chatID, by, user string) (history.Chat, error) {
	c, _, err := AddMember(ctx, m.Backend, chatID, by, user)
	return c, err
}

// AddMemberChanged implements history.ChatAPI (the package function
// AddMember).
func (m Methods) AddMemberChanged(ctx context.Context, chatID, by, user string) (history.Chat, bool, error) {
	return AddMember(ctx, m.Backend, chatID, by, user)
}

// RemoveMember implements history.Store (the package function
// RemoveMember).
func (m Methods) RemoveMember(ctx context.Context, chatID, by, user string) (history.Chat, int64, error) {
	c, cutoff, _, err := RemoveMember(ctx, m.Backend, chatID, by, user)
	return c, cutoff, err
}

// RemoveMemberChanged implements history.ChatAPI (the package function
// RemoveMember).
func (m Methods) RemoveMemberChanged(ctx context.Context, chatID, by, user string) (history.Chat, int64, bool, error) {
	return RemoveMember(ctx, m.Backend, chatID, by, user)
}

// Messages implements history.ChatAPI (the package function Messages).
func (m Methods) Messages(ctx context.Context, q history.PageQuery) ([]history.Message, bool, error) {
	return Messages(ctx, m.Backend, q)
}

// ChatFor implements history.ChatAPI (the package function ChatFor).
func (m Methods) ChatFor(ctx context.Context, chatID, user string) (history.Chat, error) {
	return ChatFor(ctx, m.Backend, chatID, user)
}

// ChatList implements history.ChatAPI (the package function ChatList).
func (m Methods) ChatList(ctx context.Context, user, cursor string, limit int) ([]history.Chat, string, error) {
	return ChatList(ctx, m.Backend, user, cursor, limit)
}

// Rename implements history.ChatAPI (the package function Rename).
func (m Methods) Rename(ctx context.Context, chatID, by, title string) (history.Chat, bool, error) {
	return Rename(ctx, m.Backend, chatID, by, title)
}

// Sees implements history.ChatAPI (the package function Sees).
func (m Methods) Sees(ctx context.Context, chatID, user string, seq int64) (bool, error) {
	return Sees(ctx, m.Backend, chatID, user, seq)
}

// AddAdmin implements history.ChatAPI (the package function AddAdmin).
func (m Methods) AddAdmin(ctx context.Context, chatID, by, user string) (history.Chat, bool, error) {
	return AddAdmin(ctx, m.Backend, chatID, by, user)
}

// RemoveAdmin implements history.ChatAPI (the package function
// RemoveAdmin).
func (m Methods) RemoveAdmin(ctx context.Context, chatID, by, user string) (history.Chat, bool, error) {
	return RemoveAdmin(ctx, m.Backend, chatID, by, user)
}
