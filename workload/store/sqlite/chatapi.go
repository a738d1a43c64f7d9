package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"math"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/store/storecore"
)

// The calls of PROTOCOL.md §7 (history.ChatAPI): history pages in both
// directions and by membership interval, the chat list by activity, one
// chat as its member sees it, admins and renames. Reads run on the read
// pool in one read-only transaction each; changes on the writer.

var _ history.ChatAPI = (*DB)(nil)

// visibleSQL is the filter of a member's visible messages of history
// (PROTOCOL.md §7.6), as a condition on a row h of chat ?1 for user ?5:
// ?3 is 1 for shared history, ?4 the Seq the current interval starts
// after.
const visibleSQL = `(?3 OR h.id > ?4 OR EXISTS (SELECT 1 FROM member_spans AS s
	WHERE s.chat_id = ?1 AND s.user_id = ?5 AND s.from_seq < h.id AND s.to_seq >= h.id))`

// Page reads, all ranges of history_unread (chat_id, id, sender_id): ?2 is
// the lower bound (exclusive), ?6 the limit, ?7 the upper bound
// (exclusive).
const (
	forwardSQL = `SELECT h.id, h.message_id, h.sender_id, h.sender_device, h.correlation_id, h.body, h.sent_at,
	h.kind, h.ref, h.edited_at, h.deleted FROM history AS h WHERE h.chat_id = ?1 AND h.id > ?2 AND ` + visibleSQL + ` ORDER BY h.id LIMIT ?6`
	backwardSQL = `SELECT h.id, h.message_id, h.sender_id, h.sender_device, h.correlation_id, h.body, h.sent_at,
	h.kind, h.ref, h.edited_at, h.deleted FROM history AS h WHERE h.chat_id = ?1 AND h.id > ?2 AND h.id < ?7 AND ` + visibleSQL + ` ORDER BY h.id DESC LIMIT ?6`
	// unreadVisibleSQL counts others' visible ordinary messages that are
	// not deleted (kind 0, deleted 0: PROTOCOL.md §7.3, docs/design.md
	// "Edit and delete") above ?2 (the reader's marker or the floor), up to
	// ?6 (history.MaxUnread).
	unreadVisibleSQL = `SELECT count(*) FROM (SELECT 1 FROM history AS h
	WHERE h.chat_id = ?1 AND h.id > ?2 AND h.sender_id <> ?5 AND h.kind = 0 AND h.deleted = 0 AND ` + visibleSQL + ` ORDER BY h.id LIMIT ?6)`
)

// core is the DB as the shared algorithms of storecore see it (DB.Methods:
// AddMember, RemoveMember and the ChatAPI's changes and reads): a change
// runs on the writer connection, which Commit also holds for its whole
// transaction, and bumps the membership epoch Commit checks inside its
// transaction, so a commit either precedes a removal (its Seq is at or
// below the cutoff) or reads the member list without the removed user; a
// read runs on the read pool in one read-only transaction.
type core struct{ db *DB }

// Begin implements storecore.Backend.
func (c core) Begin(ctx context.Context, op string) (storecore.ChangeTx, error) {
	tx, err := c.db.w.BeginTx(ctx, nil)
	if err != nil {
		return nil, unavailable(op, err)
	}
	return &changeTx{tx: tx, op: op}, nil
}

// Read implements storecore.Backend.
func (c core) Read(ctx context.Context, op string) (storecore.ReadTx, error) {
	tx, err := c.db.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, unavailable(op, err)
	}
	return readTx{tx}, nil
}

// changeTx is a write transaction on the writer connection, which Commit
// also holds for its whole transaction: the locks of storecore.ChangeTx
// are that connection, so LockAppend and LockChat do nothing.
type changeTx struct {
	tx *sql.Tx
	op string
}

func (t *changeTx) exec(ctx context.Context, query string, args ...any) error {
	if _, err := t.tx.ExecContext(ctx, query, args...); err != nil {
		return unavailable(t.op, err)
	}
	return nil
}

func (t *changeTx) LockAppend(context.Context) error       { return nil }
func (t *changeTx) LockChat(context.Context, string) error { return nil }
func (t *changeTx) Chat(ctx context.Context, chatID string) (history.Chat, error) {
	return loadChat(ctx, t.tx, chatID)
}

func (t *changeTx) MaxSeq(ctx context.Context) (int64, error) {
	var cutoff int64
	if err := t.tx.QueryRowContext(ctx, `SELECT coalesce(max(id), 0) FROM history`).Scan(&cutoff); err != nil {
		return 0, unavailable(t.op, err)
	}
	return cutoff, nil
}

