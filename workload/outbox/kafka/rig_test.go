package kafka

// Test rig: an SQLite history store writing history only (Kafka mode), a
// Kafka log on a Kafka-protocol broker over TCP (kfake, or TETRA_TEST_KAFKA)
// and relays feeding it, with helpers to commit messages and to read the
// whole topic back under read_committed.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/tetra-messenger/tetra/internal/testenv"
	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/history/historytest"
	"github.com/tetra-messenger/tetra/workload/outbox"
	"github.com/tetra-messenger/tetra/workload/store/sqlite"
)

type rig struct {
	t      testing.TB
	db     *sqlite.DB
	log    *Log
	seeds  []string
	topic  string
	logger *slog.Logger

	mu      sync.Mutex
	chats   map[string]string                // sorted recipients -> chat id
	waiters map[string]chan outbox.Committed // message id -> its handoff
	handed  map[string][]history.Delivery    // message id -> deliveries handed off
	onHand  func(rs []outbox.Committed)      // extra handoff (the engine), when set
}

// newRig opens a store and a log with parts partitions on seeds (a fresh
// kfake cluster when seeds is nil).
func newRig(t testing.TB, seeds []string, parts int32) *rig {
	t.Helper()
	topic := "tetra-test-" + strings.ToLower(ulid.Make().String())
	if seeds == nil {
		seeds, topic = testenv.Kafka(t)
	}
	cfg := sqlite.DefaultConfig(filepath.Join(t.TempDir(), "tetra.db"))
	cfg.Outbox = false
	db, err := sqlite.Open(context.Background(), cfg)
	if err != nil {
		t.Fatalf("sqlite.Open: %v", err)
	}
	t.Cleanup(func() { db.Close() })
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		logger = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
	}
	l, err := Open(ctxFor(t), Config{Brokers: seeds, Topic: topic, Partitions: parts, Logger: logger})
	if err != nil {
		t.Fatalf("kafka.Open: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return &rig{t: t, db: db, log: l, seeds: seeds, topic: topic, logger: logger,
		chats: map[string]string{}, waiters: map[string]chan outbox.Committed{}, handed: map[string][]history.Delivery{}}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

func ctxFor(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// relay builds a relay over the rig (not started) whose handoffs reach
// the rig's waiters; it is stopped when the test ends.
func (r *rig) relay(edit ...func(*RelayConfig)) *Relay {
	r.t.Helper()
	cfg := RelayConfig{Handoff: r.handoff, Interval: 20 * time.Millisecond, RetryMin: 20 * time.Millisecond,
		RetryMax: 500 * time.Millisecond, StandbyInterval: 100 * time.Millisecond, TransactionTimeout: 5 * time.Second}
	for _, e := range edit {
		e(&cfg)
	}
	rl, err := NewRelay(r.log, r.db, cfg)
	if err != nil {
		r.t.Fatalf("NewRelay: %v", err)
	}
	r.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = rl.Stop(ctx)
	})
	return rl
}

func (r *rig) handoff(rs []outbox.Committed) {
	r.mu.Lock()
	for _, res := range rs {
		id := res.Message.ID
		if prev, ok := r.handed[id]; ok {
			r.t.Errorf("message %s handed off twice: %v then %v", id, prev, res.Rows)
		}
		r.handed[id] = res.Rows
		if ch, ok := r.waiters[id]; ok {
			ch <- res
			delete(r.waiters, id)
		}
	}
	on := r.onHand
	r.mu.Unlock()
	if on != nil {
		on(rs)
	}
}

// chatFor returns the group chat of exactly recipients (the first is its
// creator), creating it on first use.
func (r *rig) chatFor(ctx context.Context, recipients []string) (string, error) {
	key := strings.Join(slices.Sorted(slices.Values(recipients)), "\n")
	r.mu.Lock()
	defer r.mu.Unlock()
	if id, ok := r.chats[key]; ok {
		return id, nil
	}
	c, err := r.db.CreateGroup(ctx, recipients[0], "", recipients[1:])
	if err != nil {
		return "", err
	}
	r.chats[key] = c.ID
	return c.ID, nil
}

// commit commits one message from recipients[0] to the chat of
// recipients and returns it (history only: the relay has not seen it).
func (r *rig) commit(ctx context.Context, recipients []string, wait bool) (history.Message, chan outbox.Committed, error) {
	chatID, err := r.chatFor(ctx, recipients)
	if err != nil {
		return history.Message{}, nil, err
	}
	d := historytest.Draft(chatID, recipients[0], ulid.Make().String(), "body "+ulid.Make().String())
	var ch chan outbox.Committed
	if wait {
		ch = make(chan outbox.Committed, 1)
		r.mu.Lock()
		r.waiters[d.ID] = ch
		r.mu.Unlock()
	}
	res, err := r.db.Commit(ctx, []history.Draft{d})
	if err == nil && res[0].Err != nil {
		err = res[0].Err
	}
	if err != nil {
		r.mu.Lock()
		delete(r.waiters, d.ID)
		r.mu.Unlock()
		return history.Message{}, nil, err
	}
	return res[0].Message, ch, nil
}

