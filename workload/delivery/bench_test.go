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
