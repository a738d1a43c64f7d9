package kafka

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tetra-messenger/tetra/internal/testenv"
	"github.com/tetra-messenger/tetra/workload/history"
)

// produceRaw writes value to partition of the rig's topic outside any
// transaction.
func produceRaw(t testing.TB, r *rig, partition int32, value []byte) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := cl.ProduceSync(ctxFor(t), &kgo.Record{Topic: r.topic, Partition: partition, Value: value}).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// highWatermarks sums the high watermarks of the outbox partitions: every
// record written, committed or not.
func highWatermarks(ctx context.Context, r *rig) (int64, error) {
	var sum int64
	for p := range r.log.parts {
		hw, err := r.log.listOffset(ctx, r.topic, p, latest, false)
		if err != nil {
			return 0, err
		}
		sum += hw
	}
	return sum, nil
}

// TestRelayCrashMidTransaction kills the relay after it produced every
// record of its second transaction and the advanced cursor, before the
// commit: the transaction is left open, as a killed process leaves it. A
// new relay with the same transactional id fences it, aborts the open
// transaction, resumes from the committed cursor, and the topic read with
// read_committed holds every (message, member) exactly once.
func TestRelayCrashMidTransaction(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil, 4)
	first := r.mustCommit(5, "ann", "bob", "cat")
	var txn atomic.Int32
	var written int64
	var hwErr error
	// Woken only by the test, so the second transaction holds all of
	// the second batch.
	crashing := r.relay(func(c *RelayConfig) { c.Batch = 5; c.Interval = time.Hour })
	crashing.beforeCommit = func(ctx context.Context) error {
		if txn.Add(1) < 2 {
			return nil
		}
		written, hwErr = highWatermarks(ctx, r)
		return errCrash
	}
	crashing.Start()
	waitCursor(t, crashing, first[4].Seq, 30*time.Second)
	committed, err := highWatermarks(ctxFor(t), r)
	if err != nil {
		t.Fatal(err)
	}
	second := r.mustCommit(5, "ann", "dan")
	crashing.Wake()
	select {
	case <-crashing.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the relay did not crash")
	}
	// The second transaction's 10 records reached the partitions.
	if hwErr != nil {
		t.Fatal(hwErr)
	}
	if written < committed+10 {
		t.Fatalf("the crashed transaction did not write its records (high watermarks %d, then %d)", committed, written)
	}
	// Under read_committed only the first transaction shows.
	r.wantExactlyOnce(first, r.membersOf(first))
	if t.Failed() {
		return
	}

	third := r.mustCommit(3, "bob", "dan")
	restarted := r.relay()
	restarted.Start()
	waitCursor(t, restarted, third[2].Seq, 30*time.Second)
	all := append(append(first, second...), third...)
	r.wantExactlyOnce(all, r.membersOf(all))
}

// TestRelayAbortBeforeCommit: a failure after producing (here injected,
// in production a broker error) aborts the transaction; the relay retries
// from its committed cursor and nothing is doubled.
func TestRelayAbortBeforeCommit(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil, 3)
	msgs := r.mustCommit(4, "ann", "bob")
	var fails atomic.Int32
	rl := r.relay(func(c *RelayConfig) { c.Batch = 2 })
	rl.beforeCommit = func(ctx context.Context) error {
		if fails.Add(1) <= 2 {
			return errors.New("injected failure before commit")
		}
		return nil
	}
	rl.Start()
	waitCursor(t, rl, msgs[3].Seq, 30*time.Second)
	if st := rl.Stats(); st.Failures != 2 || st.Transactions != 2 {
		t.Errorf("stats %+v, want 2 failures and 2 transactions", st)
	}
	r.wantExactlyOnce(msgs, r.membersOf(msgs))
}

