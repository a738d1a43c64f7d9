package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
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
	if !plan.HasRefs() {
		res, err := db.commit(ctx, plan, true)
		if !errors.Is(err, errOptimism) {
			return res, err
		}
		plan = history.NewCommitPlan(drafts)
	}
	return db.commit(ctx, plan, false)
}

// errOptimism is what an optimistic commit returns when the batch is not
// what it bet on (see commit): its transaction is rolled back and the
// batch is committed again with every read.
var errOptimism = errors.New("sqlite: optimistic commit: a key or id is taken, or a draft is refused")

// commit is one try of Commit's transaction. optimistic bets that the
// batch is the common case, new messages from members: it reads only the
// member lists, not whether a key or an id is taken, so the statements
// that would find nothing (most batches) do not run. A taken key or id
// then fails its insert on history's UNIQUE constraints, which INSERT OR
// ROLLBACK turns into the rollback of the whole transaction, and a draft
// the plan refuses may be a resend whose original answers it; either
// returns errOptimism with nothing stored, and Commit tries again with
// optimistic false, which reads everything first (the order the plan's
// rules need). Batches with edits or deletes are never optimistic.
func (db *DB) commit(ctx context.Context, plan *history.CommitPlan, optimistic bool) ([]history.Result, error) {
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
		db:        db,
		epoch:     epoch,
		ctx:       ctx,
		tx:        tx,
		createdAt: nanos(time.Now()),
	}
	var known history.Known
	if optimistic {
		known, err = c.readMembers(plan)
	} else {
		known, err = c.read(plan)
	}
	if err != nil {
		return nil, err
	}
	valid := make([]bool, len(plan.Results))
	for i, r := range plan.Results {
		valid[i] = r.Err == nil
	}
	plan.Decide(known)
	if optimistic {
		for i, r := range plan.Results {
			if valid[i] && r.Err != nil {
				return nil, errOptimism
			}
		}
	}
	if err := c.insert(plan); err != nil {
		if optimistic && isConstraint(err) {
			return nil, errOptimism
		}
		return nil, err
	}
	if plan.HasRefs() { // edits and deletes only (edits.go)
		if err := c.apply(plan.Applies()); err != nil {
			return nil, err
		}
	}
	if err := tx.Commit(); err != nil {
		return nil, unavailable("commit", err)
	}
	db.ckpt.wrote(len(plan.Inserts))
	db.ckpt.finishAfterCommit(ctx, db.w)
	if plan.HasRefs() {
		for _, a := range plan.Applies() {
			if a.Kind == history.KindDelete {
				db.ckpt.deleted() // the WAL still holds the body (checkpoint.go)
				break
			}
		}
	}
	return plan.Finish(), nil
}

// committer is the state of one Commit transaction.
type committer struct {
	db        *DB
	ctx       context.Context
	tx        *sql.Tx
	createdAt int64
	epoch     int64 // the membership epoch read in tx
}

// read reads what plan needs: the member lists of its chats and of the
// chats of the originals its keys name, the messages under its keys, and
// which of its ids are used.
func (c *committer) read(plan *history.CommitPlan) (history.Known, error) {
	k, err := c.readMembers(plan)
	if err != nil {
		return k, err
	}
	need := func(chat string) error { return c.need(k, chat) }
	if err := c.readKeys(plan.Keys(), k.Committed); err != nil {
		return k, err
	}
	for _, m := range k.Committed {
		if err := need(m.ChatID); err != nil {
			return k, err
		}
	}
	if err := c.readIDs(plan.IDs(), k.UsedIDs); err != nil {
		return k, err
	}
	if plan.HasRefs() { // edits and deletes only (edits.go)
		ids := plan.Refs()
		for _, m := range k.Committed {
			ids = append(ids, m.ID)
		}
		if err := c.readTargets(ids, &k); err != nil {
			return k, err
		}
	}
	return k, nil
}

// readMembers reads the member lists of the chats plan names, and only
// them: what an optimistic commit reads (see commit).
func (c *committer) readMembers(plan *history.CommitPlan) (history.Known, error) {
	k := history.Known{Members: map[string][]string{}, Committed: map[history.Key]history.Message{}, UsedIDs: map[string]bool{}}
	for _, chat := range plan.Chats() {
		if err := c.need(k, chat); err != nil {
			return k, err
		}
	}
	return k, nil
}

// need adds the members of chat to k.Members unless they are there or the
// chat is unknown.
func (c *committer) need(k history.Known, chat string) error {
	if _, ok := k.Members[chat]; ok {
		return nil
	}
	ms, err := c.members(chat)
	if ms != nil {
		k.Members[chat] = ms
	}
	return err
}