// InsertMember: the writer is the only one, so no Seq is taken before
// this commits.
func (t *changeTx) InsertMember(ctx context.Context, chatID, user string, joinedAt int64) error {
	return t.exec(ctx, `INSERT INTO members (chat_id, user_id, joined_at, joined_seq, admin_at)
		VALUES (?, ?, ?, coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'history'), 0), 0)`,
		chatID, user, joinedAt)
}

func (t *changeTx) EndSpan(ctx context.Context, chatID, user string, cutoff int64) error {
	return t.exec(ctx, `INSERT INTO member_spans (chat_id, user_id, from_seq, to_seq)
		SELECT chat_id, user_id, joined_seq, ?3 FROM members WHERE chat_id = ?1 AND user_id = ?2 AND joined_seq < ?3
		ON CONFLICT DO UPDATE SET to_seq = max(to_seq, excluded.to_seq)`, chatID, user, cutoff)
}

func (t *changeTx) DeleteMember(ctx context.Context, chatID, user string) error {
	return t.exec(ctx, `DELETE FROM members WHERE chat_id = ? AND user_id = ?`, chatID, user)
}

func (t *changeTx) KeepAdmin(ctx context.Context, chatID string, at int64, steppingDown string) error {
	return t.exec(ctx, keepAdminSQL, chatID, at, steppingDown)
}

func (t *changeTx) CloseChat(ctx context.Context, chatID string) error {
	return t.exec(ctx, `UPDATE chats SET closed = 1 WHERE id = ?`, chatID)
}

func (t *changeTx) BumpEpoch(ctx context.Context) error {
	return t.exec(ctx, `UPDATE membership_epoch SET epoch = epoch + 1 WHERE id = 1`)
}

func (t *changeTx) SetTitle(ctx context.Context, chatID, title string) error {
	return t.exec(ctx, `UPDATE chats SET title = ? WHERE id = ?`, title, chatID)
}

func (t *changeTx) SetAdmin(ctx context.Context, chatID, user string, at int64) error {
	return t.exec(ctx, `UPDATE members SET admin_at = ? WHERE chat_id = ? AND user_id = ?`, at, chatID, user)
}

func (t *changeTx) Commit(context.Context) error { return commitTx(t.tx, t.op) }
func (t *changeTx) Rollback()                    { rollback(t.tx) }

// readTx is a read-only transaction on the read pool: one WAL snapshot.
type readTx struct{ tx *sql.Tx }

func (t readTx) Rollback() { rollback(t.tx) }

// membershipSQL lists the chats of member ?1 (all, or the one ?2 when not
// empty) with what the list and the visibility need; the newest ordinary
// message (kind 0: edits and deletes do not move a chat up the list,
// PROTOCOL.md §7.3) is one probe at the end of the chat's range of
// history_unread.
const membershipSQL = `SELECT c.id, c.kind, c.title, c.created_by, c.created_at, c.history, m.joined_at, m.joined_seq,
	coalesce((SELECT r.seq FROM reads AS r WHERE r.chat_id = c.id AND r.user_id = m.user_id), 0),
	coalesce((SELECT h.sent_at FROM history AS h WHERE h.chat_id = c.id AND h.kind = 0
		AND h.id > (CASE WHEN c.history = 'member' THEN m.joined_seq ELSE 0 END) ORDER BY h.id DESC LIMIT 1), 0)
	FROM members AS m JOIN chats AS c ON c.id = m.chat_id
	WHERE m.user_id = ?1 AND (?2 = '' OR m.chat_id = ?2) AND c.closed = 0`

// Memberships implements storecore.ReadTx: the rows of membershipSQL,
// without the intervals (Spans reads them).
func (t readTx) Memberships(ctx context.Context, user, chatID string) ([]storecore.Membership, error) {
	rows, err := t.tx.QueryContext(ctx, membershipSQL, user, chatID)
	if err != nil {
		return nil, unavailable("chat list", err)
	}
	defer rows.Close()
	var out []storecore.Membership
	for rows.Next() {
		var c history.Chat
		var created, joinedAt, joinedSeq, mark, newest int64
		if err := rows.Scan(&c.ID, &c.Kind, &c.Title, &c.CreatedBy, &created, &c.History,
			&joinedAt, &joinedSeq, &mark, &newest); err != nil {
			return nil, unavailable("chat list", err)
		}
		out = append(out, storecore.NewMembership(c, created, joinedAt, joinedSeq, mark, newest))
	}
	if err := rows.Err(); err != nil {
		return nil, unavailable("chat list", err)
	}
	return out, nil
}

