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

// AddMember implements history.Store (the package function AddMember).
func (m Methods) AddMember(ctx context.Context, chatID, by, user string) (history.Chat, error) {
	return AddMember(ctx, m.Backend, chatID, by, user)
}

// RemoveMember implements history.Store (the package function
// RemoveMember).
func (m Methods) RemoveMember(ctx context.Context, chatID, by, user string) (history.Chat, int64, error) {
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
func (m Methods) Rename(ctx context.Context, chatID, by, title string) (history.Chat, error) {
	return Rename(ctx, m.Backend, chatID, by, title)
}

// AddAdmin implements history.ChatAPI (the package function AddAdmin).
func (m Methods) AddAdmin(ctx context.Context, chatID, by, user string) (history.Chat, error) {
	return AddAdmin(ctx, m.Backend, chatID, by, user)
}

// RemoveAdmin implements history.ChatAPI (the package function
// RemoveAdmin).
func (m Methods) RemoveAdmin(ctx context.Context, chatID, by, user string) (history.Chat, error) {
	return RemoveAdmin(ctx, m.Backend, chatID, by, user)
}
