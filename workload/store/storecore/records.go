package storecore

import (
	"time"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/outbox"
)

// AppendRecordRows appends to out the rows of one outbox record, as both
// relational stores keep the outbox (one record per message: SQLite's
// schema 7, PostgreSQL's schema 8): the record id holds len(to) rows, one
// per recipient in order, at positions id-len(to)+1 .. id. It appends
// those above after and not under the line below (the last DeleteBelow
// that fell inside a record), each carrying m and created, in partition
// Partition, until out holds limit rows, and returns out.
func AppendRecordRows(out []outbox.Row, limit int, id int64, to []string, after, below int64, m history.Message, created time.Time) []outbox.Row {
	first := id - int64(len(to)) + 1
	for i, r := range to {
		pos := first + int64(i)
		if pos <= after || pos < below {
			continue
		}
		if len(out) == limit {
			break
		}
		out = append(out, outbox.Row{Partition: Partition, Pos: pos, Recipient: r, Message: m, CreatedAt: created})
	}
	return out
}