// TestRelayZombieIsFenced runs two relays with the same transactional id,
// as two tetra processes on one topic do. The second fences the first,
// which stands by while the second makes progress; when the second stops,
// the first notices that nothing moves and takes over. The topic holds
// every (message, member) exactly once throughout.
func TestRelayZombieIsFenced(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil, 3)
	a := r.relay()
	a.Start()
	m1 := r.mustCommit(3, "ann", "bob")
	waitCursor(t, a, m1[2].Seq, 30*time.Second)

	b := r.relay()
	b.Start()
	waitFor(t, "the second relay to become active", 30*time.Second, func() bool { return b.Stats().Active })
	m2 := r.mustCommit(3, "ann", "bob")
	a.Wake()
	b.Wake()
	waitCursor(t, b, m2[2].Seq, 30*time.Second)
	waitFor(t, "the first relay to be fenced", 30*time.Second, func() bool { return a.Stats().Fenced > 0 })

	if err := b.Stop(ctxFor(t)); err != nil {
		t.Fatal(err)
	}
	m3 := r.mustCommit(2, "ann", "bob")
	waitCursor(t, a, m3[1].Seq, 30*time.Second)
	all := append(append(m1, m2...), m3...)
	r.wantExactlyOnce(all, r.membersOf(all))
}

// TestRelaySurvivesBrokerOutage cuts every connection to the cluster while
// messages are committed: history takes them (the commits succeed), the
// relay fails and retries, and once the cluster is reachable again it
// catches up with every message exactly once and hands each off once.
func TestRelaySurvivesBrokerOutage(t *testing.T) {
	t.Parallel()
	fk := testenv.NewFakeKafka(t)
	r := newRig(t, fk.Seeds(), 4)
	rl := r.relay()
	rl.Start()
	before := r.mustCommit(3, "ann", "bob")
	waitCursor(t, rl, before[2].Seq, 30*time.Second)

	fk.Cut()
	during := r.mustCommit(10, "ann", "bob", "cat")
	rl.Wake()
	waitFor(t, "the relay to notice the outage", 30*time.Second, func() bool { return rl.Stats().Failures > 0 })
	if c := rl.Stats().Cursor; c >= during[0].Seq {
		t.Fatalf("cursor %d moved past %d while the brokers were unreachable", c, during[0].Seq)
	}
	fk.Restore()
	after := r.mustCommit(2, "cat", "dan")
	waitCursor(t, rl, after[1].Seq, 60*time.Second)
	all := append(append(before, during...), after...)
	r.wantExactlyOnce(all, r.membersOf(all))
	r.wantHandedOff(all)
}

// TestRelaySurvivesBrokerRestart restarts the cluster (from its data
// directory, on the same ports) between and during relaying.
func TestRelaySurvivesBrokerRestart(t *testing.T) {
	t.Parallel()
	fk := testenv.NewFakeKafka(t)
	r := newRig(t, fk.Seeds(), 4)
	rl := r.relay()
	rl.Start()
	before := r.mustCommit(4, "ann", "bob")
	waitCursor(t, rl, before[3].Seq, 30*time.Second)

	during := r.mustCommit(5, "ann", "cat")
	rl.Wake()
	fk.Restart()
	after := r.mustCommit(3, "bob", "dan")
	rl.Wake()
	waitCursor(t, rl, after[2].Seq, 60*time.Second)
	all := append(append(before, during...), after...)
	r.wantExactlyOnce(all, r.membersOf(all))
}

// wantHandedOff checks that every message was handed off (the rig's
// handoff fails the test on a second hand-off).
func (r *rig) wantHandedOff(msgs []history.Message) {
	r.t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, m := range msgs {
		if _, ok := r.handed[m.ID]; !ok {
			r.t.Errorf("message %s never handed off", m.ID)
		}
	}
}

