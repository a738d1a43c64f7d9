package historytest

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/tetra-messenger/tetra/workload/history"
)

// BenchChatsOfBigGroup measures ChatsOf for one member of a group of 1,000
// members with messages of history (100,000 in the measurement),
// every member holding a read marker (so LastRead has 1,000 entries). The
// reader's own marker sits behind lag messages by others: lag above
// history.MaxUnread shows the capped count, a small lag the common case.
// Use a store without outbox rows (Config.Outbox off): 1,000 rows per
// message would make the setup, not the call, the benchmark. It reports
// the unread count it got as "unread".
func BenchChatsOfBigGroup(b *testing.B, s history.Store, messages, lag int) {
	b.Helper()
	ctx := b.Context()
	const members = 1000
	others := make([]string, 0, members-1)
	for i := 1; i < members; i++ {
		others = append(others, fmt.Sprintf("u%04d", i))
	}
	g, err := s.CreateGroup(ctx, "u0000", "big", others)
	if err != nil {
		b.Fatal(err)
	}
	var ids []string
	var seqs []int64
	const batch = 500
	for k := 0; k < messages; k += batch {
		drafts := make([]history.Draft, 0, batch)
		for i := k; i < min(k+batch, messages); i++ {
			drafts = append(drafts, history.Draft{
				ID: ulid.Make().String(), ChatID: g.ID, SenderID: others[i%100], SenderDevice: "d",
				CorrelationID: strconv.Itoa(i), Body: "a message of a long history", SentAt: time.Now(),
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
			ids = append(ids, r.Message.ID)
			seqs = append(seqs, r.Message.Seq)
		}
	}
	reads := make([]history.Read, 0, members)
	for i, u := range append([]string{"u0000"}, others...) {
		at := (i * 7919) % messages
		if u == "u0000" {
			at = messages - 1 - lag
		}
		reads = append(reads, history.Read{ChatID: g.ID, UserID: u, MessageID: ids[at], Seq: seqs[at], At: time.Now()})
	}
	if err := s.SaveReads(ctx, reads); err != nil {
		b.Fatal(err)
	}
	unread := 0
	b.ResetTimer()
	for b.Loop() {
		chats, err := s.ChatsOf(ctx, "u0000")
		if err != nil {
			b.Fatal(err)
		}
		if len(chats) != 1 || len(chats[0].LastRead) != members || len(chats[0].Members) != members {
			b.Fatalf("ChatsOf = %d chats, %d read markers", len(chats), len(chats[0].LastRead))
		}
		unread = chats[0].Unread
	}
	b.ReportMetric(float64(unread), "unread")
}
