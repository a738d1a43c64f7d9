package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
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
// batch, gets Duplicate with the original message (whatever chat the resend
// names); an unknown chat gets ErrNotFound, a sender outside the chat
// ErrNotMember, a message id already used ErrInvalid; otherwise the history
// row is inserted (its id is the Seq) and, when Config.Outbox is on, one
// outbox row per member in member order (the sender included), each
// CreatedAt the commit time. Per-draft errors store nothing for that draft
// and do not fail the batch. Any other failure rolls the whole batch back
// and returns an error wrapping history.ErrUnavailable. Results carry SentAt
// in UTC as stored. An empty batch returns an empty slice without touching
// the database.
//
// Member lists come from an in-process cache that is checked, inside the
// write transaction, against the membership epoch every AddMember bumps, so
// a member added by any process is in the next commit's deliveries.
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
	c := committer{
		db:         db,
		ctx:        ctx,
		tx:         tx,
		dupe:       tx.StmtContext(ctx, db.wDupe),
		insHistory: tx.StmtContext(ctx, db.wInsertHistory),
		insOutbox:  tx.StmtContext(ctx, db.wInsertOutbox),
		createdAt:  nanos(time.Now()),
	}
	var epoch int64
	if err := tx.StmtContext(ctx, db.wEpoch).QueryRowContext(ctx).Scan(&epoch); err != nil {
		return nil, unavailable("commit: membership epoch", err)
	}
	db.cache.sync(epoch)
	for i, d := range drafts {
		if results[i], err = c.one(d); err != nil {
			return nil, err
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, unavailable("commit", err)
	}
	return results, nil
}

// committer is the state of one Commit transaction.
type committer struct {
	db                          *DB
	ctx                         context.Context
	tx                          *sql.Tx
	dupe, insHistory, insOutbox *sql.Stmt
	createdAt                   int64
}

// one commits one draft. A returned error fails the batch; rule violations
// are in Result.Err.
func (c *committer) one(d history.Draft) (history.Result, error) {
	if err := validDraft(d); err != nil {
		return history.Result{Err: err}, nil
	}
	ms, err := c.members(d.ChatID)
	if err != nil {
		return history.Result{}, err
	}
	if _, member := slices.BinarySearch(ms, d.SenderID); ms == nil || !member {
		// A resend of a committed message is a duplicate whatever chat it
		// names: the idempotency key is checked before the rules.
		if r, found, err := c.duplicate(d); err != nil || found {
			return r, err
		}
		if ms == nil {
			return history.Result{Err: fmt.Errorf("%w: chat %q", history.ErrNotFound, d.ChatID)}, nil
		}
		return history.Result{
			Err:     fmt.Errorf("%w: %q in chat %q", history.ErrNotMember, d.SenderID, d.ChatID),
			Members: slices.Clone(ms),
		}, nil
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
	// The insert does nothing when (sender, correlation) exists, committed
	// earlier or earlier in this transaction: that is the idempotency check.
	res, err := c.insHistory.ExecContext(c.ctx, msg.ID, msg.ChatID, msg.SenderID, msg.SenderDevice,
		msg.CorrelationID, msg.Body, nanos(msg.SentAt))
	if isUniqueViolation(err) {
		// The conflict on (sender, correlation) is absorbed by the insert,
		// so this one is the message id.
		return history.Result{Err: fmt.Errorf("%w: message id %q is already used", history.ErrInvalid, d.ID)}, nil
	}
	if err != nil {
		return history.Result{}, unavailable("commit: insert history", err)
	}
	inserted, err := res.RowsAffected()
	if err != nil {
		return history.Result{}, unavailable("commit: insert history", err)
	}
	if inserted == 0 {
		r, found, err := c.duplicate(d)
		if err == nil && !found {
			err = unavailable("commit", fmt.Errorf("insert of %s/%s ignored but no row holds the key", d.SenderID, d.CorrelationID))
		}
		return r, err
	}
	if msg.Seq, err = res.LastInsertId(); err != nil {
		return history.Result{}, unavailable("commit: insert history", err)
	}

	var deliveries []history.Delivery
	if c.db.cfg.Outbox {
		deliveries = make([]history.Delivery, len(ms))
		for j, m := range ms {
			res, err := c.insOutbox.ExecContext(c.ctx, m, msg.Seq, c.createdAt)
			if err != nil {
				return history.Result{}, unavailable("commit: insert outbox", err)
			}
			pos, err := res.LastInsertId()
			if err != nil {
				return history.Result{}, unavailable("commit: insert outbox", err)
			}
			deliveries[j] = history.Delivery{Recipient: m, Partition: Partition, Pos: pos}
		}
	}
	return history.Result{Message: msg, Deliveries: deliveries, Members: slices.Clone(ms)}, nil
}

// duplicate looks up the message committed under d's idempotency key.
func (c *committer) duplicate(d history.Draft) (history.Result, bool, error) {
	orig := history.Message{SenderID: d.SenderID, CorrelationID: d.CorrelationID}
	var sentAt int64
	err := c.dupe.QueryRowContext(c.ctx, d.SenderID, d.CorrelationID).
		Scan(&orig.Seq, &orig.ID, &orig.ChatID, &orig.SenderDevice, &orig.Body, &sentAt)
	if errors.Is(err, sql.ErrNoRows) {
		return history.Result{}, false, nil
	}
	if err != nil {
		return history.Result{}, false, unavailable("commit: dedupe", err)
	}
	orig.SentAt = fromNanos(sentAt)
	ms, err := c.members(orig.ChatID)
	if err != nil {
		return history.Result{}, false, err
	}
	return history.Result{Message: orig, Duplicate: true, Members: slices.Clone(ms)}, true, nil
}

// members returns the sorted members of chatID, or nil when the chat does
// not exist, from the cache or read within the transaction.
func (c *committer) members(chatID string) ([]string, error) {
	if ms, ok := c.db.cache.get(chatID); ok {
		return ms, nil
	}
	rows, err := c.tx.StmtContext(c.ctx, c.db.wMembers).QueryContext(c.ctx, chatID)
	if err != nil {
		return nil, unavailable("commit: members", err)
	}
	defer rows.Close()
	var ms []string
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
	if len(ms) == 0 {
		// Every chat has members; make sure before calling it unknown.
		var one int
		switch err := c.tx.StmtContext(c.ctx, c.db.wChatExists).QueryRowContext(c.ctx, chatID).Scan(&one); {
		case errors.Is(err, sql.ErrNoRows):
			return nil, nil // unknown chats are not cached: one may be created
		case err != nil:
			return nil, unavailable("commit: chat", err)
		}
		ms = []string{}
	}
	c.db.cache.put(chatID, ms)
	return ms, nil
}

// maxCachedChats bounds the member cache; it is emptied when full.
const maxCachedChats = 100_000

// memberCache maps chat ids to sorted member lists, all read at one
// membership epoch. Members are never removed, so an entry is exact until
// the epoch moves.
type memberCache struct {
	mu    sync.Mutex
	epoch int64
	chats map[string][]string
}

// sync empties the cache unless it was filled at epoch.
func (m *memberCache) sync(epoch int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.chats == nil || m.epoch != epoch || len(m.chats) >= maxCachedChats {
		m.chats = map[string][]string{}
		m.epoch = epoch
	}
}

func (m *memberCache) get(chatID string) ([]string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	ms, ok := m.chats[chatID]
	return ms, ok
}

func (m *memberCache) put(chatID string, ms []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.chats[chatID] = ms
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