// TestRelayStartsFromASeededCursor: a cursor record written outside any
// transaction (docs/kafka.md, switching an existing deployment) is where
// the relay starts.
func TestRelayStartsFromASeededCursor(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil, 2)
	old := r.mustCommit(3, "ann", "bob")
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	seed := &kgo.Record{Topic: r.log.cfg.CursorTopic, Partition: 0, Key: []byte(r.log.cfg.TransactionalID), Value: encodeCursor(old[2].Seq)}
	if err := cl.ProduceSync(ctxFor(t), seed).FirstErr(); err != nil {
		t.Fatal(err)
	}
	rl := r.relay()
	rl.Start()
	fresh := r.mustCommit(2, "ann", "bob")
	rl.Wake()
	waitCursor(t, rl, fresh[1].Seq, 30*time.Second)
	r.wantExactlyOnce(fresh, r.membersOf(fresh))
}

// TestRelayRefusesACursorAheadOfHistory: a topic fed from another history
// store (its cursor is beyond this history's head) would silently skip
// every new message; the relay refuses, says why, and relays nothing.
func TestRelayRefusesACursorAheadOfHistory(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil, 2)
	old := r.mustCommit(2, "ann", "bob")
	cl, err := kgo.NewClient(kgo.SeedBrokers(r.seeds...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ahead := old[1].Seq + 1000
	seed := &kgo.Record{Topic: r.log.cfg.CursorTopic, Partition: 0, Key: []byte(r.log.cfg.TransactionalID), Value: encodeCursor(ahead)}
	if err := cl.ProduceSync(ctxFor(t), seed).FirstErr(); err != nil {
		t.Fatal(err)
	}
	rl := r.relay()
	rl.Start()
	deadline := time.Now().Add(30 * time.Second)
	for rl.Stats().Failures == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the relay ran with a cursor ahead of history")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if st := rl.Stats(); st.Active || st.Records != 0 {
		t.Fatalf("relay stats %+v: it must neither run nor relay", st)
	}
}

// TestRelayCommitRefused: the broker refuses a commit (EndTxn answers an
// error). The relay aborts, hands nothing off, and relays the same messages
// again in a new transaction: each is handed off once (the rig fails the
// test on a second hand-off) and is in the topic once.
func TestRelayCommitRefused(t *testing.T) {
	t.Parallel()
	fk := testenv.NewFakeKafka(t)
	r := newRig(t, fk.Seeds(), 3)
	var refused atomic.Int32
	fk.ControlKey(int16(kmsg.EndTxn), func(req kmsg.Request) (kmsg.Response, error, bool) {
		end := req.(*kmsg.EndTxnRequest)
		if !end.Commit {
			return nil, nil, false
		}
		refused.Add(1)
		resp := end.ResponseKind().(*kmsg.EndTxnResponse)
		resp.ErrorCode = kerr.InvalidTxnState.Code
		return resp, nil, true
	})
	msgs := r.mustCommit(4, "ann", "bob", "cat")
	rl := r.relay()
	rl.Start()
	waitCursor(t, rl, msgs[3].Seq, 30*time.Second)
	if refused.Load() != 1 || rl.Stats().Failures == 0 {
		t.Fatalf("refused %d commits, relay stats %+v; want one refused commit and a failure", refused.Load(), rl.Stats())
	}
	r.wantExactlyOnce(msgs, r.membersOf(msgs))
	r.wantHandedOff(msgs)
}

// TestRelaySplitsLargeBatches: MaxRecords caps a transaction (a message
// with more members than that goes alone), and a capped pass goes on at
// once instead of waiting for the next wake-up.
func TestRelaySplitsLargeBatches(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil, 2)
	msgs := r.mustCommit(4, "ann", "bob")
	msgs = append(msgs, r.mustCommit(1, "ann", "bob", "cat", "dan")...)
	rl := r.relay(func(c *RelayConfig) { c.MaxRecords = 3; c.Interval = time.Hour })
	rl.Start()
	waitCursor(t, rl, msgs[4].Seq, 30*time.Second)
	if st := rl.Stats(); st.Transactions != 5 || st.Records != 12 {
		t.Errorf("stats %+v, want 5 transactions (one message each) and 12 records", st)
	}
	r.wantExactlyOnce(msgs, r.membersOf(msgs))
}
