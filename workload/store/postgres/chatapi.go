package postgres

import (
	"context"
	"errors"
	"math"

	"github.com/jackc/pgx/v5"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/store/storecore"
)

// The calls of PROTOCOL.md §7 (history.ChatAPI): history pages in both
// directions and by membership interval, the chat list by activity, one
// chat as its member sees it, admins and renames. The same queries as the
// SQLite store's; reads of several statements run in one read-only
// REPEATABLE READ transaction (one snapshot), pipelined where they do not
// depend on each other.

var _ history.ChatAPI = (*DB)(nil)

// visibleSQL is the filter of a member's visible messages of history
// (PROTOCOL.md §7.6) on a row h of chat $1 for user $5: $3 is true for
// shared history, $4 the Seq the current interval starts after.
const visibleSQL = `($3 OR h.id > $4 OR EXISTS (SELECT 1 FROM member_spans AS s
	WHERE s.chat_id = $1 AND s.user_id = $5 AND s.from_seq < h.id AND s.to_seq >= h.id))`

// beforeSQL is a backward page with its cursor $8 resolved within the
// chat (to $7, the end, when it does not resolve); sinceSQL a forward page
// after the cursor $7 (the beginning when it does not resolve).
// TestPagePlans checks that both range over history_unread: ordering by
// (chat_id, id), the index's order, keeps the planner from walking
// history's primary key backwards and filtering by chat.
const (
	beforeSQL = `WITH b AS (SELECT coalesce((SELECT id FROM history WHERE message_id = $8 AND chat_id = $1), $7) AS id)
	SELECT h.id, h.message_id, h.sender_id, h.sender_device, h.correlation_id, h.body, h.sent_at,
		h.kind, h.ref, h.edited_at, h.deleted
	FROM b, history AS h WHERE h.chat_id = $1 AND h.id > $2 AND h.id < b.id AND ` + visibleSQL + ` ORDER BY h.chat_id DESC, h.id DESC LIMIT $6`
	sinceSQL = `WITH a AS (SELECT greatest($2, coalesce((SELECT id FROM history WHERE message_id = $7 AND chat_id = $1), 0)) AS id)
	SELECT h.id, h.message_id, h.sender_id, h.sender_device, h.correlation_id, h.body, h.sent_at,
		h.kind, h.ref, h.edited_at, h.deleted
	FROM a, history AS h WHERE h.chat_id = $1 AND h.id > a.id AND ` + visibleSQL + ` ORDER BY h.chat_id, h.id LIMIT $6`
)

// membershipSQL lists the chats of member $1 (all, or the one $2 when not
// empty) with what the list and the visibility need; the newest ordinary
// message (kind 0: edits and deletes do not move a chat up the list,
// PROTOCOL.md §7.3) is one probe at the end of the chat's range of
// history_unread.
const membershipSQL = `SELECT c.id, c.kind, c.title, c.created_by, c.created_at, c.history, m.joined_at, m.joined_seq,
	coalesce(r.seq, 0),
	coalesce((SELECT h.sent_at FROM history AS h WHERE h.chat_id = c.id AND h.kind = 0
		AND h.id > (CASE WHEN c.history = 'member' THEN m.joined_seq ELSE 0 END) ORDER BY h.chat_id DESC, h.id DESC LIMIT 1), 0),
	CASE WHEN c.history = 'member' THEN array(SELECT s.from_seq FROM member_spans AS s
		WHERE s.chat_id = c.id AND s.user_id = m.user_id ORDER BY s.from_seq) END,
	CASE WHEN c.history = 'member' THEN array(SELECT s.to_seq FROM member_spans AS s
		WHERE s.chat_id = c.id AND s.user_id = m.user_id ORDER BY s.from_seq) END
	FROM members AS m JOIN chats AS c ON c.id = m.chat_id
	LEFT JOIN reads AS r ON r.chat_id = m.chat_id AND r.user_id = m.user_id
	WHERE m.user_id = $1 AND ($2 = '' OR m.chat_id = $2) AND NOT c.closed`

// readTx begins a read-only transaction on one snapshot, with bitmap scans
// off for it. A page must walk history_unread in order and stop at its
// limit; under a generic plan (pgx prepares every statement, and
// PostgreSQL may switch a prepared statement to a generic plan after five
// runs) the planner guesses a chat's range holds a few rows and prefers a
// bitmap scan of the whole range and a sort, which for the newest page of
// a long chat reads every message of it (TestPagePlans caught it).
func (db *DB) readTx(ctx context.Context) (pgx.Tx, error) {
	return db.pool.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly,
		BeginQuery: readTxBegin})
}