// Spans implements storecore.ReadTx: user's closed intervals of chatID.
func (t readTx) Spans(ctx context.Context, chatID, user string, vis *history.Visibility) error {
	rows, err := t.tx.QueryContext(ctx, `SELECT from_seq, to_seq FROM member_spans WHERE chat_id = ? AND user_id = ? ORDER BY from_seq`, chatID, user)
	if err != nil {
		return unavailable("member spans", err)
	}
	defer rows.Close()
	for rows.Next() {
		var s history.Span
		if err := rows.Scan(&s.From, &s.To); err != nil {
			return unavailable("member spans", err)
		}
		vis.Spans = append(vis.Spans, s)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return unavailable("member spans", err)
	}
	return nil
}

// ChatOpen implements storecore.ReadTx.
func (t readTx) ChatOpen(ctx context.Context, chatID string) (bool, error) {
	var closed bool
	switch err := t.tx.QueryRowContext(ctx, `SELECT closed FROM chats WHERE id = ?`, chatID).Scan(&closed); {
	case errors.Is(err, sql.ErrNoRows):
		return false, nil
	case err != nil:
		return false, unavailable("chat", err)
	}
	return !closed, nil
}

// Page implements storecore.ReadTx: the cursor resolved (resolve), then
// forwardSQL or backwardSQL, one range of history_unread.
func (t readTx) Page(ctx context.Context, m storecore.Membership, user, cursor string, backward bool, limit int) ([]history.Message, error) {
	seq, ok, err := resolve(ctx, t.tx, m.Chat.ID, cursor)
	if err != nil {
		return nil, err
	}
	query, lower, upper := forwardSQL, max(seq, m.Vis.Floor()), int64(math.MaxInt64)
	if backward {
		query, lower = backwardSQL, m.Vis.Floor()
		if ok {
			upper = seq
		} // else before=end, or unresolvable: the newest page
	}
	rows, err := t.tx.QueryContext(ctx, query, m.Chat.ID, lower, m.Vis.Shared, m.Vis.Joined, user, int64(limit), upper)
	if err != nil {
		return nil, unavailable("page", err)
	}
	defer rows.Close()
	msgs := make([]history.Message, 0, min(limit, 512))
	for rows.Next() {
		msg := history.Message{ChatID: m.Chat.ID}
		var sentAt, editedAt int64
		var kind int
		var ref string
		var deleted bool
		if err := rows.Scan(&msg.Seq, &msg.ID, &msg.SenderID, &msg.SenderDevice, &msg.CorrelationID, &msg.Body, &sentAt,
			&kind, &ref, &editedAt, &deleted); err != nil {
			return nil, unavailable("page", err)
		}
		msg.SentAt = fromNanos(sentAt)
		setKind(&msg, kind, ref, editedAt, deleted)
		msgs = append(msgs, msg)
	}
	if err := rows.Err(); err != nil {
		return nil, unavailable("page", err)
	}
	return msgs, nil
}

// resolve returns the Seq of messageID in chatID, ok false when it is not
// one of the chat's retained messages.
func resolve(ctx context.Context, q querier, chatID, messageID string) (int64, bool, error) {
	if messageID == "" {
		return 0, false, nil
	}
	var seq int64
	switch err := q.QueryRowContext(ctx, `SELECT id FROM history WHERE message_id = ? AND chat_id = ?`, messageID, chatID).Scan(&seq); {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, unavailable("page cursor", err)
	}
	return seq, true, nil
}