// readKeys adds the messages stored under keys to into: an index probe per
// key (the CROSS JOIN keeps SQLite from scanning history), in the fewest of
// the statement's prepared forms.
func (c *committer) readKeys(keys []history.Key, into map[history.Key]history.Message) error {
	args := make([]any, 0, 2*len(keys))
	for _, key := range keys {
		args = append(args, key.Sender, key.Correlation)
	}
	err := c.db.readKeys.query(c.ctx, c.tx, len(keys), args, func(rows *sql.Rows) error {
		// With kind and ref: a resend must match an edit or delete as
		// such (PROTOCOL.md §7.3). Rows come back for resends only.
		m, err := scanMessage(rows)
		if err != nil {
			return err
		}
		into[history.Key{Sender: m.SenderID, Correlation: m.CorrelationID}] = m
		return nil
	})
	if err != nil {
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
	err := c.db.readIDs.query(c.ctx, c.tx, len(ids), args, func(rows *sql.Rows) error {
		var id string
		if err := rows.Scan(&id); err != nil {
			return err
		}
		into[id] = true
		return nil
	})
	if err != nil {
		return unavailable("commit: message ids", err)
	}
	return nil
}

// insert stores the planned messages: their history rows, then (with
// the outbox on) one outbox record per message (outbox.go), each kind in
// multi-row INSERTs (manyStmt). history's AUTOINCREMENT counter, read in
// this transaction, tells the ids SQLite assigns, in plan order: the store
// has one writer and the transaction holds the file's write lock (BEGIN
// IMMEDIATE), so no other id can be taken between the read and the
// inserts, and an id is never reused (sqlite_sequence keeps the highest id
// ever stored, deleted rows included). Each statement's last id is checked
// against the one planned (manyStmt.insert). SQLite assigns history's ids,
// not the statement, because an explicit INTEGER PRIMARY KEY value may
// fail its type check midway, which makes SQLite keep a statement journal
// (a copy of every page the statement changes, a twentieth of Commit); with
// INSERT OR ROLLBACK and the writer's foreign keys off (config.go), no
// statement can stop halfway, so none is kept. An outbox record's id is
// given (the position of its last row, outbox.go): one record per message
// writes far fewer pages than the journal of its rightmost page costs. A
// row not inserted is
// the store's failure, or in an optimistic commit a key or id already
// taken (see commit).
func (c *committer) insert(plan *history.CommitPlan) error {
	if len(plan.Inserts) == 0 {
		return nil
	}
	var histSeq, outSeq int64
	if err := c.tx.StmtContext(c.ctx, c.db.wSeqs).QueryRowContext(c.ctx).Scan(&histSeq, &outSeq); err != nil {
		return unavailable("commit: sequences", err)
	}
	seqs := make([]int64, len(plan.Inserts))
	for k := range plan.Inserts {
		seqs[k] = histSeq + 1 + int64(k)
	}
	for k0 := 0; k0 < len(plan.Inserts); k0 += maxRows {
		k1 := min(k0+maxRows, len(plan.Inserts))
		args := make([]any, 0, 7*(k1-k0))
		for k := k0; k < k1; k++ {
			msg := plan.Results[plan.Inserts[k]].Message
			args = append(args, msg.ID, msg.ChatID, msg.SenderID, msg.SenderDevice,
				msg.CorrelationID, msg.Body, nanos(msg.SentAt))
		}
		if err := c.db.insertHistory.insert(c.ctx, c.tx, k1-k0, args, seqs[k0]); err != nil {
			return unavailable("commit: insert history", err)
		}
	}
	if !c.db.cfg.Outbox {
		for k, i := range plan.Inserts {
			plan.Inserted(i, seqs[k], nil)
		}
		return nil
	}
	// One outbox record per message, listing its members in member order:
	// member j's row is at the record's first position plus j, and the
	// record's id is the position of its last row (outbox.go).
	pos := outSeq
	for k0 := 0; k0 < len(plan.Inserts); k0 += maxRows {
		k1 := min(k0+maxRows, len(plan.Inserts))
		args := make([]any, 0, 5*(k1-k0))
		ids := make([]int64, 0, k1-k0)
		for k := k0; k < k1; k++ {
			i := plan.Inserts[k]
			members := plan.Results[i].Members
			if len(members) == 0 {
				// A sender is a member (CommitPlan.Decide).
				return unavailable("commit: insert outbox", fmt.Errorf("message %s has no members", plan.Results[i].Message.ID))
			}
			deliveries := make([]history.Delivery, len(members))
			for j, m := range members {
				pos++
				deliveries[j] = history.Delivery{Recipient: m, Partition: Partition, Pos: pos}
			}
			args = append(args, pos, seqs[k], encodeRecipients(members), len(members), c.createdAt)
			ids = append(ids, pos)
			plan.Inserted(i, seqs[k], deliveries)
		}
		if err := c.db.insertOutbox.insertIDs(c.ctx, c.tx, args, ids); err != nil {
			return unavailable("commit: insert outbox", err)
		}
	}
	if pos > outSeq {
		if _, err := c.tx.StmtContext(c.ctx, c.db.wDepth).ExecContext(c.ctx, pos-outSeq); err != nil {
			return unavailable("commit: outbox depth", err)
		}
	}
	return nil
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