// readTxBegin opens readTx's transaction in one round trip.
const readTxBegin = `BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY; SET LOCAL enable_bitmapscan = off`

// core is the DB as the shared algorithms of storecore see it (DB.Methods:
// AddMember, RemoveMember and the ChatAPI's changes and reads).
//
// Serializing a change of members with Commit: AddMember and
// RemoveMember take the append lock (AppendLockKey, changeTx.LockAppend)
// first, the lock Commit's write round trip holds from its insert to its
// COMMIT. A commit holding it finishes first, and its messages are at or
// below a removal's cutoff (read under the lock). A commit that waits for
// it takes the statement snapshot of its insert after the change
// committed, so the insert's epoch check fails and Commit reads the member
// list again. AddMember then locks the chat row (FOR NO KEY UPDATE, which
// does not block the foreign key checks of members and direct_pairs), so
// concurrent additions to one group cannot overshoot MaxGroupMembers.
type core struct{ db *DB }

// Begin implements storecore.Backend: a read-write transaction on a pooled
// connection. A BEGIN the database's ending of the session failed is sent
// again on another connection (again).
func (c core) Begin(ctx context.Context, op string) (storecore.ChangeTx, error) {
	tx, err := again(ctx, c.db, c.db.pool.Begin) // BEGIN has no effect to repeat
	if err != nil {
		return nil, unavailable(op, err)
	}
	return &changeTx{tx: tx, op: op}, nil
}

// Read implements storecore.Backend: readTx. The reads that use it
// (Messages, ChatFor, Sees, ChatList) are tried whole once more when the
// database ended the session under them (again).
func (c core) Read(ctx context.Context, op string) (storecore.ReadTx, error) {
	tx, err := c.db.readTx(ctx)
	if err != nil {
		return nil, unavailable(op, err)
	}
	return readTx{tx}, nil
}

// Messages implements history.ChatAPI: storecore's Messages in one
// read-only transaction (core.Read), tried whole once more when the
// database ended the session under it, at its BEGIN or any statement
// after (again).
func (db *DB) Messages(ctx context.Context, q history.PageQuery) (page []history.Message, more bool, err error) {
	_, err = again(ctx, db, func(ctx context.Context) (struct{}, error) {
		page, more, err = db.Methods.Messages(ctx, q)
		return struct{}{}, err
	})
	return page, more, err
}

// ChatFor implements history.ChatAPI: storecore's ChatFor, tried again as
// Messages is.
func (db *DB) ChatFor(ctx context.Context, chatID, user string) (history.Chat, error) {
	return again(ctx, db, func(ctx context.Context) (history.Chat, error) { return db.Methods.ChatFor(ctx, chatID, user) })
}

// Sees implements history.ChatAPI: storecore's Sees, tried again as
// Messages is.
func (db *DB) Sees(ctx context.Context, chatID, user string, seq int64) (bool, error) {
	return again(ctx, db, func(ctx context.Context) (bool, error) { return db.Methods.Sees(ctx, chatID, user, seq) })
}

// ChatList implements history.ChatAPI: storecore's ChatList, tried again
// as Messages is.
func (db *DB) ChatList(ctx context.Context, user, cursor string, limit int) (chats []history.Chat, next string, err error) {
	_, err = again(ctx, db, func(ctx context.Context) (struct{}, error) {
		chats, next, err = db.Methods.ChatList(ctx, user, cursor, limit)
		return struct{}{}, err
	})
	return chats, next, err
}

// changeTx is a read-write transaction whose writes are queued in one
// batch, sent in one round trip before the next read or the COMMIT.
type changeTx struct {
	tx pgx.Tx
	op string
	b  *pgx.Batch
}

// queue adds a write to the pending batch.
func (t *changeTx) queue(query string, args ...any) error {
	if t.b == nil {
		t.b = &pgx.Batch{}
	}
	t.b.Queue(query, args...)
	return nil
}

// flush sends the pending batch.
func (t *changeTx) flush(ctx context.Context) error {
	if t.b == nil {
		return nil
	}
	b := t.b
	t.b = nil
	if err := t.tx.SendBatch(ctx, b).Close(); err != nil {
		return unavailable(t.op, err)
	}
	return nil
}

// LockAppend takes the append lock (AppendLockKey), the lock Commit's
// write round trip holds from its insert to its COMMIT.
func (t *changeTx) LockAppend(ctx context.Context) error {
	if err := t.flush(ctx); err != nil {
		return err
	}
	if _, err := t.tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, AppendLockKey); err != nil {
		return unavailable(t.op, err)
	}
	return nil
}

