package sqlite

import (
	"testing"

	"github.com/tetra-messenger/tetra/workload/history/historytest"
)

func TestFeedConformance(t *testing.T) {
	t.Parallel()
	historytest.RunFeed(t, func(t *testing.T) historytest.FeedStore {
		return newDB(t, func(c *Config) { c.Outbox = false })
	})
}
