package history

import "context"

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
	// Members are read at the time of the call, not at the message's
	// commit: members added since are included (they may read the message
	// in history anyway), members removed since are not (they may not). A
	// message committed after a removal never lists the removed member;
	// a relay that lags by milliseconds sees the commit-time list in
	// practice.
	HistoryAfter(ctx context.Context, seq int64, limit int) ([]Committed, error)
}

// Committed is one message of a Feed with its chat's members (user ids,
// sorted ascending, the sender included).
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
