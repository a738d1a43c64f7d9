package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/store/storecore"
)

// Page returns up to limit messages of chatID with a Seq above that of the
// message sinceID, in Seq order, and whether more follow. A sinceID that is
// empty, unknown, purged or from another chat starts at the beginning of the
// retained history. limit < 1 gives ErrInvalid (callers cap the upper end);
// an unknown chat ErrNotFound. It reads one snapshot on the read pool.
func (db *DB) Page(ctx context.Context, chatID, sinceID string, limit int) ([]history.Message, bool, error) {
	if err := storecore.CheckPageLimit(limit); err != nil {
		return nil, false, err
	}
	tx, err := db.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, false, unavailable("page", err)
	}
	defer rollback(tx)
	var one int
	switch err := tx.QueryRowContext(ctx, `SELECT 1 FROM chats WHERE id = ? AND closed = 0`, chatID).Scan(&one); {
	case errors.Is(err, sql.ErrNoRows):
		return nil, false, storecore.NotFound(chatID)
	case err != nil:
		return nil, false, unavailable("page", err)
	}
	// One row beyond the page tells whether more follow.
	rows, err := tx.StmtContext(ctx, db.rPage).QueryContext(ctx, chatID, sinceID, int64(limit)+1)
	if err != nil {
		return nil, false, unavailable("page", err)
	}
	defer rows.Close()
	msgs := make([]history.Message, 0, min(limit, 512))
	hasMore := false
	var m history.Message
	dest, done := storecore.MessageDest(&m) // reused for every row
	for rows.Next() {
		if len(msgs) == limit {
			hasMore = true
			break
		}
		if err := rows.Scan(dest...); err != nil {
			return nil, false, unavailable("page", err)
		}
		done()
		msgs = append(msgs, m)
	}
	if err := rows.Err(); err != nil {
		return nil, false, unavailable("page", err)
	}
	return msgs, hasMore, nil
}

// SaveReads upserts the read receipts in one transaction on the writer
// (the group commit of read receipts): per (ChatID, UserID) the row moves
// only forward, to a receipt with a higher Seq (PROTOCOL.md §3), and only
// while UserID is a member of ChatID (checked in the transaction, so a
// receipt racing a removal is dropped). A receipt that history.CheckRead
// refuses (an empty or over-long id, NUL, invalid UTF-8, a control
// character in the user id) fails the call with ErrInvalid and nothing is
// saved. The message is not checked against the chat; the caller has
// (MessageSeq). An empty slice is a no-op.
func (db *DB) SaveReads(ctx context.Context, reads []history.Read) error {
	if len(reads) == 0 {
		return nil
	}
	for _, r := range reads {
		if err := history.CheckRead(r); err != nil {
			return err
		}
	}
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return unavailable("save reads", err)
	}
	defer rollback(tx)
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO reads (chat_id, user_id, message_id, seq, at)
		SELECT ?1, ?2, ?3, ?4, ?5 WHERE EXISTS (SELECT 1 FROM members WHERE chat_id = ?1 AND user_id = ?2)
		ON CONFLICT (chat_id, user_id) DO UPDATE SET message_id = excluded.message_id, seq = excluded.seq, at = excluded.at
		WHERE excluded.seq > reads.seq`)
	if err != nil {
		return unavailable("save reads", err)
	}
	defer stmt.Close()
	for _, r := range reads {
		if _, err := stmt.ExecContext(ctx, r.ChatID, r.UserID, r.MessageID, r.Seq, nanos(r.At)); err != nil {
			return unavailable("save reads", err)
		}
	}
	return commitTx(tx, "save reads")
}

// PurgeHistory deletes up to limit history rows with SentAt before cutoff,
// oldest SentAt first, and returns how many it deleted. The outbox rows of
// those messages are deleted first, in the same transaction, so no outbox
// row outlives its history row (invariant I1).
// limit < 1 gives ErrInvalid.
func (db *DB) PurgeHistory(ctx context.Context, cutoff time.Time, limit int) (int64, error) {
	cut, none, err := storecore.PurgeCut(cutoff, limit)
	if err != nil || none {
		return 0, err
	}
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, unavailable("purge history", err)
	}
	defer rollback(tx)
	// Both statements pick the same victims: the order is total and the
	// writer lock keeps history unchanged in between.
	const victims = `SELECT id FROM history WHERE sent_at < ?1 ORDER BY sent_at, id LIMIT ?2`
	// The outbox records of the victims go first. history_id ascends with
	// a record's id, so a victim's record lies below the first record of a
	// later message: a range of the key, filtered, not a scan of them all.
	rows, err := tx.QueryContext(ctx, `WITH v(id) AS (`+victims+`)
		DELETE FROM outbox_messages
		WHERE id < coalesce((SELECT o.id FROM outbox_messages AS o
		                     WHERE o.history_id > (SELECT max(id) FROM v) ORDER BY o.id LIMIT 1), 9223372036854775807)
		  AND history_id IN (SELECT id FROM v)
		RETURNING id, n, (SELECT below FROM outbox_line)`, cut, limit)
	if err != nil {
		return 0, unavailable("purge history: outbox", err)
	}
	deleted, _, err := countDeleted(rows)
	if err == nil {
		err = db.lowerDepth(ctx, tx, deleted)
	}
	if err != nil {
		return 0, unavailable("purge history: outbox", err)
	}
	res, err := tx.ExecContext(ctx, `DELETE FROM history WHERE id IN (`+victims+`)`, cut, limit)
	if err != nil {
		return 0, unavailable("purge history", err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, unavailable("purge history", err)
	}
	return n, commitTx(tx, "purge history")
}
