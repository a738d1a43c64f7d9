package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/tetra-messenger/tetra/workload/history"
)

// Timestamps are stored as int64 Unix nanoseconds, which cover these years.
var (
	minTime = time.Unix(0, math.MinInt64).Add(time.Second) // 1677-09-21
	maxTime = time.Unix(0, math.MaxInt64).Add(-time.Second) // 2262-04-11
)

// validDraft checks what the ingest stage must have filled in.
func validDraft(d history.Draft) error {
	switch {
	case d.ID == "":
		return fmt.Errorf("%w: draft has no message id", history.ErrInvalid)
	case d.CorrelationID == "":
		return fmt.Errorf("%w: correlationId is empty", history.ErrInvalid)
	case d.SentAt.Before(minTime) || d.SentAt.After(maxTime):
		return fmt.Errorf("%w: draft sentAt %v is unset or out of range", history.ErrInvalid, d.SentAt)
	}
	return validUser("sender id", d.SenderID)
}

// Commit stores drafts in one transaction on the writer connection. For each
// draft in order: a draft missing its id, correlation id, sender or a
// storable SentAt (years 1678 to 2262) gets ErrInvalid; a (SenderID,
// CorrelationID) already in history, committed earlier or earlier in this
// batch, gets Duplicate with the original message; an unknown chat gets
// ErrNotFound, a sender outside the chat ErrNotMember, a message id already
// used ErrInvalid; otherwise the history row is inserted (its id is the
// Seq) and, when Config.Outbox is on, one outbox row per member in member
// order (the sender included), each CreatedAt the commit time. Per-draft
// errors store nothing for that draft and do not fail the batch. Any other
// failure rolls the whole batch back and returns an error wrapping
// history.ErrUnavailable. Results carry SentAt in UTC as stored. An empty
// batch returns an empty slice without touching the database.
func (db *DB) Commit(ctx context.Context, drafts []history.Draft) ([]history.Result, error) {
	results := make([]history.Result, len(drafts))
	if len(drafts) == 0 {
		return results, nil
	}
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, unavailable("commit", err)
	}
	defer rollback(tx)
	dupe := tx.StmtContext(ctx, db.wDupe)
	insHistory := tx.StmtContext(ctx, db.wInsertHistory)
	insOutbox := tx.StmtContext(ctx, db.wInsertOutbox)
	createdAt := nanos(time.Now())

	// Members per chat, read inside this transaction (nil: no such chat).
	// Nothing is cached across transactions: another process may add
	// members at any time.
	chats := map[string][]string{}
	membersOf := func(chatID string) ([]string, error) {
		if ms, ok := chats[chatID]; ok {
			return ms, nil
		}
		ms, err := db.members(ctx, tx, chatID)
		if err != nil {
			return nil, err
		}
		chats[chatID] = ms
		return ms, nil
	}

	for i, d := range drafts {
		if err := validDraft(d); err != nil {
			results[i].Err = err
			continue
		}
		// Idempotency: the transaction sees its own earlier inserts, so this
		// catches repeats within the batch as well as across batches.
		orig := history.Message{SenderID: d.SenderID, CorrelationID: d.CorrelationID}
		var sentAt int64
		err := dupe.QueryRowContext(ctx, d.SenderID, d.CorrelationID).
			Scan(&orig.Seq, &orig.ID, &orig.ChatID, &orig.SenderDevice, &orig.Body, &sentAt)
		if err == nil {
			orig.SentAt = fromNanos(sentAt)
			ms, err := membersOf(orig.ChatID)
			if err != nil {
				return nil, err
			}
			results[i] = history.Result{Message: orig, Duplicate: true, Members: slices.Clone(ms)}
			continue
		}
		if !errors.Is(err, sql.ErrNoRows) {
			return nil, unavailable("commit: dedupe", err)
		}

		ms, err := membersOf(d.ChatID)
		if err != nil {
			return nil, err
		}
		if ms == nil {
			results[i].Err = fmt.Errorf("%w: chat %q", history.ErrNotFound, d.ChatID)
			continue
		}
		if _, found := slices.BinarySearch(ms, d.SenderID); !found {
			results[i].Err = fmt.Errorf("%w: %q in chat %q", history.ErrNotMember, d.SenderID, d.ChatID)
			results[i].Members = slices.Clone(ms)
			continue
		}

		msg := history.Message{
			ID:            d.ID,
			ChatID:        d.ChatID,
			SenderID:      d.SenderID,
			SenderDevice:  d.SenderDevice,
			CorrelationID: d.CorrelationID,
			Body:          d.Body,
			SentAt:        fromNanos(nanos(d.SentAt)),
		}
		res, err := insHistory.ExecContext(ctx, msg.ID, msg.ChatID, msg.SenderID, msg.SenderDevice,
			msg.CorrelationID, msg.Body, nanos(msg.SentAt))
		if isUniqueViolation(err) {
			// (sender, correlation) was checked above, so it is the message id.
			results[i].Err = fmt.Errorf("%w: message id %q is already used", history.ErrInvalid, d.ID)
			continue
		}
		if err != nil {
			return nil, unavailable("commit: insert history", err)
		}
		if msg.Seq, err = res.LastInsertId(); err != nil {
			return nil, unavailable("commit: insert history", err)
		}

		var deliveries []history.Delivery
		if db.cfg.Outbox {
			deliveries = make([]history.Delivery, len(ms))
			for j, m := range ms {
				res, err := insOutbox.ExecContext(ctx, m, msg.Seq, createdAt)
				if err != nil {
					return nil, unavailable("commit: insert outbox", err)
				}
				pos, err := res.LastInsertId()
				if err != nil {
					return nil, unavailable("commit: insert outbox", err)
				}
				deliveries[j] = history.Delivery{Recipient: m, Partition: 0, Pos: pos}
			}
		}
		results[i] = history.Result{Message: msg, Deliveries: deliveries, Members: slices.Clone(ms)}
	}
	if err := tx.Commit(); err != nil {
		return nil, unavailable("commit", err)
	}
	return results, nil
}

