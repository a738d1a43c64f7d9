package redis_test

import (
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	goredis "github.com/redis/go-redis/v9"

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

// BenchmarkServerCPU measures the Redis server's own CPU per delivered
// message (INFO cpu, so it needs a Redis of its own: point
// TETRA_TEST_REDIS at one, or other clients' work counts too) in the shape
// of one-to-one traffic: a fast-path batch records one send for each of k
// clients with one SentMany, and the ack batcher records their acks with
// one AckMany. The clients have nothing else pending, so every send
// creates its client's pin and every ack removes it, as in a 1:1 chat
// that keeps up. It reports server-µs/msg and Redis commands per message
// (INFO commandstats, the scripts' inner commands included).
func BenchmarkServerCPU(b *testing.B) {
	for _, k := range []int{1, 8, 32} {
		b.Run(fmt.Sprintf("clients=%d", k), func(b *testing.B) {
			ctx := b.Context()
			x, cfg := newIndex(b)
			ids := make([]string, 600)
			for c := range ids {
				ids[c] = fmt.Sprintf("conn-%05d", c)
				if err := x.Connect(ctx, waterline.Client{ID: ids[c], User: "u", Device: "d"}); err != nil {
					b.Fatal(err)
				}
			}
			rdb := goredis.NewClient(mustParseURL(b, cfg.URL))
			defer rdb.Close()
			lease := time.Now().Add(time.Hour)
			sends := make([]waterline.SentBatch, k)
			acks := make([]waterline.AckBatch, k)
			cpu0, calls0 := serverCPU(b, rdb)
			msgs := 0
			for b.Loop() {
				for j := range sends {
					msgs++
					id := fmt.Sprintf("01JMSG%020d", msgs)
					cid := ids[msgs%len(ids)]
					sends[j] = waterline.SentBatch{ClientID: cid, Entries: []waterline.Entry{{MessageID: id, Pos: int64(1_000_000 + msgs)}}}
					acks[j] = waterline.AckBatch{ClientID: cid, MessageIDs: []string{id}}
				}
				for j, err := range x.SentMany(ctx, sends, lease) {
					if err != nil {
						b.Fatalf("SentMany %d: %v", j, err)
					}
				}
				for j, err := range x.AckMany(ctx, acks) {
					if err != nil {
						b.Fatalf("AckMany %d: %v", j, err)
					}
				}
			}
			cpu1, calls1 := serverCPU(b, rdb)
			b.ReportMetric((cpu1-cpu0)*1e6/float64(msgs), "server-µs/msg")
			b.ReportMetric(float64(calls1-calls0)/float64(msgs), "cmds/msg")
		})
	}
}

func mustParseURL(tb testing.TB, url string) *goredis.Options {
	tb.Helper()
	opt, err := goredis.ParseURL(url)
	if err != nil {
		tb.Fatal(err)
	}
	return opt
}

// serverCPU returns the Redis server's CPU seconds (user + system) and
// the number of commands it ran (every command of INFO commandstats).
func serverCPU(tb testing.TB, rdb *goredis.Client) (float64, int64) {
	tb.Helper()
	info, err := rdb.Info(tb.Context(), "cpu", "commandstats").Result()
	if err != nil {
		tb.Fatal(err)
	}
	var cpu float64
	var calls int64
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "used_cpu_sys:"); ok {
			f, _ := strconv.ParseFloat(v, 64)
			cpu += f
		} else if v, ok := strings.CutPrefix(line, "used_cpu_user:"); ok {
			f, _ := strconv.ParseFloat(v, 64)
			cpu += f
		} else if strings.HasPrefix(line, "cmdstat_") {
			if _, rest, ok := strings.Cut(line, "calls="); ok {
				n, _ := strconv.ParseInt(rest[:strings.IndexByte(rest, ',')], 10, 64)
				calls += n
			}
		}
	}
	return cpu, calls
}