// Fill implements storecore.ReadTx: members, admins and read markers in
// one query, unread counts and last messages in another.
func (t readTx) Fill(ctx context.Context, f *storecore.Fill, user string) error {
	p := f.Params()
	idsJSON, err := json.Marshal(p.IDs)
	if err != nil {
		return unavailable("chat members", err)
	}
	rows, err := t.tx.QueryContext(ctx, `SELECT m.chat_id, m.user_id, m.admin_at, r.message_id
		FROM members AS m LEFT JOIN reads AS r ON r.chat_id = m.chat_id AND r.user_id = m.user_id
		WHERE m.chat_id IN (SELECT value FROM json_each(?)) ORDER BY m.chat_id, m.user_id`, string(idsJSON))
	if err != nil {
		return unavailable("chat members", err)
	}
	for rows.Next() {
		var chatID, u string
		var at int64
		var read sql.NullString
		if err := rows.Scan(&chatID, &u, &at, &read); err != nil {
			rows.Close()
			return unavailable("chat members", err)
		}
		var mark *string
		if read.Valid {
			mark = &read.String
		}
		f.Member(chatID, u, at, mark)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return unavailable("chat members", err)
	}
	// The unread counts and last messages of all the chats in one
	// statement: a bounded range of history_unread each.
	// The chats go in as one JSON parameter: binding thousands of
	// parameters costs more than the query (quadratic in the driver).
	list := make([][5]any, len(p.IDs))
	for i := range p.IDs {
		list[i] = [5]any{p.IDs[i], p.Marks[i], p.Floors[i], p.Shared[i], p.Joined[i]}
	}
	pj, err := json.Marshal(list)
	if err != nil {
		return unavailable("unread and last message", err)
	}
	rows, err = t.tx.QueryContext(ctx, `WITH p AS (SELECT j.value ->> 0 AS chat_id, j.value ->> 1 AS mark, j.value ->> 2 AS floor,
			j.value ->> 3 AS shared, j.value ->> 4 AS joined FROM json_each(?3) AS j),
		q AS MATERIALIZED (SELECT p.chat_id,
			(SELECT count(*) FROM (SELECT 1 FROM history AS h
				WHERE h.chat_id = p.chat_id AND h.id > p.mark AND h.sender_id <> ?1 AND h.kind = 0 AND h.deleted = 0 AND `+fillVisibleSQL+`
				ORDER BY h.id LIMIT ?2)) AS n,
			(SELECT h.id FROM history AS h
				WHERE h.chat_id = p.chat_id AND h.id > p.floor AND h.kind = 0 AND `+fillVisibleSQL+` ORDER BY h.id DESC LIMIT 1) AS last
			FROM p)
		SELECT q.chat_id, q.n, l.id, l.message_id, l.sender_id, l.sender_device, l.correlation_id, l.body, l.sent_at,
			l.edited_at, l.deleted
		FROM q LEFT JOIN history AS l ON l.id = q.last`, user, history.MaxUnread, string(pj))
	if err != nil {
		return unavailable("unread and last message", err)
	}
	defer rows.Close()
	for rows.Next() {
		var chatID string
		var n int
		var seq, sentAt, editedAt sql.NullInt64
		var mid, sender, device, corr, body sql.NullString
		var deleted sql.NullBool
		if err := rows.Scan(&chatID, &n, &seq, &mid, &sender, &device, &corr, &body, &sentAt, &editedAt, &deleted); err != nil {
			return unavailable("unread and last message", err)
		}
		var last *history.Message
		if seq.Valid {
			last = &history.Message{Seq: seq.Int64, ID: mid.String, SenderID: sender.String,
				SenderDevice: device.String, CorrelationID: corr.String, Body: body.String, SentAt: fromNanos(sentAt.Int64)}
		}
		f.Last(chatID, n, last, editedAt.Int64, deleted.Bool)
	}
	if err := rows.Err(); err != nil {
		return unavailable("unread and last message", err)
	}
	return nil
}

// fillVisibleSQL is visibleSQL on the columns of Fill's p, for reader ?1.
const fillVisibleSQL = `(p.shared OR h.id > p.joined OR EXISTS (SELECT 1 FROM member_spans AS s
	WHERE s.chat_id = p.chat_id AND s.user_id = ?1 AND s.from_seq < h.id AND s.to_seq >= h.id))`

// IsAdmin implements history.ChatAPI: one probe of the members key.
func (db *DB) IsAdmin(ctx context.Context, chatID, user string) (bool, error) {
	var adminAt sql.NullInt64
	var closed bool
	err := db.r.QueryRowContext(ctx, `SELECT c.closed, (SELECT m.admin_at FROM members AS m WHERE m.chat_id = c.id AND m.user_id = ?2)
		FROM chats AS c WHERE c.id = ?1`, chatID, user).Scan(&closed, &adminAt)
	switch {
	case errors.Is(err, sql.ErrNoRows) || closed:
		return false, storecore.NotFound(chatID)
	case err != nil:
		return false, unavailable("is admin", err)
	}
	return adminAt.Valid && adminAt.Int64 > 0, nil
}

// keepAdminSQL makes the member of chat ?1 who joined earliest (then by
// id; the member ?3 stepping down last) an admin since ?2 when the group has
// none left (PROTOCOL.md §7.5).
const keepAdminSQL = `UPDATE members SET admin_at = ?2 WHERE chat_id = ?1
	AND NOT EXISTS (SELECT 1 FROM members AS o WHERE o.chat_id = ?1 AND o.admin_at > 0)
	AND user_id = (SELECT o.user_id FROM members AS o WHERE o.chat_id = ?1 ORDER BY o.user_id = ?3, o.joined_at, o.user_id LIMIT 1)
	AND EXISTS (SELECT 1 FROM chats AS c WHERE c.id = ?1 AND c.kind = 'group')`
