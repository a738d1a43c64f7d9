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

// BenchmarkPollerPass3000 measures a poller pass after one message the
// fast path delivered whole, with 3,000 other connections registered: the
// pass must not visit them (the poller's floor; docs/benchmarks.md,
// twelfth pass). ns/op is per pass, the fast path's delivery included,
// the commit not.
func BenchmarkPollerPass3000(b *testing.B) {
	r := newRig(b, nil)
	ctx := context.Background()
	for i := 0; i < 3000; i++ {
		r.register(newConn(fmt.Sprintf("idle%04d", i), "d"))
	}
	bob := newConn("bob", "phone")
	m := r.register(bob)
	r.handoff(r.commit(1))
	r.e.PollOnce(ctx) // the scan's first read; coverage passes the rest
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		b.StopTimer()
		res := r.commit(1)
		b.StartTimer()
		r.handoff(res)
		r.e.PollOnce(ctx)
		b.StopTimer()
		if err := r.e.Ack(ctx, m, []string{res[0].Message.ID}); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	if st := r.e.Stats(); st.PollDeliveries != 0 || st.ScanSkipped == 0 {
		b.Fatalf("the poller sent %d messages and passed %d rows; the fast path should have delivered every one and the poller passed them", st.PollDeliveries, st.ScanSkipped)
	}
}
