package redis_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/internal/testenv"
	"github.com/tetra-messenger/tetra/workload/waterline"
	"github.com/tetra-messenger/tetra/workload/waterline/redis"
)

// loaded returns an index on the test Redis (skipped loudly without one)
// with clients clients of perClient pending entries each on partition 0,
// leases one millisecond apart from base, and the client ids. It mirrors
// the memory package's benchmarks, so the numbers compare.
func loaded(b *testing.B, clients, perClient int, base time.Time) (*redis.Index, []string) {
	b.Helper()
	ctx := b.Context()
	x, _ := newIndex(b)
	ids := make([]string, clients)
	pos := int64(0)
	for c := range ids {
		ids[c] = fmt.Sprintf("conn-%05d", c)
		if err := x.Connect(ctx, waterline.Client{ID: ids[c], User: "u", Device: "d"}); err != nil {
			b.Fatal(err)
		}
		es := make([]waterline.Entry, perClient)
		for k := range es {
			pos++
			es[k] = waterline.Entry{MessageID: fmt.Sprintf("bg-%d", pos), Pos: pos}
		}
		if _, err := x.Sent(ctx, ids[c], es, base.Add(time.Duration(c)*time.Millisecond)); err != nil {
			b.Fatal(err)
		}
	}
	return x, ids
}

// BenchmarkSentAck measures one Sent and one Ack of a single entry (two
// round trips), against 5,000 clients with 20 pending entries each.
func BenchmarkSentAck(b *testing.B) {
	ctx := b.Context()
	base := time.Now().Truncate(time.Millisecond)
	x, ids := loaded(b, 5000, 20, base)
	lease := base.Add(time.Hour)
	es := make([]waterline.Entry, 1)
	acks := make([]string, 1)
	i := 0
	for b.Loop() {
		id := ids[i%len(ids)]
		es[0] = waterline.Entry{MessageID: fmt.Sprint("msg-", i), Pos: int64(1_000_000 + i)}
		acks[0] = es[0].MessageID
		if _, err := x.Sent(ctx, id, es, lease); err != nil {
			b.Fatal(err)
		}
		if _, err := x.Ack(ctx, id, acks); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkSentAckBatch64 is BenchmarkSentAck with 64 entries per call (a
// poller batch for one client): still two round trips; per-op time is per
// batch.
func BenchmarkSentAckBatch64(b *testing.B) {
	ctx := b.Context()
	base := time.Now().Truncate(time.Millisecond)
	x, ids := loaded(b, 5000, 20, base)
	lease := base.Add(time.Hour)
	es := make([]waterline.Entry, 64)
	acks := make([]string, 64)
	i := 0
	for b.Loop() {
		id := ids[i%len(ids)]
		for k := range es {
			es[k] = waterline.Entry{MessageID: fmt.Sprint("msg-", i, "-", k), Pos: int64(1_000_000 + i*64 + k)}
			acks[k] = es[k].MessageID
		}
		if _, err := x.Sent(ctx, id, es, lease); err != nil {
			b.Fatal(err)
		}
		if _, err := x.Ack(ctx, id, acks); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkSentAckParallel is BenchmarkSentAck from 16 goroutines per CPU
// (32 here: the engine's delivery concurrency), each on its own clients.
func BenchmarkSentAckParallel(b *testing.B) {
	ctx := b.Context()
	base := time.Now().Truncate(time.Millisecond)
	x, ids := loaded(b, 5000, 20, base)
	lease := base.Add(time.Hour)
	var worker atomic.Int64
	b.SetParallelism(16) // × GOMAXPROCS goroutines
	b.ResetTimer()       // RunParallel, unlike b.Loop, does not exclude the setup
	b.RunParallel(func(pb *testing.PB) {
		w := int(worker.Add(1))
		es := make([]waterline.Entry, 1)
		acks := make([]string, 1)
		for i := 0; pb.Next(); i++ {
			id := ids[(w*997+i)%len(ids)]
			es[0] = waterline.Entry{MessageID: fmt.Sprint("msg-", w, "-", i), Pos: int64(1_000_000 + i)}
			acks[0] = es[0].MessageID
			if _, err := x.Sent(ctx, id, es, lease); err != nil {
				b.Fatal(err)
			}
			if _, err := x.Ack(ctx, id, acks); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkSafeLine5000Clients: one SafeLine over 5,000 clients; O(log n)
// on the server whatever the number of clients.
func BenchmarkSafeLine5000Clients(b *testing.B) {
	ctx := b.Context()
	x, _ := loaded(b, 5000, 20, time.Now())
	id := primed(b, x)
	for b.Loop() {
		if _, ok, err := x.SafeLine(ctx, 0, id); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}

// BenchmarkExpired: one poll over 100,000 pending entries with nothing,
// 100 or 6,000 (the poller's batch) due.
func BenchmarkExpired(b *testing.B) {
	ctx := b.Context()
	base := time.Now().Truncate(time.Millisecond)
	x, _ := loaded(b, 5000, 20, base)
	for _, tc := range []struct {
		name  string
		now   time.Time
		limit int
	}{
		{"none-due", base.Add(-time.Millisecond), 6000},
		{"100-due", base.Add(4 * time.Millisecond), 6000}, // 5 clients × 20
		{"limit-6000-of-all", base.Add(time.Hour), 6000},
	} {
		b.Run(tc.name, func(b *testing.B) {
			for b.Loop() {
				if _, err := x.Expired(ctx, tc.now, tc.limit); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkSent64Clients records one entry for each of 64 clients, as a
// fast-path batch of 64 one-to-one messages does: one Sent per client (64
// round trips) against one SentMany (one pipelined round trip). Per-op
// time is per 64 clients; it reports CPU per client (this process's: the
// go-redis side, not the Redis server's).
func BenchmarkSent64Clients(b *testing.B) {
	for _, many := range []bool{false, true} {
		b.Run(map[bool]string{false: "Sent", true: "SentMany"}[many], func(b *testing.B) {
			ctx := b.Context()
			base := time.Now().Truncate(time.Millisecond)
			x, ids := loaded(b, 5000, 20, base)
			lease := base.Add(time.Hour)
			batches := make([]waterline.SentBatch, 64)
			i := 0
			cpu := testenv.CPUPer(b, "client")
			for b.Loop() {
				for k := range batches {
					batches[k] = waterline.SentBatch{ClientID: ids[(i*64+k)%len(ids)],
						Entries: []waterline.Entry{{MessageID: fmt.Sprint("msg-", i, "-", k), Pos: int64(1_000_000 + i*64 + k)}}}
				}
				if many {
					for k, err := range x.SentMany(ctx, batches, lease) {
						if err != nil {
							b.Fatalf("batch %d: %v", k, err)
						}
					}
				} else {
					for _, bt := range batches {
						if _, err := x.Sent(ctx, bt.ClientID, bt.Entries, lease); err != nil {
							b.Fatal(err)
						}
					}
				}
				i++
			}
			cpu(i * 64)
		})
	}
}
