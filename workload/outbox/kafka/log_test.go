package kafka

import (
	"context"
	"errors"
	"testing"

	"github.com/tetra-messenger/tetra/internal/testenv"
	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/outbox"
	"github.com/tetra-messenger/tetra/workload/outbox/outboxtest"
)

// TestLogConformance runs the outbox suite unchanged on a Kafka topic with
// three partitions on a three-broker cluster, every row appended the way
// production appends: committed to history, then relayed in a Kafka
// transaction. Hold is nil: one relay serializes the transactions.
func TestLogConformance(t *testing.T) {
	t.Parallel()
	seeds, _ := testenv.Kafka(t) // one cluster, a topic per subtest
	outboxtest.Run(t, func(t *testing.T) outboxtest.Harness {
		r := newRig(t, seeds, 3)
		rl := r.relay()
		rl.Start()
		return outboxtest.Harness{Log: r.log, Append: r.appendVia(rl)}
	})
}

func TestParseURL(t *testing.T) {
	t.Parallel()
	good := []struct {
		in   string
		want Config
	}{
		{"kafka://k1:9092/outbox", Config{Brokers: []string{"k1:9092"}, Topic: "outbox"}},
		{"kafka://k1:9092,k2:9093/tetra.outbox-1?partitions=16&replication=3",
			Config{Brokers: []string{"k1:9092", "k2:9093"}, Topic: "tetra.outbox-1", Partitions: 16, ReplicationFactor: 3}},
		{"kafka://[::1]:9092/o?cursor-topic=c&transactional-id=tx",
			Config{Brokers: []string{"[::1]:9092"}, Topic: "o", CursorTopic: "c", TransactionalID: "tx"}},
	}
	for _, tc := range good {
		got, err := ParseURL(tc.in)
		if err != nil {
			t.Errorf("ParseURL(%q): %v", tc.in, err)
			continue
		}
		if got.URL() != tc.want.URL() {
			t.Errorf("ParseURL(%q) = %s, want %s", tc.in, got.URL(), tc.want.URL())
		}
		if back, err := ParseURL(got.URL()); err != nil || back.URL() != got.URL() {
			t.Errorf("round trip of %q: %v, %v", tc.in, back.URL(), err)
		}
	}
	for _, bad := range []string{
		"", "kafka://", "kafka://k1:9092", "kafka://k1:9092/", "kafka:///topic", "redis://k1:9092/t",
		"kafka://k1/topic", "kafka://k1:9092/bad topic", "kafka://k1:9092/t?partitions=x",
		"kafka://k1:9092/t?partitions=100000", "kafka://k1:9092/t?replication=-2", "kafka://k1:9092/t?what=1",
		"kafka://k1:9092/t?cursor-topic=t",
	} {
		if _, err := ParseURL(bad); err == nil {
			t.Errorf("ParseURL(%q): no error", bad)
		}
	}
}

func TestNewRelayNeedsLogAndFeed(t *testing.T) {
	t.Parallel()
	if _, err := NewRelay(nil, nil, RelayConfig{}); err == nil {
		t.Error("NewRelay(nil log): no error")
	}
	if _, err := NewRelay(&Log{}, nil, RelayConfig{}); err == nil {
		t.Error("NewRelay(nil feed): no error")
	}
}

// TestScanSkipsForeignRecords: a record tetra did not write (someone else
// produced to the topic) is skipped and counted, not returned and not an
// error that would stall the poller.
func TestScanSkipsForeignRecords(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil, 1)
	rl := r.relay()
	rl.Start()
	add := r.appendVia(rl)
	ctx := ctxFor(t)
	first, err := add(ctx, []string{"ann"})
	if err != nil {
		t.Fatal(err)
	}
	produceRaw(t, r, 0, []byte("not json"))
	second, err := add(ctx, []string{"ann"})
	if err != nil {
		t.Fatal(err)
	}
	rows, err := r.log.Scan(ctx, 0, -1, 10)
	if err != nil || len(rows) != 2 || rows[0].Pos != first[0].Pos || rows[1].Pos != second[0].Pos {
		t.Fatalf("Scan = %+v, %v; want the two tetra rows", rows, err)
	}
	if r.log.Skipped() != 1 {
		t.Errorf("Skipped = %d, want 1", r.log.Skipped())
	}
}

// TestHistoryFeedErrorsAreRetried: a failing history read is a relay
// failure like any other; nothing is written and the relay retries.
func TestHistoryFeedErrorsAreRetried(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil, 2)
	f := &flakyFeed{Feed: r.db, fail: 3}
	rl, err := NewRelay(r.log, f, RelayConfig{RetryMin: 10e6, Interval: 20e6})
	if err != nil {
		t.Fatal(err)
	}
	msgs := r.mustCommit(3, "fa", "fb")
	rl.Start()
	defer rl.Stop(context.Background())
	waitCursor(t, rl, msgs[2].Seq, 30e9)
	if st := rl.Stats(); st.Failures < 3 {
		t.Errorf("Failures = %d, want at least 3", st.Failures)
	}
	r.wantExactlyOnce(msgs, r.membersOf(msgs))
}

type flakyFeed struct {
	history.Feed
	fail int
}

func (f *flakyFeed) HistoryAfter(ctx context.Context, seq int64, limit int) ([]history.Committed, error) {
	if f.fail > 0 {
		f.fail--
		return nil, errors.New("history: store unavailable (test)")
	}
	return f.Feed.HistoryAfter(ctx, seq, limit)
}

var _ outbox.Log = (*Log)(nil)
