package outboxtest_test

import (
	"context"
	"fmt"
	"hash/fnv"
	"sync"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/outbox"
	"github.com/tetra-messenger/tetra/workload/outbox/outboxtest"
)

// TestMemLog runs the suite against a small in-memory log with three
// partitions, Kafka-style heads (-1 when empty) and Hold support, so the
// suite's multi-partition and out-of-order paths run on every change even
// though the SQLite log has one partition and serializes appends.
func TestMemLog(t *testing.T) {
	outboxtest.Run(t, func(t *testing.T) outboxtest.Harness {
		l := &memLog{}
		for i := range l.parts {
			l.parts[i].head = -1
		}
		return outboxtest.Harness{
			Log:    l,
			Append: l.append,
			Hold: func(ctx context.Context, recipients []string) (func(context.Context) ([]outbox.Row, error), error) {
				// Positions are taken when the transaction commits, as a
				// correct log must behave.
				return func(ctx context.Context) ([]outbox.Row, error) { return l.append(ctx, recipients) }, nil
			},
		}
	})
}

const memParts = 3

type memPart struct {
	rows []outbox.Row
	head int64 // last position assigned, -1 before the first
}

type memLog struct {
	mu    sync.Mutex
	parts [memParts]memPart
}

func (l *memLog) append(ctx context.Context, recipients []string) ([]outbox.Row, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := time.Now()
	msg := history.Message{ID: ulid.Make().String(), ChatID: "c", SenderID: recipients[0], Body: "b", SentAt: now.UTC()}
	out := make([]outbox.Row, 0, len(recipients))
	for _, r := range recipients {
		p := l.PartitionOf(r)
		part := &l.parts[p]
		part.head++
		row := outbox.Row{Partition: p, Pos: part.head, Recipient: r, Message: msg, CreatedAt: now}
		part.rows = append(part.rows, row)
		out = append(out, row)
	}
	return out, nil
}

func (l *memLog) check(p int32) error {
	if p < 0 || p >= memParts {
		return fmt.Errorf("memlog: unknown partition %d", p)
	}
	return nil
}

func (l *memLog) Partitions(context.Context) ([]int32, error) { return []int32{0, 1, 2}, nil }

func (l *memLog) PartitionOf(recipient string) int32 {
	h := fnv.New32a()
	h.Write([]byte(recipient))
	return int32(h.Sum32() % memParts)
}

func (l *memLog) Head(_ context.Context, p int32) (int64, error) {
	if err := l.check(p); err != nil {
		return 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.parts[p].head, nil
}

func (l *memLog) Scan(_ context.Context, p int32, after int64, limit int) ([]outbox.Row, error) {
	if err := l.check(p); err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []outbox.Row
	for _, r := range l.parts[p].rows {
		if r.Pos > after && len(out) < limit {
			out = append(out, r)
		}
	}
	return out, nil
}

func (l *memLog) DeleteBelow(_ context.Context, p int32, pos int64) (int64, error) {
	if err := l.check(p); err != nil {
		return 0, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	rows := l.parts[p].rows
	n := 0
	for n < len(rows) && rows[n].Pos < pos {
		n++
	}
	l.parts[p].rows = rows[n:]
	return int64(n), nil
}

func (l *memLog) Stats(_ context.Context, p int32) (outbox.Stats, error) {
	if err := l.check(p); err != nil {
		return outbox.Stats{}, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	st := outbox.Stats{Partition: p, Depth: int64(len(l.parts[p].rows)), Head: l.parts[p].head}
	if len(l.parts[p].rows) > 0 {
		st.OldestAt = l.parts[p].rows[0].CreatedAt
	}
	return st, nil
}

func (l *memLog) ID(context.Context) (string, error) { return fmt.Sprintf("mem:%p", l), nil }
