package postgres

import (
	"testing"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/history/historytest"
)

// BenchmarkNewestPage: GET messages?before=end&limit=100 of a
// 100,000-message chat (PROTOCOL.md §7.1; docs/benchmarks.md).
func BenchmarkNewestPage(b *testing.B) {
	for _, mode := range []string{history.HistoryShared, history.HistoryMember} {
		b.Run(mode, func(b *testing.B) {
			historytest.BenchNewestPage(b, newDB(b, func(c *Config) { c.Outbox = false }), 100_000, mode)
		})
	}
}

// BenchmarkChatList: GET /api/chats (first page of 100, and all 1,000 in
// one page) of a user in 1,000 chats (PROTOCOL.md §7.2; docs/benchmarks.md).
func BenchmarkChatList(b *testing.B) {
	for _, limit := range []int{100, 1000} {
		b.Run("limit="+map[int]string{100: "100", 1000: "1000"}[limit], func(b *testing.B) {
			historytest.BenchChatList(b, newDB(b, func(c *Config) { c.Outbox = false }), 1000, 3, limit)
		})
	}
}
