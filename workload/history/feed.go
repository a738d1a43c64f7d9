package history

import (
	"context"
	"slices"
)

// Feed reads committed history forward in sequence order. It is what a
// relay follows to feed an outbox log kept outside the relational store
// (Kafka): history stays the truth, and the relay's durable cursor is the
// last Seq it relayed. It is separate from Store because only the stores
// that can back a relay implement it (store/sqlite and store/postgres do);
// callers discover it with a type assertion.
type Feed interface {
	// HistoryAfter returns up to limit committed messages with Seq > seq,
	// in ascending Seq order, each with the member list of its chat. All
	// of them are read from one snapshot. limit < 1 is ErrInvalid; every
	// other error wraps ErrUnavailable.
	//
	// Ordering: the store assigns Seq in commit order (SQLite's single
	// writer; PostgreSQL's append lock, taken by every Commit whether or
	// not it writes outbox rows), so a message committed after a call that
	// returned messages beyond it never has a lower Seq than those:
	// reading forward from the last Seq returned skips nothing. Seq may
	// have gaps (rolled-back transactions, purged history).
	//
	// Members are those the message was committed to: the members whose
	// current membership interval holds its Seq (added before it:
	// joined_seq < Seq) and those removed since whose closed interval
	// holds it (PROTOCOL.md §7.6: a message committed while a member was
	// removed is never pushed to them after they are added again, however
	// far the relay lags). MembersAt computes them.
	HistoryAfter(ctx context.Context, seq int64, limit int) ([]Committed, error)
}

// Committed is one message of a Feed with the members it was committed to
// (user ids, sorted ascending, the sender included; see Feed).
type Committed struct {
	Message Message
	Members []string
}

// FeedHead is implemented by stores whose Feed can report the highest Seq
// ever assigned (it survives purges). A relay compares its durable cursor
// with it: a cursor beyond it means the log was fed from another history
// store (a restored backup, a new database on an old topic), and relaying
// from it would silently skip every new message.
type FeedHead interface {
	HistoryHead(ctx context.Context) (int64, error)
}

// Interval is one membership interval of a user in a chat: the messages
// with From < Seq <= To (To < 0: open, the current membership, which
// holds every Seq above From).
type Interval struct {
	User     string
	From, To int64
}

// MembersAt returns the users whose interval holds seq, sorted ascending
// and without repeats: the members a message of that Seq was committed to
// (Feed). intervals may list a user more than once (a closed interval and
// the current one).
func MembersAt(intervals []Interval, seq int64) []string {
	out := make([]string, 0, len(intervals))
	for _, iv := range intervals {
		if iv.From < seq && (iv.To < 0 || seq <= iv.To) {
			out = append(out, iv.User)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
