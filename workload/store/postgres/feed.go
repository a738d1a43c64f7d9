package postgres

import (
	"cmp"
	"context"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/store/storecore"
)

var _ history.Feed = (*DB)(nil)

// feedSQL reads history forward by id ($1 the last Seq seen, $2 the limit)
// and the membership intervals of those rows' chats in one statement, so
// both come from one snapshot: kind 0 rows are messages, kind 1 rows are
// intervals (chat, user, from in the id column, to in the sent_at column:
// -1 for a current membership, else a closed span that can hold a Seq
// above $1). It ranges over history's primary key and the members and
// member_spans primary keys.
const feedSQL = `WITH h AS (
		SELECT id, message_id, chat_id, sender_id, sender_device, correlation_id, body, sent_at, kind, ref, edited_at, deleted
		FROM history WHERE id > $1 ORDER BY id LIMIT $2
	)
	SELECT 0, id, message_id, chat_id, sender_id, sender_device, correlation_id, body, sent_at, kind, ref, edited_at, deleted FROM h
	UNION ALL
	SELECT 1, m.joined_seq, '', m.chat_id, m.user_id, '', '', '', -1::bigint, 0::smallint, '', 0::bigint, false
	FROM members AS m WHERE m.chat_id IN (SELECT chat_id FROM h)
	UNION ALL
	SELECT 1, s.from_seq, '', s.chat_id, s.user_id, '', '', '', s.to_seq, 0::smallint, '', 0::bigint, false
	FROM member_spans AS s WHERE s.chat_id IN (SELECT chat_id FROM h) AND s.to_seq > $1`

// HistoryAfter returns up to limit messages with Seq above seq, in Seq
// order, each with the members it was committed to (history.Feed,
// history.MembersAt), with one statement in one round trip.
//
// Nothing is skipped by reading forward from the last Seq returned, also
// when the store writes no outbox rows (Config.Outbox false, Kafka mode):
// every Commit takes the append lock (AppendLockKey) before it draws a
// history id and holds it until its commit is visible, so history ids are
// drawn in commit order and no transaction can commit a lower id after a
// higher one became visible. limit < 1 gives ErrInvalid; store failures
// wrap ErrUnavailable.
func (db *DB) HistoryAfter(ctx context.Context, seq int64, limit int) ([]history.Committed, error) {
	return again(ctx, db, func(ctx context.Context) ([]history.Committed, error) { return db.historyAfterOnce(ctx, seq, limit) })
}

// historyAfterOnce is one try of HistoryAfter.
func (db *DB) historyAfterOnce(ctx context.Context, seq int64, limit int) ([]history.Committed, error) {
	if err := storecore.CheckFeedLimit(limit); err != nil {
		return nil, err
	}
	rows, err := db.pool.Query(ctx, feedSQL, seq, int64(limit))
	if err != nil {
		return nil, unavailable("history feed", err)
	}
	out := make([]history.Committed, 0, min(limit, 512))
	intervals := map[string][]history.Interval{}
	var (
		kind int
		m    history.Message
	)
	dest, done := messageDest(&m)
	_, err = pgx.ForEachRow(rows, append([]any{&kind}, dest...), func() error {
		done()
		if kind == 1 {
			intervals[m.ChatID] = append(intervals[m.ChatID], history.Interval{User: m.SenderID, From: m.Seq, To: m.SentAt.UnixNano()})
			return nil
		}
		out = append(out, history.Committed{Message: m})
		return nil
	})
	if err != nil {
		return nil, unavailable("history feed", err)
	}
	// UNION ALL keeps no order: sort both (ids use the "C" collation, so
	// byte order is the database's order too).
	slices.SortFunc(out, func(a, b history.Committed) int { return cmp.Compare(a.Message.Seq, b.Message.Seq) })
	for i := range out {
		out[i].Members = history.MembersAt(intervals[out[i].Message.ChatID], out[i].Message.Seq)
	}
	return out, nil
}

// HistoryHead returns the highest history Seq ever assigned (0 when none),
// from the history id sequence, so purges do not lower it (history.FeedHead).
func (db *DB) HistoryHead(ctx context.Context) (int64, error) {
	return again(ctx, db, func(ctx context.Context) (int64, error) { return db.historyHeadOnce(ctx) })
}

// historyHeadOnce is one try of HistoryHead.
func (db *DB) historyHeadOnce(ctx context.Context) (int64, error) {
	var head int64
	err := db.pool.QueryRow(ctx, `SELECT CASE WHEN is_called THEN last_value ELSE 0 END FROM history_id_seq`).Scan(&head)
	if err != nil {
		return 0, unavailable("history head", err)
	}
	return head, nil
}

var _ history.FeedHead = (*DB)(nil)