// members returns the sorted members of chatID within tx, or nil when the
// chat does not exist.
func (db *DB) members(ctx context.Context, tx *sql.Tx, chatID string) ([]string, error) {
	rows, err := tx.StmtContext(ctx, db.wMembers).QueryContext(ctx, chatID)
	if err != nil {
		return nil, unavailable("commit: members", err)
	}
	defer rows.Close()
	ms := []string{}
	for rows.Next() {
		var m string
		if err := rows.Scan(&m); err != nil {
			return nil, unavailable("commit: members", err)
		}
		ms = append(ms, m)
	}
	if err := rows.Err(); err != nil {
		return nil, unavailable("commit: members", err)
	}
	if len(ms) > 0 {
		return ms, nil
	}
	// Every chat has members; make sure before calling it unknown.
	var one int
	switch err := tx.StmtContext(ctx, db.wChatExists).QueryRowContext(ctx, chatID).Scan(&one); {
	case errors.Is(err, sql.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, unavailable("commit: chat", err)
	}
	return ms, nil
}

// Page returns up to limit messages of chatID with a Seq above that of the
// message sinceID, in Seq order, and whether more follow. A sinceID that is
// empty, unknown, purged or from another chat starts at the beginning of the
// retained history. limit < 1 gives ErrInvalid (callers cap the upper end);
// an unknown chat ErrNotFound. It reads one snapshot on the read pool.
func (db *DB) Page(ctx context.Context, chatID, sinceID string, limit int) ([]history.Message, bool, error) {
	if limit < 1 {
		return nil, false, fmt.Errorf("%w: page limit %d, want at least 1", history.ErrInvalid, limit)
	}
	tx, err := db.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, false, unavailable("page", err)
	}
	defer rollback(tx)
	var one int
	switch err := tx.QueryRowContext(ctx, `SELECT 1 FROM chats WHERE id = ?`, chatID).Scan(&one); {
	case errors.Is(err, sql.ErrNoRows):
		return nil, false, fmt.Errorf("%w: chat %q", history.ErrNotFound, chatID)
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
	for rows.Next() {
		if len(msgs) == limit {
			hasMore = true
			break
		}
		m := history.Message{ChatID: chatID}
		var sentAt int64
		if err := rows.Scan(&m.Seq, &m.ID, &m.SenderID, &m.SenderDevice, &m.CorrelationID, &m.Body, &sentAt); err != nil {
			return nil, false, unavailable("page", err)
		}
		m.SentAt = fromNanos(sentAt)
		msgs = append(msgs, m)
	}
	if err := rows.Err(); err != nil {
		return nil, false, unavailable("page", err)
	}
	return msgs, hasMore, nil
}

// SaveReads upserts the read receipts in one transaction: per (ChatID,
// UserID) the row keeps the receipt with the latest At (a later receipt in
// the same call wins a tie). A receipt with an empty ChatID, UserID or
// MessageID fails the call with ErrInvalid and nothing is saved. Chats and
// messages are not checked; the caller has. An empty slice is a no-op.
func (db *DB) SaveReads(ctx context.Context, reads []history.Read) error {
	if len(reads) == 0 {
		return nil
	}
	for _, r := range reads {
		if r.ChatID == "" || r.UserID == "" || r.MessageID == "" {
			return fmt.Errorf("%w: read receipt needs chat, user and message ids", history.ErrInvalid)
		}
	}
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return unavailable("save reads", err)
	}
	defer rollback(tx)
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO reads (chat_id, user_id, message_id, at) VALUES (?, ?, ?, ?)
		ON CONFLICT (chat_id, user_id) DO UPDATE SET message_id = excluded.message_id, at = excluded.at
		WHERE excluded.at >= reads.at`)
	if err != nil {
		return unavailable("save reads", err)
	}
	defer stmt.Close()
	for _, r := range reads {
		if _, err := stmt.ExecContext(ctx, r.ChatID, r.UserID, r.MessageID, nanos(r.At)); err != nil {
			return unavailable("save reads", err)
		}
	}
	return commitTx(tx, "save reads")
}

// PurgeHistory deletes up to limit history rows with SentAt before cutoff,
// oldest SentAt first, and returns how many it deleted. The outbox rows of
// those messages are deleted first, in the same transaction, so no outbox
// row outlives its history row (invariant I1; a foreign key enforces it).
// limit < 1 gives ErrInvalid.
func (db *DB) PurgeHistory(ctx context.Context, cutoff time.Time, limit int) (int64, error) {
	if limit < 1 {
		return 0, fmt.Errorf("%w: purge limit %d, want at least 1", history.ErrInvalid, limit)
	}
	if cutoff.Before(minTime) {
		return 0, nil
	}
	cut := int64(math.MaxInt64)
	if cutoff.Before(maxTime) {
		cut = nanos(cutoff)
	}
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return 0, unavailable("purge history", err)
	}
	defer rollback(tx)
	// Both statements pick the same victims: the order is total and the
	// writer lock keeps history unchanged in between.
	const victims = `SELECT id FROM history WHERE sent_at < ?1 ORDER BY sent_at, id LIMIT ?2`
	if _, err := tx.ExecContext(ctx, `DELETE FROM outbox WHERE history_id IN (`+victims+`)`, cut, limit); err != nil {
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
