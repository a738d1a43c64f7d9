package sqlite

import (
	"context"
	"database/sql"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/store/storecore"
)

var _ history.Feed = (*DB)(nil)

// feedQuery reads history forward by id (?1 the last Seq seen, ?2 the
// limit); feedMembersQuery lists the members of the chats of the same
// rows. Both run in one read transaction, so they see one snapshot.
const (
	feedRows         = `SELECT ` + messageColumns + ` FROM history AS h WHERE h.id > ?1 ORDER BY h.id LIMIT ?2`
	feedQuery        = feedRows
	feedMembersQuery = `WITH h AS (` + feedRows + `)
		SELECT chat_id, user_id FROM members WHERE chat_id IN (SELECT chat_id FROM h) ORDER BY chat_id, user_id`
)

// HistoryAfter returns up to limit messages with Seq above seq, in Seq
// order, each with its chat's members (sorted), from one WAL snapshot on
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
	members := map[string][]string{}
	for mrows.Next() {
		var chat, user string
		if err := mrows.Scan(&chat, &user); err != nil {
			return nil, unavailable("history feed: members", err)
		}
		members[chat] = append(members[chat], user)
	}
	if err := mrows.Err(); err != nil {
		return nil, unavailable("history feed: members", err)
	}
	for i := range out {
		out[i].Members = members[out[i].Message.ChatID]
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
