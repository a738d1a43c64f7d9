package memory_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/waterline"
	"github.com/tetra-messenger/tetra/workload/waterline/memory"
)

// loaded returns an index with clients clients of perClient pending entries
// each on partition 0, leases spread one millisecond apart from base in
// round-robin order over the clients, and the client ids.
func loaded(tb testing.TB, clients, perClient int, base time.Time) (*memory.Index, []string) {
	tb.Helper()
	ctx := tb.Context()
	x := memory.New()
	ids := make([]string, clients)
	for c := range ids {
		ids[c] = fmt.Sprintf("conn-%05d", c)
		if err := x.Connect(ctx, waterline.Client{ID: ids[c], User: "u", Device: "d"}); err != nil {
			tb.Fatal(err)
		}
	}
	pos := int64(0)
	for k := range perClient {
		for c, id := range ids {
			pos++
			e := waterline.Entry{MessageID: fmt.Sprintf("bg-%d", pos), Pos: pos}
			lease := base.Add(time.Duration(k*clients+c) * time.Millisecond)
			if _, err := x.Sent(ctx, id, []waterline.Entry{e}, lease); err != nil {
				tb.Fatal(err)
			}
		}
	}
	return x, ids
}

// BenchmarkSentAck measures one send and one acknowledgement of a single
// entry, against 5,000 clients with 20 pending entries each.
func BenchmarkSentAck(b *testing.B) {
	ctx := b.Context()
	base := time.Now()
	x, ids := loaded(b, 5000, 20, base)
	msgIDs := make([]string, 4096)
	for i := range msgIDs {
		msgIDs[i] = fmt.Sprintf("msg-%d", i)
	}
	lease := base.Add(time.Hour)
	es := make([]waterline.Entry, 1)
	acks := make([]string, 1)
	i := 0
	for b.Loop() {
		id := ids[i%len(ids)]
		es[0] = waterline.Entry{MessageID: msgIDs[i%len(msgIDs)], Pos: int64(1_000_000 + i)}
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

// BenchmarkSentAckParallel is BenchmarkSentAck from GOMAXPROCS goroutines,
// each on its own clients: the sharded locks at work.
func BenchmarkSentAckParallel(b *testing.B) {
	ctx := b.Context()
	base := time.Now()
	x, ids := loaded(b, 5000, 20, base)
	msgIDs := make([]string, 4096)
	for i := range msgIDs {
		msgIDs[i] = fmt.Sprintf("msg-%d", i)
	}
	lease := base.Add(time.Hour)
	var worker atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		w := int(worker.Add(1))
		es := make([]waterline.Entry, 1)
		acks := make([]string, 1)
		for i := 0; pb.Next(); i++ {
			id := ids[(w*997+i)%len(ids)]
			es[0] = waterline.Entry{MessageID: msgIDs[i%len(msgIDs)], Pos: int64(1_000_000 + i)}
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

// BenchmarkSafeLine5000Clients measures one SafeLine over 5,000 clients with
// 20 pending entries each.
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

// BenchmarkExpired measures one poll over 5,000 clients with 20 pending
// entries each (100,000 entries), with nothing, 100 or 6,000 (the poller's
// batch size) entries due.
func BenchmarkExpired(b *testing.B) {
	ctx := b.Context()
	base := time.Now()
	x, _ := loaded(b, 5000, 20, base)
	for _, tc := range []struct {
		name  string
		now   time.Time
		limit int
	}{
		{"none-due", base.Add(-time.Millisecond), 6000},
		{"100-due", base.Add(99 * time.Millisecond), 6000},
		{"limit-100-of-all", base.Add(time.Hour), 100},
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
