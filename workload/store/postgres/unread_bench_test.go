package postgres

import (
	"fmt"
	"testing"

	"github.com/tetra-messenger/tetra/workload/history/historytest"
)

// BenchmarkChatsOfBigGroup: GET /api/chats's store call for a member of a
// 1,000-member group with 100,000 messages (docs/benchmarks.md).
func BenchmarkChatsOfBigGroup(b *testing.B) {
	for _, lag := range []int{10, 50_000} {
		b.Run(fmt.Sprintf("lag=%d", lag), func(b *testing.B) {
			historytest.BenchChatsOfBigGroup(b, newDB(b, func(c *Config) { c.Outbox = false }), 100_000, lag)
		})
	}
}