// mustCommit commits n messages to the chat of recipients.
func (r *rig) mustCommit(n int, recipients ...string) []history.Message {
	r.t.Helper()
	var out []history.Message
	for range n {
		m, _, err := r.commit(ctxFor(r.t), recipients, false)
		if err != nil {
			r.t.Fatalf("commit: %v", err)
		}
		out = append(out, m)
	}
	return out
}

// appendVia commits a message and waits until rl relayed it and its rows
// are visible to Scan: the conformance suite's Append.
func (r *rig) appendVia(rl *Relay) func(ctx context.Context, recipients []string) ([]outbox.Row, error) {
	return func(ctx context.Context, recipients []string) ([]outbox.Row, error) {
		msg, ch, err := r.commit(ctx, recipients, true)
		if err != nil {
			return nil, err
		}
		rl.Wake()
		var res outbox.Committed
		select {
		case res = <-ch:
		case <-ctx.Done():
			return nil, fmt.Errorf("message %s not relayed: %w", msg.ID, ctx.Err())
		}
		rows := make([]outbox.Row, len(res.Rows))
		for i, d := range res.Rows {
			rows[i] = outbox.Row{Partition: d.Partition, Pos: d.Pos, Recipient: d.Recipient, Message: res.Message}
			// The commit returned; its markers may reach the partition a
			// moment later on a real cluster.
			for {
				h, err := r.log.Head(ctx, d.Partition)
				if err != nil {
					return nil, err
				}
				if h >= d.Pos {
					break
				}
				if err := sleep(ctx, 5*time.Millisecond); err != nil {
					return nil, err
				}
			}
		}
		return rows, nil
	}
}

type pair struct{ message, recipient string }

// topicContents reads every partition of the log from its start under
// read_committed and counts each (message, recipient), checking that every
// record sits in its recipient's partition.
func (r *rig) topicContents() map[pair]int {
	r.t.Helper()
	got := map[pair]int{}
	ps, _ := r.log.Partitions(context.Background())
	for _, p := range ps {
		after := int64(-1)
		for {
			rows, err := r.log.Scan(ctxFor(r.t), p, after, 500)
			if err != nil {
				r.t.Fatalf("Scan(%d, %d): %v", p, after, err)
			}
			if len(rows) == 0 {
				break
			}
			for _, row := range rows {
				if want := r.log.PartitionOf(row.Recipient); want != p {
					r.t.Errorf("record for %s in partition %d, PartitionOf says %d", row.Recipient, p, want)
				}
				got[pair{row.Message.ID, row.Recipient}]++
				after = row.Pos
			}
		}
	}
	return got
}

// wantExactlyOnce checks that the topic holds exactly one record per
// (message, member) of msgs (members of the chat of each), and nothing
// else.
func (r *rig) wantExactlyOnce(msgs []history.Message, members map[string][]string) {
	r.t.Helper()
	got := r.topicContents()
	want := 0
	for _, m := range msgs {
		for _, u := range members[m.ChatID] {
			want++
			switch n := got[pair{m.ID, u}]; n {
			case 1:
			case 0:
				r.t.Errorf("message %s (Seq %d) has no record for %s", m.ID, m.Seq, u)
			default:
				r.t.Errorf("message %s (Seq %d) has %d records for %s", m.ID, m.Seq, n, u)
			}
			delete(got, pair{m.ID, u})
		}
	}
	for d, n := range got {
		r.t.Errorf("unexpected record(s) in the topic: %+v x%d", d, n)
	}
	if !r.t.Failed() {
		r.t.Logf("topic holds exactly one record per (message, member): %d records", want)
	}
}

// membersOf maps the chat of every message to its members.
func (r *rig) membersOf(msgs []history.Message) map[string][]string {
	r.t.Helper()
	out := map[string][]string{}
	for _, m := range msgs {
		if _, ok := out[m.ChatID]; ok {
			continue
		}
		c, err := r.db.Chat(ctxFor(r.t), m.ChatID)
		if err != nil {
			r.t.Fatal(err)
		}
		out[m.ChatID] = c.Members
	}
	return out
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t testing.TB, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitCursor waits until rl's committed cursor reaches seq.
func waitCursor(t testing.TB, rl *Relay, seq int64, d time.Duration) {
	t.Helper()
	waitFor(t, fmt.Sprintf("the relay's cursor to reach %d (at %d)", seq, rl.Stats().Cursor), d, func() bool { return rl.Stats().Cursor >= seq })
}
