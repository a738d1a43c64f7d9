package historytest

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/tetra-messenger/tetra/workload/history"
)

// fillChat commits n messages to chatID from senders in batches of 500.
func fillChat(b *testing.B, s history.Store, chatID string, senders []string, n int, tag string) {
	b.Helper()
	const batch = 500
	for k := 0; k < n; k += batch {
		drafts := make([]history.Draft, 0, batch)
		for i := k; i < min(k+batch, n); i++ {
			drafts = append(drafts, history.Draft{
				ID: ulid.Make().String(), ChatID: chatID, SenderID: senders[i%len(senders)], SenderDevice: "d",
				CorrelationID: tag + strconv.Itoa(i), Body: "a message of a long history", SentAt: time.Now(),
			})
		}
		res, err := s.Commit(b.Context(), drafts)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
		}
	}
}

// BenchNewestPage measures the newest page (PROTOCOL.md §7.1, before=end,
// limit 100 (a client's first screen) of a chat of messages messages
// (100,000 in docs/benchmarks.md), as a member reads it; history is
// "shared", or "member" with the reader added halfway. Use a store
// without outbox rows: the setup, not the call, would be the benchmark.
func BenchNewestPage(b *testing.B, s history.Store, messages int, mode string) {
	b.Helper()
	ctx := b.Context()
	g, err := s.CreateGroupWith(ctx, history.GroupSpec{Creator: "alice", Title: "long", Members: []string{"bob"}, History: mode})
	if err != nil {
		b.Fatal(err)
	}
	fillChat(b, s, g.ID, []string{"alice", "bob"}, messages/2, "a")
	if _, err := s.AddMember(ctx, g.ID, "alice", "carol"); err != nil {
		b.Fatal(err)
	}
	fillChat(b, s, g.ID, []string{"alice", "bob"}, messages-messages/2, "b")
	b.ResetTimer()
	for b.Loop() {
		msgs, more, err := s.Messages(ctx, history.PageQuery{ChatID: g.ID, User: "carol", Before: history.PageEnd, Limit: 100})
		if err != nil || len(msgs) != 100 || !more {
			b.Fatalf("newest page: %d messages, more %v, %v", len(msgs), more, err)
		}
	}
}

// BenchChatList measures the first page (limit 100, the default) of the
// chat list (PROTOCOL.md §7.2) of a user in chats chats (1,000 in
// docs/benchmarks.md), half groups of three and half direct chats, each
// with perChat messages and a read marker on its first.
func BenchChatList(b *testing.B, s history.Store, chats, perChat, limit int) {
	b.Helper()
	ctx := b.Context()
	ids := make([]string, 0, chats)
	for i := range chats {
		var c history.Chat
		var err error
		if i%2 == 0 {
			c, err = s.CreateGroup(ctx, "me", fmt.Sprintf("group %d", i), []string{fmt.Sprintf("p%04d", i), "x"})
		} else {
			c, _, err = s.CreateDirect(ctx, "me", fmt.Sprintf("p%04d", i))
		}
		if err != nil {
			b.Fatal(err)
		}
		ids = append(ids, c.ID)
	}
	var reads []history.Read
	for round := range perChat {
		drafts := make([]history.Draft, 0, chats)
		for i, id := range ids {
			drafts = append(drafts, history.Draft{
				ID: ulid.Make().String(), ChatID: id, SenderID: fmt.Sprintf("p%04d", i), SenderDevice: "d",
				CorrelationID: fmt.Sprintf("%d-%d", round, i), Body: "the latest news", SentAt: time.Now(),
			})
		}
		res, err := s.Commit(ctx, drafts)
		if err != nil {
			b.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				b.Fatal(r.Err)
			}
			if round == 0 {
				reads = append(reads, history.Read{ChatID: r.Message.ChatID, UserID: "me", MessageID: r.Message.ID, Seq: r.Message.Seq, At: time.Now()})
			}
		}
	}
	if err := s.SaveReads(ctx, reads); err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for b.Loop() {
		list, next, err := s.ChatList(ctx, "me", "", limit)
		if err != nil || len(list) != min(limit, chats) || (next == "") != (limit >= chats) || list[0].LastMessage == nil {
			b.Fatalf("chat list: %d chats, next %q, %v", len(list), next, err)
		}
	}
}
