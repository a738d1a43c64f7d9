package postgres

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/tetra-messenger/tetra/workload/history"
)

// BenchmarkCommit measures the group commit as the accept pipeline drives
// it: batches of 36 messages (the paper's persist batch), each to a direct
// chat of two members, so every message writes one history row and two
// outbox rows. It reports msgs/s. The messages of a batch go to 100 chats in
// turn (index inserts land on many pages, as under real traffic), or all to
// one chat (best-case locality). committers=1 is one committer waiting for
// each transaction; committers=4 runs four at once (several ingest stages or
// processes on one database), which the append lock serializes for the
// write round trip only.
func BenchmarkCommit(b *testing.B) {
	for _, bc := range []struct{ chats, committers int }{{100, 1}, {1, 1}, {100, 4}} {
		b.Run(fmt.Sprintf("chats=%d/committers=%d", bc.chats, bc.committers), func(b *testing.B) {
			benchmarkCommit(b, 36, bc.chats, bc.committers)
		})
	}
}

func benchmarkCommit(b *testing.B, batch, chats, committers int) {
	db := newDB(b, func(c *Config) { c.MaxConns = int32(committers + 1) })
	ctx := b.Context()
	ids := make([]string, chats)
	for i := range ids {
		c, _, err := db.CreateDirect(ctx, fmt.Sprintf("u%03d", i), fmt.Sprintf("v%03d", i))
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = c.ID
	}
	var n atomic.Int64
	commitOne := func() {
		drafts := make([]history.Draft, batch)
		for i := range drafts {
			k := n.Add(1)
			c := int(k) % chats
			drafts[i] = history.Draft{
				ID:            ulid.Make().String(),
				ChatID:        ids[c],
				SenderID:      fmt.Sprintf("u%03d", c),
				SenderDevice:  "d",
				CorrelationID: strconv.FormatInt(k, 10),
				Body:          "hello, this is a message of about sixty bytes of text....",
				SentAt:        time.Now(),
			}
		}
		res, err := db.Commit(ctx, drafts)
		if err != nil {
			b.Error(err)
			return
		}
		if res[0].Err != nil || len(res[0].Deliveries) != 2 {
			b.Errorf("result %+v", res[0])
		}
	}
	b.ResetTimer()
	start := time.Now()
	if committers == 1 {
		for b.Loop() {
			commitOne()
		}
	} else {
		var next atomic.Int64
		var wg sync.WaitGroup
		for range committers {
			wg.Go(func() {
				for next.Add(1) <= int64(b.N) {
					commitOne()
				}
			})
		}
		wg.Wait()
	}
	b.ReportMetric(float64(n.Load())/time.Since(start).Seconds(), "msgs/s")
}
