package waterlinetest

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetra-messenger/tetra/workload/waterline"
)

// testConcurrent runs workers that send, re-send, acknowledge out of order,
// withdraw and reconnect their own clients, while readers call SafeLine,
// Expired and Stats. Each worker keeps its clients' pending sets on its own;
// at the end the index must agree with them exactly: the line of each
// partition is the independently computed minimum, and Expired returns
// exactly the union of the sets. Throughout, a floor client pins partition 0
// below every worker position, so every concurrent SafeLine(0) must return
// exactly the floor: a pin missed or invented mid-update would show.
func testConcurrent(h *harness) {
	const (
		workers   = 8
		perWorker = 8
		rounds    = 120
		floorPos  = 500
	)
	ctx := h.ctx
	lease := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	far := lease.Add(time.Hour)
	h.connect("floor")
	h.wantSent("floor", lease, 1, ent("floor", 0, floorPos))

	var next atomic.Int64
	next.Store(1000)
	type result struct {
		live    bool
		pending map[string]waterline.Entry
	}
	results := make([][]result, workers)

	done := make(chan struct{})
	var readers sync.WaitGroup
	for r := range 2 {
		readers.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				if line, ok, err := h.ix.SafeLine(ctx, 0, h.identity); err != nil || !ok || line != floorPos {
					h.t.Errorf("concurrent SafeLine(0) = %d, %v, %v; want %d, true", line, ok, err, floorPos)
					return
				}
				if _, _, err := h.ix.SafeLine(ctx, 1, h.identity); err != nil {
					h.t.Errorf("concurrent SafeLine(1): %v", err)
					return
				}
				if r == 0 && i%4 == 0 {
					ps, err := h.ix.Expired(ctx, far, 50)
					if err != nil || len(ps) > 50 {
						h.t.Errorf("concurrent Expired: %d entries, %v", len(ps), err)
						return
					}
				}
				if r == 1 && i%4 == 0 {
					if _, err := h.ix.Stats(ctx); err != nil {
						h.t.Errorf("concurrent Stats: %v", err)
						return
					}
				}
			}
		})
	}

	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			res := make([]result, perWorker)
			results[w] = res
			ids := make([]string, perWorker)
			for i := range ids {
				ids[i] = fmt.Sprintf("w%d-c%d", w, i)
				res[i] = result{live: true, pending: map[string]waterline.Entry{}}
				if err := h.ix.Connect(ctx, waterline.Client{ID: ids[i]}); err != nil {
					h.t.Errorf("Connect: %v", err)
					return
				}
			}
			seq := 0
			for round := range rounds {
				for i, id := range ids {
					set := res[i].pending
					if round == rounds/2 && i%5 == 0 {
						// Withdraw mid-run and come back with an empty set.
						if _, err := h.ix.Withdraw(ctx, id); err != nil {
							h.t.Errorf("Withdraw: %v", err)
							return
						}
						clear(set)
						if err := h.ix.Connect(ctx, waterline.Client{ID: id}); err != nil {
							h.t.Errorf("Connect: %v", err)
							return
						}
					}
					es := make([]waterline.Entry, 1+rng.IntN(4))
					for j := range es {
						seq++
						pos := next.Add(1)
						es[j] = ent(fmt.Sprintf("%s-m%d", id, seq), int32(pos%2), pos)
						set[es[j].MessageID] = es[j]
					}
					if len(set) > 1 && rng.IntN(4) == 0 {
						for _, e := range set { // re-send one pending entry
							es = append(es, e)
							break
						}
					}
					n, err := h.ix.Sent(ctx, id, es, lease)
					if err != nil || n != len(set) {
						h.t.Errorf("Sent(%s) = %d, %v; want %d", id, n, err, len(set))
						return
					}
					var acks []string
					for mid := range set {
						if rng.IntN(10) < 6 {
							acks = append(acks, mid)
						}
					}
					rng.Shuffle(len(acks), func(a, b int) { acks[a], acks[b] = acks[b], acks[a] })
					for _, mid := range acks {
						delete(set, mid)
					}
					if n, err := h.ix.Ack(ctx, id, acks); err != nil || n != len(set) {
						h.t.Errorf("Ack(%s) = %d, %v; want %d", id, n, err, len(set))
						return
					}
				}
			}
			for i, id := range ids {
				if i%7 == 3 {
					if ok, err := h.ix.Withdraw(ctx, id); err != nil || !ok {
						h.t.Errorf("Withdraw(%s) = %v, %v", id, ok, err)
						return
					}
					res[i].live = false
				}
			}
		})
	}
	wg.Wait()
	close(done)
	readers.Wait()
	if h.t.Failed() {
		return
	}
	h.wantAck("floor", 0, "floor")

	// The expected state, computed from the workers' own records.
	var want []string
	lines := map[int32]int64{}
	clients := 1 // the floor client, still registered
	for _, res := range results {
		for _, r := range res {
			if !r.live {
				continue
			}
			clients++
			for _, e := range r.pending {
				want = append(want, e.MessageID)
				if l, ok := lines[e.Partition]; !ok || e.Pos < l {
					lines[e.Partition] = e.Pos
				}
			}
		}
	}
	for p := range int32(2) {
		if l, ok := lines[p]; ok {
			h.wantLine(p, l)
		} else {
			h.wantNoLine(p)
		}
	}
	h.wantStats(waterline.Stats{Clients: clients, Pending: len(want)})
	var got []string
	for _, p := range h.expired(far, len(want)+10) {
		got = append(got, p.MessageID)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		h.t.Fatalf("Expired after the run: %d entries, want %d", len(got), len(want))
	}
	h.t.Logf("final: %d clients, %d pending, lines %v", clients, len(want), lines)
}
