package sqlite

import (
	"context"
	"database/sql"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/store/storecore"
)

var _ history.Feed = (*DB)(nil)

// feedQuery reads history forward by id (?1 the last Seq seen, ?2 the
// limit); feedMembersQuery lists the membership intervals, current and
// closed (those that can hold a Seq above ?1), of the chats of the same
// rows. Both run in one read transaction, so they see one snapshot.
const (
	feedRows         = `SELECT ` + messageColumns + ` FROM history AS h WHERE h.id > ?1 ORDER BY h.id LIMIT ?2`
	feedQuery        = feedRows
	feedMembersQuery = `WITH h AS (` + feedRows + `)
		SELECT chat_id, user_id, joined_seq, -1 FROM members WHERE chat_id IN (SELECT chat_id FROM h)
		UNION ALL
		SELECT chat_id, user_id, from_seq, to_seq FROM member_spans
		WHERE chat_id IN (SELECT chat_id FROM h) AND to_seq > ?1`
)

// HistoryAfter returns up to limit messages with Seq above seq, in Seq
// order, each with the members it was committed to (history.Feed,
// history.MembersAt), from one WAL snapshot on
// the read pool: a range read of history's primary key and one keyed read
// of members per chat. Seq is assigned by the single writer in commit
// order, so reading forward from the last Seq returned skips nothing (see
// history.Feed). limit < 1 gives ErrInvalid; store failures wrap
// ErrUnavailable.
func (db *DB) HistoryAfter(ctx context.Context, seq int64, limit int) ([]history.Committed, error) {
	if err := storecore.CheckFeedLimit(limit); err != nil {
		return nil, err
	}
	tx, err := db.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, unavailable("history feed", err)
	}
	defer rollback(tx)
	rows, err := tx.QueryContext(ctx, feedQuery, seq, int64(limit))
	if err != nil {
		return nil, unavailable("history feed", err)
	}
	out := make([]history.Committed, 0, min(limit, 512))
	var m history.Message
	dest, done := storecore.MessageDest(&m) // reused for every row
	for rows.Next() {
		if err := rows.Scan(dest...); err != nil {
			rows.Close()
			return nil, unavailable("history feed", err)
		}
		done()
		out = append(out, history.Committed{Message: m})
	}
	err = rows.Err()
	rows.Close()
	if err != nil {
		return nil, unavailable("history feed", err)
	}
	if len(out) == 0 {
		return out, nil
	}
	mrows, err := tx.QueryContext(ctx, feedMembersQuery, seq, int64(limit))
	if err != nil {
		return nil, unavailable("history feed: members", err)
	}
	defer mrows.Close()
	intervals := map[string][]history.Interval{}
	for mrows.Next() {
		var chat string
		var iv history.Interval
		if err := mrows.Scan(&chat, &iv.User, &iv.From, &iv.To); err != nil {
			return nil, unavailable("history feed: members", err)
		}
		intervals[chat] = append(intervals[chat], iv)
	}
	if err := mrows.Err(); err != nil {
		return nil, unavailable("history feed: members", err)
	}
	for i := range out {
		out[i].Members = history.MembersAt(intervals[out[i].Message.ChatID], out[i].Message.Seq)
	}
	return out, nil
}

// HistoryHead returns the highest history Seq ever assigned (0 when none),
// from the AUTOINCREMENT sequence, so purges do not lower it (history.FeedHead).
func (db *DB) HistoryHead(ctx context.Context) (int64, error) {
	var head int64
	err := db.r.QueryRowContext(ctx, `SELECT COALESCE((SELECT seq FROM sqlite_sequence WHERE name = 'history'), 0)`).Scan(&head)
	if err != nil {
		return 0, unavailable("history head", err)
	}
	return head, nil
}

var _ history.FeedHead = (*DB)(nil)
