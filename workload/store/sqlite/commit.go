package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tetra-messenger/tetra/workload/history"
)

// Commit stores drafts in one transaction on the writer connection,
// deciding them by the rules every store shares (history.CommitPlan):
// a draft that fails its own checks (history.CheckDraft: a missing or
// over-long id, NUL or invalid UTF-8 in any text, a control character in
// the sender; or a SentAt outside history.MinSentAt..MaxSentAt) gets
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
// What the plan needs is read inside the write transaction, before any
// insert, in three statements for the batch (member lists come from an
// in-process cache checked against the membership epoch every member
// change bumps, so a member added or removed by any process is in, or out
// of, the next commit's deliveries). The store has one writer, so nothing
// changes between those reads and the inserts.
func (db *DB) Commit(ctx context.Context, drafts []history.Draft) ([]history.Result, error) {
	if len(drafts) == 0 {
		return []history.Result{}, nil
	}
	plan := history.NewCommitPlan(drafts)
	if !plan.Valid() {
		return plan.Results, nil
	}
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, unavailable("commit", err)
	}
	defer rollback(tx)
	var epoch int64
	if err := tx.StmtContext(ctx, db.wEpoch).QueryRowContext(ctx).Scan(&epoch); err != nil {
		return nil, unavailable("commit: membership epoch", err)
	}
	c := committer{
		db:         db,
		epoch:      epoch,
		ctx:        ctx,
		tx:         tx,
		insHistory: tx.StmtContext(ctx, db.wInsertHistory),
		insOutbox:  tx.StmtContext(ctx, db.wInsertOutbox),
		createdAt:  nanos(time.Now()),
	}
	known, err := c.read(plan)
	if err != nil {
		return nil, err
	}
	plan.Decide(known)
	for _, i := range plan.Inserts {
		seq, deliveries, err := c.insert(plan.Results[i])
		if err != nil {
			return nil, err
		}
		plan.Inserted(i, seq, deliveries)
	}
	if err := tx.Commit(); err != nil {
		return nil, unavailable("commit", err)
	}
	return plan.Finish(), nil
}

// committer is the state of one Commit transaction.
type committer struct {
	db                    *DB
	ctx                   context.Context
	tx                    *sql.Tx
	insHistory, insOutbox *sql.Stmt
	createdAt             int64
	epoch                 int64 // the membership epoch read in tx
}

// maxReadKeys bounds the keys or ids one read statement names (SQLite
// bounds a statement's parameters).
const maxReadKeys = 500

// read reads what plan needs: the member lists of its chats and of the
// chats of the originals its keys name, the messages under its keys, and
// which of its ids are used.
func (c *committer) read(plan *history.CommitPlan) (history.Known, error) {
	k := history.Known{Members: map[string][]string{}, Committed: map[history.Key]history.Message{}, UsedIDs: map[string]bool{}}
	need := func(chat string) error {
		if _, ok := k.Members[chat]; ok {
			return nil
		}
		ms, err := c.members(chat)
		if ms != nil {
			k.Members[chat] = ms
		}
		return err
	}
	for _, chat := range plan.Chats() {
		if err := need(chat); err != nil {
			return k, err
		}
	}
	for keys := range slices.Chunk(plan.Keys(), maxReadKeys) {
		if err := c.readKeys(keys, k.Committed); err != nil {
			return k, err
		}
	}
	for _, m := range k.Committed {
		if err := need(m.ChatID); err != nil {
			return k, err
		}
	}
	for ids := range slices.Chunk(plan.IDs(), maxReadKeys) {
		if err := c.readIDs(ids, k.UsedIDs); err != nil {
			return k, err
		}
	}
	return k, nil
}

