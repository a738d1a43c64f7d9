package memory

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/waterline"
)

// check verifies the structural invariants: both heaps ordered, every slot
// index right, every pending entry in exactly the heaps it belongs to, and
// the counters equal to what the shards hold.
func (x *Index) check() error {
	for si := range x.shards {
		s := &x.shards[si]
		s.mu.RLock()
		err := s.check()
		s.mu.RUnlock()
		if err != nil {
			return fmt.Errorf("shard %d: %w", si, err)
		}
	}
	return nil
}

func (s *shard) check() error {
	for i, e := range s.leases {
		if e.leaseIdx != i {
			return fmt.Errorf("lease slot %d holds leaseIdx %d", i, e.leaseIdx)
		}
		if i > 0 && leaseLess(e, s.leases[(i-1)/2]) {
			return fmt.Errorf("lease heap out of order at %d", i)
		}
		if s.clients[e.c.info.ID] != e.c || e.c.pending[e.id] != e {
			return fmt.Errorf("lease heap holds %s/%s, not pending", e.c.info.ID, e.id)
		}
	}
	if len(s.clients) != len(s.list) {
		return fmt.Errorf("%d clients, %d listed", len(s.clients), len(s.list))
	}
	n := 0
	for i, cl := range s.list {
		if cl.listIdx != i || s.clients[cl.info.ID] != cl {
			return fmt.Errorf("list slot %d wrong", i)
		}
		inPins := 0
		for _, pp := range cl.parts {
			for j, e := range pp.pins {
				if e.pinIdx != j || e.part != pp.part || cl.pending[e.id] != e {
					return fmt.Errorf("client %s partition %d pin slot %d wrong", cl.info.ID, pp.part, j)
				}
				if j > 0 && e.pos < pp.pins[(j-1)/2].pos {
					return fmt.Errorf("client %s pin heap out of order", cl.info.ID)
				}
			}
			inPins += len(pp.pins)
		}
		if inPins != len(cl.pending) {
			return fmt.Errorf("client %s: %d pending, %d in pin heaps", cl.info.ID, len(cl.pending), inPins)
		}
		for _, e := range cl.pending {
			if e.leaseIdx >= len(s.leases) || s.leases[e.leaseIdx] != e {
				return fmt.Errorf("client %s entry %s missing from the lease heap", cl.info.ID, e.id)
			}
		}
		n += len(cl.pending)
	}
	if n != s.pending || n != len(s.leases) {
		return fmt.Errorf("pending %d, counter %d, lease heap %d", n, s.pending, len(s.leases))
	}
	return nil
}

// TestInvariantsUnderRandomOps drives the index with random operations and
// checks the structure after every withdrawal and every 25th operation.
func TestInvariantsUnderRandomOps(t *testing.T) {
	ctx := t.Context()
	x := New()
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	ids := make([]string, 100)
	for i := range ids {
		ids[i] = fmt.Sprintf("c%d", i)
	}
	for i := range 10_000 {
		// Skewed: low ids get most traffic, so a shard mixes large and small
		// sets and Withdraw takes both of its paths.
		c := ids[min(rng.IntN(len(ids)), rng.IntN(len(ids)))]
		switch r := rng.IntN(100); {
		case r < 5:
			_ = x.Connect(ctx, waterline.Client{ID: c})
		case r < 7:
			_, _ = x.Withdraw(ctx, c)
			if err := x.check(); err != nil {
				t.Fatalf("op %d, withdraw: %v", i, err)
			}
		case r < 55:
			es := make([]waterline.Entry, 1+rng.IntN(20))
			for j := range es {
				k := rng.IntN(400)
				es[j] = waterline.Entry{MessageID: fmt.Sprint(k), Partition: int32(k % 3), Pos: int64(rng.IntN(1000))}
			}
			_, _ = x.Sent(ctx, c, es, base.Add(time.Duration(rng.IntN(100))*time.Millisecond))
		case r < 95:
			ms := make([]string, 1+rng.IntN(20))
			for j := range ms {
				ms[j] = fmt.Sprint(rng.IntN(400))
			}
			_, _ = x.Ack(ctx, c, ms)
		default:
			_ = x.Restore(ctx, c, []waterline.Pending{{Entry: waterline.Entry{MessageID: fmt.Sprint(rng.IntN(400)), Pos: int64(rng.IntN(1000))}, Attempts: rng.IntN(3)}})
		}
		if i%25 == 0 {
			if err := x.check(); err != nil {
				t.Fatalf("op %d: %v", i, err)
			}
		}
	}
	if err := x.check(); err != nil {
		t.Fatal(err)
	}
}
