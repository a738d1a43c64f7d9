package redis_test

import (
	"testing"

	"github.com/tetra-messenger/tetra/workload/waterline"
	"github.com/tetra-messenger/tetra/workload/waterline/redis"
	"github.com/tetra-messenger/tetra/workload/waterline/waterlinetest"
)

// Two processes' handles on one prefix: one record.
func TestUserPresence(t *testing.T) {
	t.Parallel()
	waterlinetest.RunUserPresence(t, func(t *testing.T) (waterline.UserPresence, waterline.UserPresence) {
		a, cfg := newIndex(t)
		b, _ := newIndex(t, func(c *redis.Config) { c.Prefix, c.Owner = cfg.Prefix, "other-owner" })
		return a.Users(), b.Users()
	})
}