// LockChat locks the chat row FOR NO KEY UPDATE, which does not block
// the foreign key checks of members and direct_pairs.
func (t *changeTx) LockChat(ctx context.Context, chatID string) error {
	if err := t.flush(ctx); err != nil {
		return err
	}
	var locked string
	switch err := t.tx.QueryRow(ctx, `SELECT id FROM chats WHERE id = $1 FOR NO KEY UPDATE`, chatID).Scan(&locked); {
	case errors.Is(err, pgx.ErrNoRows):
		return storecore.NotFound(chatID)
	case err != nil:
		return unavailable(t.op, err)
	}
	return nil
}

func (t *changeTx) Chat(ctx context.Context, chatID string) (history.Chat, error) {
	if err := t.flush(ctx); err != nil {
		return history.Chat{}, err
	}
	c, err := scanChat(t.tx.QueryRow(ctx, `SELECT `+chatColumns+` FROM chats AS c WHERE c.id = $1`, chatID))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return history.Chat{}, storecore.NotFound(chatID)
	case err != nil:
		return history.Chat{}, unavailable(t.op, err)
	}
	return c, nil
}

func (t *changeTx) MaxSeq(ctx context.Context) (int64, error) {
	if err := t.flush(ctx); err != nil {
		return 0, err
	}
	var cutoff int64
	if err := t.tx.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM history`).Scan(&cutoff); err != nil {
		return 0, unavailable(t.op, err)
	}
	return cutoff, nil
}

// InsertMember: commits wait for the append lock this transaction holds,
// so max(id) is every Seq committed so far.
func (t *changeTx) InsertMember(_ context.Context, chatID, user string, joinedAt int64) error {
	return t.queue(`INSERT INTO members (chat_id, user_id, joined_at, joined_seq)
		VALUES ($1, $2, $3, (SELECT coalesce(max(id), 0) FROM history))`, chatID, user, joinedAt)
}

func (t *changeTx) EndSpan(_ context.Context, chatID, user string, cutoff int64) error {
	return t.queue(`INSERT INTO member_spans (chat_id, user_id, from_seq, to_seq)
		SELECT chat_id, user_id, joined_seq, $3 FROM members WHERE chat_id = $1 AND user_id = $2 AND joined_seq < $3
		ON CONFLICT (chat_id, user_id, from_seq) DO UPDATE SET to_seq = greatest(member_spans.to_seq, excluded.to_seq)`,
		chatID, user, cutoff)
}

func (t *changeTx) DeleteMember(_ context.Context, chatID, user string) error {
	return t.queue(`DELETE FROM members WHERE chat_id = $1 AND user_id = $2`, chatID, user)
}

func (t *changeTx) KeepAdmin(_ context.Context, chatID string, at int64, steppingDown string) error {
	return t.queue(keepAdminSQL, chatID, at, steppingDown)
}

func (t *changeTx) CloseChat(_ context.Context, chatID string) error {
	return t.queue(`UPDATE chats SET closed = true WHERE id = $1`, chatID)
}

func (t *changeTx) BumpEpoch(context.Context) error {
	return t.queue(`UPDATE membership_epoch SET epoch = epoch + 1 WHERE id = 1`)
}

func (t *changeTx) SetTitle(_ context.Context, chatID, title string) error {
	return t.queue(`UPDATE chats SET title = $1 WHERE id = $2`, title, chatID)
}

func (t *changeTx) SetAdmin(_ context.Context, chatID, user string, at int64) error {
	return t.queue(`UPDATE members SET admin_at = $1 WHERE chat_id = $2 AND user_id = $3`, at, chatID, user)
}

func (t *changeTx) Commit(ctx context.Context) error {
	if err := t.flush(ctx); err != nil {
		return err
	}
	if err := t.tx.Commit(ctx); err != nil {
		return unavailable(t.op, err)
	}
	return nil
}

func (t *changeTx) Rollback() { txRollback(t.tx) }

// readTx is a read-only REPEATABLE READ transaction (DB.readTx).
type readTx struct{ tx pgx.Tx }

func (t readTx) Rollback() { txRollback(t.tx) }

// Memberships implements storecore.ReadTx: the rows of membershipSQL,
// the intervals of a "member" group with them.
func (t readTx) Memberships(ctx context.Context, user, chatID string) ([]storecore.Membership, error) {
	rows, err := t.tx.Query(ctx, membershipSQL, user, chatID)
	if err != nil {
		return nil, unavailable("memberships", err)
	}
	ms, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (storecore.Membership, error) {
		var c history.Chat
		var created, joinedAt, joinedSeq, mark, newest int64
		var from, to []int64
		err := row.Scan(&c.ID, &c.Kind, &c.Title, &c.CreatedBy, &created, &c.History,
			&joinedAt, &joinedSeq, &mark, &newest, &from, &to)
		m := storecore.NewMembership(c, created, joinedAt, joinedSeq, mark, newest)
		for i := range min(len(from), len(to)) {
			m.Vis.Spans = append(m.Vis.Spans, history.Span{From: from[i], To: to[i]})
		}
		return m, err
	})
	if err != nil {
		return nil, unavailable("memberships", err)
	}
	return ms, nil
}

// Spans implements storecore.ReadTx: Memberships read them already.
func (t readTx) Spans(context.Context, string, string, *history.Visibility) error { return nil }

// ChatOpen implements storecore.ReadTx.
func (t readTx) ChatOpen(ctx context.Context, chatID string) (bool, error) {
	var closed bool
	switch err := t.tx.QueryRow(ctx, `SELECT closed FROM chats WHERE id = $1`, chatID).Scan(&closed); {
	case errors.Is(err, pgx.ErrNoRows):
		return false, nil
	case err != nil:
		return false, unavailable("chat", err)
	}
	return !closed, nil
}

// Page implements storecore.ReadTx: beforeSQL or sinceSQL, the cursor
// resolved in the same statement.
func (t readTx) Page(ctx context.Context, m storecore.Membership, user, cursor string, backward bool, limit int) ([]history.Message, error) {
	floor := m.Vis.Floor()
	var rows pgx.Rows
	var err error
	if backward {
		rows, err = t.tx.Query(ctx, beforeSQL, m.Chat.ID, floor, m.Vis.Shared, m.Vis.Joined, user, int64(limit), int64(math.MaxInt64), cursor)
	} else {
		rows, err = t.tx.Query(ctx, sinceSQL, m.Chat.ID, floor, m.Vis.Shared, m.Vis.Joined, user, int64(limit), cursor)
	}
	if err != nil {
		return nil, unavailable("page", err)
	}
	msgs, err := scanMessages(rows, m.Chat.ID)
	if err != nil {
		return nil, unavailable("page", err)
	}
	return msgs, nil
}

// scanMessages collects the rows of beforeSQL or sinceSQL.
func scanMessages(rows pgx.Rows, chatID string) ([]history.Message, error) {
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (history.Message, error) {
		m := history.Message{ChatID: chatID}
		var sentAt, editedAt int64
		var kind int16
		var ref string
		var deleted bool
		err := row.Scan(&m.Seq, &m.ID, &m.SenderID, &m.SenderDevice, &m.CorrelationID, &m.Body, &sentAt,
			&kind, &ref, &editedAt, &deleted)
		m.SentAt = fromNanos(sentAt)
		setKind(&m, int(kind), ref, editedAt, deleted)
		return m, err
	})
}

// fillSQL reads, for each chat $1[i] (marker or floor $2[i], floor $3[i],
// shared $4[i], interval start $5[i]) of reader $6, the unread count up to
// $7 and the last visible message, ordinary messages only (kind 0,
// PROTOCOL.md §7.3; the count leaves deleted ones out, docs/design.md
// "Edit and delete"): one bounded range of history_unread each, in one
// statement.
const fillSQL = `SELECT p.chat_id, u.n, l.id, l.message_id, l.sender_id, l.sender_device, l.correlation_id, l.body, l.sent_at,
		l.edited_at, l.deleted
	FROM (SELECT x.chat_id COLLATE "C" AS chat_id, x.mark, x.floor, x.shared, x.joined
		FROM unnest($1::text[], $2::bigint[], $3::bigint[], $4::bool[], $5::bigint[]) AS x(chat_id, mark, floor, shared, joined)) AS p
	CROSS JOIN LATERAL (SELECT count(*) AS n FROM (SELECT 1 FROM history AS h
		WHERE h.chat_id = p.chat_id AND h.id > p.mark AND h.sender_id <> $6 AND h.kind = 0 AND NOT h.deleted AND ` + fillVisibleSQL + `
		ORDER BY h.chat_id, h.id LIMIT $7) AS x) AS u
	LEFT JOIN LATERAL (SELECT h.id, h.message_id, h.sender_id, h.sender_device, h.correlation_id, h.body, h.sent_at,
			h.edited_at, h.deleted
		FROM history AS h WHERE h.chat_id = p.chat_id AND h.id > p.floor AND h.kind = 0 AND ` + fillVisibleSQL + `
		ORDER BY h.chat_id DESC, h.id DESC LIMIT 1) AS l ON true`

// fillVisibleSQL is visibleSQL on the columns of fillSQL's p.
const fillVisibleSQL = `(p.shared OR h.id > p.joined OR EXISTS (SELECT 1 FROM member_spans AS s
	WHERE s.chat_id = p.chat_id AND s.user_id = $6 AND s.from_seq < h.id AND s.to_seq >= h.id))`

// Fill implements storecore.ReadTx: members, admins and read markers,
// unread counts and last messages, in two statements sent in one round
// trip.
func (t readTx) Fill(ctx context.Context, f *storecore.Fill, user string) error {
	p := f.Params()
	b := &pgx.Batch{}
	b.Queue(`SELECT m.chat_id, m.user_id, m.admin_at, r.message_id
		FROM members AS m LEFT JOIN reads AS r ON r.chat_id = m.chat_id AND r.user_id = m.user_id
		WHERE m.chat_id = ANY($1) ORDER BY m.chat_id, m.user_id`, p.IDs)
	b.Queue(fillSQL, p.IDs, p.Marks, p.Floors, p.Shared, p.Joined, user, int64(history.MaxUnread))
	br := t.tx.SendBatch(ctx, b)
	defer br.Close()
	rows, _ := br.Query()
	var chatID, u string
	var at int64
	var read *string
	if _, err := pgx.ForEachRow(rows, []any{&chatID, &u, &at, &read}, func() error {
		f.Member(chatID, u, at, read)
		return nil
	}); err != nil {
		return unavailable("chat members", err)
	}
	rows, _ = br.Query()
	var n int
	var seq, sentAt, editedAt *int64
	var mid, sender, device, corr, body *string
	var deleted *bool
	if _, err := pgx.ForEachRow(rows, []any{&chatID, &n, &seq, &mid, &sender, &device, &corr, &body, &sentAt, &editedAt, &deleted}, func() error {
		if seq == nil {
			f.Last(chatID, n, nil, 0, false)
			return nil
		}
		f.Last(chatID, n, &history.Message{Seq: *seq, ID: *mid, SenderID: *sender,
			SenderDevice: *device, CorrelationID: *corr, Body: *body, SentAt: fromNanos(*sentAt)}, *editedAt, *deleted)
		return nil
	}); err != nil {
		return unavailable("unread", err)
	}
	if err := br.Close(); err != nil {
		return unavailable("chat list", err)
	}
	return nil
}

// IsAdmin implements history.ChatAPI: one probe of the members key.
func (db *DB) IsAdmin(ctx context.Context, chatID, user string) (bool, error) {
	return again(ctx, db, func(ctx context.Context) (bool, error) { return db.isAdminOnce(ctx, chatID, user) })
}

// isAdminOnce is one try of IsAdmin.
func (db *DB) isAdminOnce(ctx context.Context, chatID, user string) (bool, error) {
	if !storable(chatID) {
		return false, storecore.NotFound(chatID)
	}
	var closed, admin bool
	err := db.pool.QueryRow(ctx, `SELECT c.closed, EXISTS (SELECT 1 FROM members AS m
		WHERE m.chat_id = c.id AND m.user_id = $2 AND m.admin_at > 0) FROM chats AS c WHERE c.id = $1`, chatID, user).Scan(&closed, &admin)
	switch {
	case errors.Is(err, pgx.ErrNoRows) || closed:
		return false, storecore.NotFound(chatID)
	case err != nil:
		return false, unavailable("is admin", err)
	}
	return admin, nil
}

// keepAdminSQL makes the member of chat $1 who joined earliest (then by
// id; the member $3 stepping down last) an admin since $2 when the group has
// none left (PROTOCOL.md §7.5).
const keepAdminSQL = `UPDATE members SET admin_at = $2 WHERE chat_id = $1
	AND NOT EXISTS (SELECT 1 FROM members AS o WHERE o.chat_id = $1 AND o.admin_at > 0)
	AND user_id = (SELECT o.user_id FROM members AS o WHERE o.chat_id = $1 ORDER BY o.user_id = $3, o.joined_at, o.user_id LIMIT 1)
	AND EXISTS (SELECT 1 FROM chats AS c WHERE c.id = $1 AND c.kind = 'group')`
