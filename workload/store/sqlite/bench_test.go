package sqlite

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/tetra-messenger/tetra/internal/testenv"

	"github.com/tetra-messenger/tetra/workload/history"
)

// BenchmarkCommit measures the group commit as the accept pipeline drives
// it: batches of 36 messages (the paper's persist batch), each to a direct
// chat of two members, so every message writes one history row and two
// outbox rows. It reports msgs/s. The messages of a batch go to 100 chats
// in turn (index inserts land on many pages, as under real traffic), or
// all to one chat (best-case locality); synchronous=FULL is what G1 needs.
func BenchmarkCommit(b *testing.B) {
	for _, bc := range []struct {
		sync  string
		chats int
	}{{"FULL", 100}, {"FULL", 1}, {"NORMAL", 100}} {
		b.Run(fmt.Sprintf("synchronous=%s/chats=%d", bc.sync, bc.chats), func(b *testing.B) {
			benchmarkCommit(b, 36, bc.chats, func(c *Config) { c.Synchronous = bc.sync })
		})
	}
}

// BenchmarkCommitBatch is BenchmarkCommit (synchronous=FULL, 100 chats)
// by batch size: what a message costs beyond its batch's fixed part (the
// fsync, the pages every commit writes), which the accept pipeline's
// BatchWait and BatchSize trade against latency.
func BenchmarkCommitBatch(b *testing.B) {
	for _, batch := range []int{12, 24, 36, 72} {
		b.Run(fmt.Sprintf("batch=%d", batch), func(b *testing.B) {
			benchmarkCommit(b, batch, 100, func(c *Config) {})
		})
	}
}

func benchmarkCommit(b *testing.B, batch, chats int, edit func(*Config)) {
	db := newDB(b, edit)
	ctx := b.Context()
	ids := make([]string, chats)
	for i := range ids {
		c, _, err := db.CreateDirect(ctx, fmt.Sprintf("u%03d", i), fmt.Sprintf("v%03d", i))
		if err != nil {
			b.Fatal(err)
		}
		ids[i] = c.ID
	}
	drafts := make([]history.Draft, batch)
	n := 0
	b.ResetTimer()
	start, cpu := time.Now(), testenv.CPUPer(b, "msg")
	for b.Loop() {
		for i := range drafts {
			c := n % chats
			drafts[i] = history.Draft{
				ID:            ulid.Make().String(),
				ChatID:        ids[c],
				SenderID:      fmt.Sprintf("u%03d", c),
				SenderDevice:  "d",
				CorrelationID: strconv.Itoa(n),
				Body:          "hello, this is a message of about sixty bytes of text....",
				SentAt:        time.Now(),
			}
			n++
		}
		res, err := db.Commit(ctx, drafts)
		if err != nil {
			b.Fatal(err)
		}
		if res[0].Err != nil || len(res[0].Deliveries) != 2 {
			b.Fatalf("result %+v", res[0])
		}
	}
	b.ReportMetric(float64(n)/time.Since(start).Seconds(), "msgs/s")
	cpu(n)
}

// BenchmarkOutboxStats measures Stats (the metrics scrape and the admin
// page call it every second) over an outbox of 20,000 records, the depth
// of a one-to-one run at 4,000 msg/s: one row read (outbox_line.depth,
// schema version 8), not a sum over the records.
func BenchmarkOutboxStats(b *testing.B) {
	db := newDB(b)
	ctx := b.Context()
	g, err := db.CreateGroup(ctx, "alice", "g", []string{"bob"})
	if err != nil {
		b.Fatal(err)
	}
	drafts := make([]history.Draft, 200)
	for n := 0; n < 20_000; n += len(drafts) {
		for i := range drafts {
			drafts[i] = history.Draft{ID: ulid.Make().String(), ChatID: g.ID, SenderID: "alice", SenderDevice: "d",
				CorrelationID: strconv.Itoa(n + i), Body: "x", SentAt: time.Now()}
		}
		if _, err := db.Commit(ctx, drafts); err != nil {
			b.Fatal(err)
		}
	}
	for b.Loop() {
		st, err := db.Stats(ctx, 0)
		if err != nil || st.Depth != 40_000 {
			b.Fatalf("Stats = %+v, %v; want depth 40,000", st, err)
		}
	}
}
