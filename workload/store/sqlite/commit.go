package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/tetra-messenger/tetra/workload/history"
)

// validDraft checks what the ingest stage must have filled in and every
// text of the draft (history.CheckDraft, the rule every store shares), and
// that SentAt is storable.
func validDraft(d history.Draft) error {
	if d.SentAt.Before(minTime) || d.SentAt.After(maxTime) {
		return fmt.Errorf("%w: draft sentAt %v is unset or out of range", history.ErrInvalid, d.SentAt)
	}
	return history.CheckDraft(d)
}

// Commit stores drafts in one transaction on the writer connection. For each
// draft in order: a draft that history.CheckDraft refuses (a missing or
// over-long id, NUL or invalid UTF-8 in any text, a control character in the
// sender) or without a storable SentAt (years 1678 to 2262) gets
// ErrInvalid; a (SenderID, CorrelationID) already in history, committed
// earlier or earlier in this batch, gets Duplicate with the original
// message when the draft names the original's chat and body, and
// ErrInvalid when it names another chat or body (history.CheckResend); an
// unknown chat gets ErrNotFound, a sender outside the chat ErrNotMember, a
// message id already used ErrInvalid; otherwise the history row is
// inserted (its id is the Seq) and, when Config.Outbox is on, one outbox
// row per member in member order (the sender included), each CreatedAt the
// commit time. Per-draft errors store nothing for that draft and do not
// fail the batch. Any other failure rolls the whole batch back and returns
// an error wrapping history.ErrUnavailable. Results carry SentAt in UTC as
// stored. An empty batch returns an empty slice without touching the
// database.
//
// Member lists come from an in-process cache that is checked, inside the
// write transaction, against the membership epoch every AddMember bumps, so
// a member added or removed by any process is in (or out of) the next
// commit's deliveries.
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
		// The idempotency key is checked before the rules: a resend names
		// the original's chat and body, anything else is refused.
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

// duplicate looks up the message committed under d's idempotency key
// (found: the key is taken). The result is the original as a Duplicate, or
// ErrInvalid when d names another chat or body (history.CheckResend).
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
	if err := history.CheckResend(orig.ChatID, orig.Body, d); err != nil {
		return history.Result{Err: err}, true, nil
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
// membership epoch. Every member change (AddMember, RemoveMember) bumps
// the epoch in its transaction, so an entry is exact until
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