// readKeys adds the messages stored under keys to into: one statement, an
// index probe per key (the CROSS JOIN keeps SQLite from scanning history).
func (c *committer) readKeys(keys []history.Key, into map[history.Key]history.Message) error {
	var q strings.Builder
	q.WriteString(`WITH k(s, c) AS (VALUES `)
	args := make([]any, 0, 2*len(keys))
	for i, key := range keys {
		if i > 0 {
			q.WriteString(",")
		}
		q.WriteString("(?, ?)")
		args = append(args, key.Sender, key.Correlation)
	}
	q.WriteString(`) SELECT h.id, h.message_id, h.chat_id, h.sender_id, h.sender_device, h.correlation_id, h.body, h.sent_at
		FROM k CROSS JOIN history AS h ON h.sender_id = k.s AND h.correlation_id = k.c`)
	rows, err := c.tx.QueryContext(c.ctx, q.String(), args...)
	if err != nil {
		return unavailable("commit: dedupe", err)
	}
	defer rows.Close()
	for rows.Next() {
		var m history.Message
		var sentAt int64
		if err := rows.Scan(&m.Seq, &m.ID, &m.ChatID, &m.SenderID, &m.SenderDevice, &m.CorrelationID, &m.Body, &sentAt); err != nil {
			return unavailable("commit: dedupe", err)
		}
		m.SentAt = fromNanos(sentAt)
		into[history.Key{Sender: m.SenderID, Correlation: m.CorrelationID}] = m
	}
	if err := rows.Err(); err != nil {
		return unavailable("commit: dedupe", err)
	}
	return nil
}

// readIDs marks in into which of ids are message ids in history.
func (c *committer) readIDs(ids []string, into map[string]bool) error {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	q := `SELECT message_id FROM history WHERE message_id IN (?` + strings.Repeat(", ?", len(ids)-1) + `)`
	rows, err := c.tx.QueryContext(c.ctx, q, args...)
	if err != nil {
		return unavailable("commit: message ids", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return unavailable("commit: message ids", err)
		}
		into[id] = true
	}
	if err := rows.Err(); err != nil {
		return unavailable("commit: message ids", err)
	}
	return nil
}

// insert stores a planned message: its history row, then one outbox row
// per member (with the outbox on). The plan found its key and id free and
// nothing else writes, so a conflict here is the store's failure.
func (c *committer) insert(r history.Result) (int64, []history.Delivery, error) {
	msg := r.Message
	res, err := c.insHistory.ExecContext(c.ctx, msg.ID, msg.ChatID, msg.SenderID, msg.SenderDevice,
		msg.CorrelationID, msg.Body, nanos(msg.SentAt))
	if err != nil {
		return 0, nil, unavailable("commit: insert history", err)
	}
	if n, err := res.RowsAffected(); err != nil || n != 1 {
		return 0, nil, unavailable("commit: insert history", fmt.Errorf("%s/%s: %d rows inserted (%v), the plan found the key free", msg.SenderID, msg.CorrelationID, n, err))
	}
	seq, err := res.LastInsertId()
	if err != nil {
		return 0, nil, unavailable("commit: insert history", err)
	}
	if !c.db.cfg.Outbox {
		return seq, nil, nil
	}
	deliveries := make([]history.Delivery, len(r.Members))
	for j, m := range r.Members {
		res, err := c.insOutbox.ExecContext(c.ctx, m, seq, c.createdAt)
		if err != nil {
			return 0, nil, unavailable("commit: insert outbox", err)
		}
		pos, err := res.LastInsertId()
		if err != nil {
			return 0, nil, unavailable("commit: insert outbox", err)
		}
		deliveries[j] = history.Delivery{Recipient: m, Partition: Partition, Pos: pos}
	}
	return seq, deliveries, nil
}

// members returns the sorted members of chatID, or nil when the chat does
// not exist, from the cache or read within the transaction.
func (c *committer) members(chatID string) ([]string, error) {
	if ms, ok := c.db.cache.Get(c.epoch, chatID); ok {
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
	c.db.cache.Store(c.epoch, map[string][]string{chatID: ms})
	return ms, nil
}
