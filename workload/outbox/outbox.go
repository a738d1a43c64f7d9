package outbox

import (
	"context"
	"errors"
	"time"

	"github.com/tetra-messenger/tetra/workload/history"
)

// ErrUnavailable wraps every failure to reach the backing store. Nothing was
// deleted when DeleteBelow returns it.
var ErrUnavailable = errors.New("outbox: log unavailable")

// Row is one delivery instruction: Recipient still needs Message.
type Row struct {
	Partition int32
	// Pos is the row's position in its partition (SQL id or Kafka offset).
	Pos       int64
	Recipient string
	Message   history.Message
	// CreatedAt is when the row was appended (commit time for SQL).
	CreatedAt time.Time
}

// Committed is one message durably committed to history, with the outbox
// rows written for it: what the accept pipeline (after its group commit,
// through FromResults) and the Kafka relay (after its transaction) hand to
// live delivery's fast path (delivery.Engine.Handoff).
type Committed struct {
	Message history.Message
	// Rows are the message's outbox rows, one per chat member (the
	// sender's included, for its other devices).
	Rows []history.Delivery
}

// FromResults keeps, of a group commit's results, the messages committed
// now with outbox rows (not errors, duplicates, or Kafka-mode commits,
// whose rows the relay writes later).
func FromResults(results []history.Result) []Committed {
	out := make([]Committed, 0, len(results))
	for i := range results {
		r := &results[i]
		if r.Err != nil || r.Duplicate || len(r.Deliveries) == 0 {
			continue
		}
		out = append(out, Committed{Message: r.Message, Rows: r.Deliveries})
	}
	return out
}

// Stats describes one partition.
type Stats struct {
	Partition int32 `json:"partition"`
	// Depth is the number of rows present.
	Depth int64 `json:"depth"`
	// Head is the position of the newest row ever appended (-1 or 0 when
	// none, see Log.Head); positions never go back, even after deletes.
	Head int64 `json:"head"`
	// OldestAt is the CreatedAt of the oldest row present; zero when empty.
	OldestAt time.Time `json:"oldestAt,omitzero"`
}

// Log is the linear-only outbox. Methods are safe for concurrent use.
type Log interface {
	// Partitions lists the partition numbers, ascending. SQL logs have
	// exactly one, partition 0.
	Partitions(ctx context.Context) ([]int32, error)
	// PartitionOf returns the partition holding recipient's rows.
	PartitionOf(recipient string) int32
	// Head returns the position of the newest committed row of partition,
	// or the value before the first position (0 for SQL, -1 for Kafka)
	// when nothing was ever appended. Every row a later Scan returns has
	// Pos > the Head read before its commit.
	Head(ctx context.Context, partition int32) (int64, error)
	// Scan returns up to limit committed rows of partition with Pos > after,
	// in ascending Pos order. A row committed after a Scan that returned
	// rows beyond it never has a lower Pos than those rows: scanning
	// forward from the last returned Pos skips nothing.
	Scan(ctx context.Context, partition int32, after int64, limit int) ([]Row, error)
	// DeleteBelow deletes every row of partition with Pos < pos (a prefix)
	// and returns how many it deleted.
	DeleteBelow(ctx context.Context, partition int32, pos int64) (int64, error)
	// Stats returns the depth, head and oldest row time of partition.
	Stats(ctx context.Context, partition int32) (Stats, error)
	// ID names this outbox durably: the same value for every process and
	// every restart over the same database or topic, a different one for
	// any other. A shared waterline index (one Redis key prefix) covers
	// exactly one outbox; processes compare IDs to refuse sharing one
	// across two (waterline.Fleet.BindOutbox).
	ID(ctx context.Context) (string, error)
}
