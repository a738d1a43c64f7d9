package memory_test

import (
	"testing"

	"github.com/tetra-messenger/tetra/workload/waterline"
	"github.com/tetra-messenger/tetra/workload/waterline/memory"
	"github.com/tetra-messenger/tetra/workload/waterline/waterlinetest"
)

func TestUserPresence(t *testing.T) {
	t.Parallel()
	waterlinetest.RunUserPresence(t, func(t *testing.T) (waterline.UserPresence, waterline.UserPresence) {
		p := memory.NewPresence()
		return p, p
	})
}
