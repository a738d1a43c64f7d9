package redis_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/waterline"
	"github.com/tetra-messenger/tetra/workload/waterline/redis"
)

// TakeOver: a process that proved its predecessor under the same owner name
// dead takes the liveness record at once (Acquire then succeeds); the
// replaced holder, were it alive, gets ErrOwnerTaken. A free record, or one
// this process holds already, is left alone.
func TestTakeOver(t *testing.T) {
	ctx := t.Context()
	old, cfg := newIndex(t, func(c *redis.Config) { c.Owner = "pod-1" })
	if held, err := old.Acquire(ctx, time.Minute); err != nil || !held {
		t.Fatalf("Acquire: %v %v", held, err)
	}
	next, err := redis.New(context.Background(), cfg) // the same owner name, a new process
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	if held, err := next.Acquire(ctx, time.Minute); err != nil || held {
		t.Fatalf("Acquire of a held record = %v, %v; want false", held, err)
	}
	if took, err := next.TakeOver(ctx); err != nil || !took {
		t.Fatalf("TakeOver = %v, %v; want true", took, err)
	}
	if took, err := next.TakeOver(ctx); err != nil || took {
		t.Errorf("TakeOver of its own record = %v, %v; want false", took, err)
	}
	if held, err := next.Acquire(ctx, time.Minute); err != nil || !held {
		t.Errorf("Acquire after TakeOver = %v, %v; want true", held, err)
	}
	if _, err := old.Heartbeat(ctx, time.Minute); !errors.Is(err, waterline.ErrOwnerTaken) {
		t.Errorf("the replaced holder's heartbeat: %v, want ErrOwnerTaken", err)
	}
	// A free record: nothing to take over.
	if err := next.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if took, err := old.TakeOver(ctx); err != nil || took {
		t.Errorf("TakeOver of a free record = %v, %v; want false", took, err)
	}
}
