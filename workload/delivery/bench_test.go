package delivery

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/tetra-messenger/tetra/workload/config"
	"github.com/tetra-messenger/tetra/workload/history"
)

// BenchmarkFanout500 measures live delivery of one message to a group of
// 500 connected members: the fast path's claim, the index's Sent for each
// member and the socket enqueue (ns/op is per message, i.e. per 499 frames).
func BenchmarkFanout500(b *testing.B) {
	r := newRig(b, func(tu *config.Tuning) { tu.MaxPending = 1 << 20 })
	ctx := context.Background()
	members := make([]string, 500)
	for i := range members {
		members[i] = fmt.Sprintf("u%03d", i)
	}
	chat, err := r.db.CreateGroup(ctx, members[0], "big", members[1:])
	if err != nil {
		b.Fatal(err)
	}
	conns := make([]*fakeConn, len(members))
	for i, u := range members {
		conns[i] = newConn(u, "d")
		r.register(conns[i])
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		res, err := r.db.Commit(ctx, []history.Draft{{ID: ulid.Make().String(), ChatID: chat.ID, SenderID: members[0],
			SenderDevice: "d", CorrelationID: fmt.Sprint("k", i), Body: "hello group", SentAt: time.Now().UTC()}})
		if err != nil || res[0].Err != nil {
			b.Fatal(err, res[0].Err)
		}
		b.StartTimer()
		r.e.fastPath.deliver(fastItemsFor(r.e, res))
	}
	b.StopTimer()
	if conns[1].count() == 0 {
		b.Fatal("nothing delivered")
	}
}

// BenchmarkSendAck1to1 measures what live delivery spends on one message
// of a direct chat with the in-process index: the fast path's send to the
// recipient (its record in the index, the enqueue) and the recipient's
// ack (ns/op per message; the commit is outside the timer). With
// deadline=none the index calls get no context deadline
// (waterline.InProcess), with deadline=timer each gets one, as before
// (issue 22): the A/B of that change.
func BenchmarkSendAck1to1(b *testing.B) {
	for _, local := range []bool{true, false} {
		name := "deadline=none"
		if !local {
			name = "deadline=timer"
		}
		b.Run(name, func(b *testing.B) {
			r := newRig(b, nil)
			r.e.local = local
			ctx := context.Background()
			alice, bob := newConn("alice", "d"), newConn("bob", "d")
			r.register(alice)
			mb := r.register(bob)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				id := ulid.Make().String()
				res, err := r.db.Commit(ctx, []history.Draft{{ID: id, ChatID: r.chat.ID, SenderID: "alice",
					SenderDevice: "d", CorrelationID: fmt.Sprint("k", i), Body: "hello", SentAt: time.Now().UTC()}})
				if err != nil || res[0].Err != nil {
					b.Fatal(err, res[0].Err)
				}
				b.StartTimer()
				r.e.fastPath.deliver(fastItemsFor(r.e, res))
				if err := r.e.Ack(ctx, mb, []string{id}); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			if bob.count() == 0 {
				b.Fatal("nothing delivered")
			}
		})
	}
}
