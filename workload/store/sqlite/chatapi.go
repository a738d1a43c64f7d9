package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/tetra-messenger/tetra/workload/history"
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

// membership is what the reading member's row says about one chat.
type membership struct {
	chat      history.Chat // kind, title, creator, creation, history
	joinedAt  int64
	joinedSeq int64
	mark      int64 // the member's read marker's Seq, 0 for none
	newest    int64 // SentAt of the newest message of the current interval (or chat), 0 for none
	vis       history.Visibility
}

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

// memberships reads the rows of membershipSQL.
func memberships(ctx context.Context, q querier, user, chatID string) ([]membership, error) {
	rows, err := q.QueryContext(ctx, membershipSQL, user, chatID)
	if err != nil {
		return nil, unavailable("chat list", err)
	}
	defer rows.Close()
	var out []membership
	for rows.Next() {
		var m membership
		var created int64
		if err := rows.Scan(&m.chat.ID, &m.chat.Kind, &m.chat.Title, &m.chat.CreatedBy, &created, &m.chat.History,
			&m.joinedAt, &m.joinedSeq, &m.mark, &m.newest); err != nil {
			return nil, unavailable("chat list", err)
		}
		m.chat.CreatedAt = fromNanos(created)
		m.vis = history.Visibility{Shared: m.chat.History != history.HistoryMember, Joined: m.joinedSeq}
		out = append(out, m)
	}
	if err := rows.Err(); err != nil {
		return nil, unavailable("chat list", err)
	}
	return out, nil
}

// activity is m's LastActivity (PROTOCOL.md §7.2).
func (m membership) activity() time.Time {
	var newest time.Time
	if m.newest != 0 {
		newest = fromNanos(m.newest)
	}
	return history.Activity(m.chat.CreatedAt, fromNanos(m.joinedAt), newest)
}

// spans reads user's closed intervals of chatID into vis.
func spans(ctx context.Context, q querier, chatID, user string, vis *history.Visibility) error {
	rows, err := q.QueryContext(ctx, `SELECT from_seq, to_seq FROM member_spans WHERE chat_id = ? AND user_id = ? ORDER BY from_seq`, chatID, user)
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
	return errors.Join(rows.Err(), rows.Close())
}

// member reads user's membership of chatID: ErrNotFound for an unknown or
// closed chat, ErrNotMember for a non-member.
func member(ctx context.Context, q querier, chatID, user string) (membership, error) {
	ms, err := memberships(ctx, q, user, chatID)
	if err != nil {
		return membership{}, err
	}
	if len(ms) == 1 {
		m := ms[0]
		if !m.vis.Shared {
			if err := spans(ctx, q, chatID, user, &m.vis); err != nil {
				return membership{}, err
			}
		}
		return m, nil
	}
	var closed bool
	switch err := q.QueryRowContext(ctx, `SELECT closed FROM chats WHERE id = ?`, chatID).Scan(&closed); {
	case errors.Is(err, sql.ErrNoRows) || closed:
		return membership{}, fmt.Errorf("%w: chat %q", history.ErrNotFound, chatID)
	case err != nil:
		return membership{}, unavailable("chat", err)
	}
	return membership{}, fmt.Errorf("%w: %q in chat %q", history.ErrNotMember, user, chatID)
}

// page runs forwardSQL or backwardSQL for m and returns the messages in
// Seq order (oldest first) and whether the query found more than limit.
func page(ctx context.Context, q querier, m membership, user string, lower, upper int64, limit int, backward bool) ([]history.Message, bool, error) {
	query := forwardSQL
	if backward {
		query = backwardSQL
	}
	lower = max(lower, m.vis.Floor())
	rows, err := q.QueryContext(ctx, query, m.chat.ID, lower, m.vis.Shared, m.vis.Joined, user, int64(limit)+1, upper)
	if err != nil {
		return nil, false, unavailable("page", err)
	}
	defer rows.Close()
	msgs := make([]history.Message, 0, min(limit, 512))
	more := false
	for rows.Next() {
		if len(msgs) == limit {
			more = true
			break
		}
		msg := history.Message{ChatID: m.chat.ID}
		var sentAt, editedAt int64
		var kind int
		var ref string
		var deleted bool
		if err := rows.Scan(&msg.Seq, &msg.ID, &msg.SenderID, &msg.SenderDevice, &msg.CorrelationID, &msg.Body, &sentAt,
			&kind, &ref, &editedAt, &deleted); err != nil {
			return nil, false, unavailable("page", err)
		}
		msg.SentAt = fromNanos(sentAt)
		setKind(&msg, kind, ref, editedAt, deleted)
		msgs = append(msgs, msg)
	}
	if err := rows.Err(); err != nil {
		return nil, false, unavailable("page", err)
	}
	if backward {
		slices.Reverse(msgs)
	}
	return msgs, more, nil
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

// Messages implements history.ChatAPI: one page of q.ChatID as q.User may
// read it (PROTOCOL.md §4, §7.1, §7.6), from one read snapshot. Forward
// pages start above Since (or the beginning); backward pages end below
// Before, or after the newest message when Before is history.PageEnd or
// does not resolve, and are returned oldest first. Each is one range of
// history_unread; in a "member" group the range starts at the member's
// first interval and the messages between its intervals are filtered out.
func (db *DB) Messages(ctx context.Context, q history.PageQuery) ([]history.Message, bool, error) {
	if err := q.Check(); err != nil {
		return nil, false, err
	}
	tx, err := db.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, false, unavailable("page", err)
	}
	defer rollback(tx)
	m, err := member(ctx, tx, q.ChatID, q.User)
	if err != nil {
		return nil, false, err
	}
	if q.Before == "" {
		since, _, err := resolve(ctx, tx, q.ChatID, q.Since)
		if err != nil {
			return nil, false, err
		}
		return page(ctx, tx, m, q.User, since, math.MaxInt64, q.Limit, false)
	}
	before, ok, err := resolve(ctx, tx, q.ChatID, q.Before)
	if err != nil {
		return nil, false, err
	}
	if !ok {
		before = math.MaxInt64 // before=end, or unresolvable: the newest page
	}
	return page(ctx, tx, m, q.User, 0, before, q.Limit, true)
}

// ChatFor implements history.ChatAPI on one read snapshot.
func (db *DB) ChatFor(ctx context.Context, chatID, user string) (history.Chat, error) {
	if err := validUser("user id", user); err != nil {
		return history.Chat{}, err
	}
	tx, err := db.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return history.Chat{}, unavailable("chat", err)
	}
	defer rollback(tx)
	m, err := member(ctx, tx, chatID, user)
	if err != nil {
		return history.Chat{}, err
	}
	chats, err := fill(ctx, tx, []membership{m}, user)
	if err != nil {
		return history.Chat{}, err
	}
	return chats[0], nil
}

// ChatList implements history.ChatAPI: every chat of user is read with
// its activity (one row of members_user each, plus one probe of
// history_unread for its newest message), the keys sorted in memory, and
// only the page's chats are filled. From one read snapshot.
func (db *DB) ChatList(ctx context.Context, user, cursor string, limit int) ([]history.Chat, string, error) {
	if err := validUser("user id", user); err != nil {
		return nil, "", err
	}
	if limit < 1 || limit > history.MaxListLimit {
		return nil, "", fmt.Errorf("%w: list limit %d, want 1..%d", history.ErrInvalid, limit, history.MaxListLimit)
	}
	var after *history.ListKey
	if cursor != "" {
		k, err := history.DecodeCursor(cursor)
		if err != nil {
			return nil, "", err
		}
		after = &k
	}
	tx, err := db.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, "", unavailable("chat list", err)
	}
	defer rollback(tx)
	ms, err := memberships(ctx, tx, user, "")
	if err != nil {
		return nil, "", err
	}
	keys := make([]history.ListKey, len(ms))
	for i, m := range ms {
		keys[i] = history.ListKey{Activity: nanos(m.activity()), ChatID: m.chat.ID}
	}
	idx, next := history.PageList(keys, after, limit)
	pageMs := make([]membership, len(idx))
	for j, i := range idx {
		pageMs[j] = ms[i]
		if !ms[i].vis.Shared {
			if err := spans(ctx, tx, ms[i].chat.ID, user, &pageMs[j].vis); err != nil {
				return nil, "", err
			}
		}
	}
	chats, err := fill(ctx, tx, pageMs, user)
	if err != nil {
		return nil, "", err
	}
	return chats, next, nil
}

// fill completes the chats of ms as user sees them: members, admins and
// read markers in one query, unread counts and last messages in another.
func fill(ctx context.Context, tx *sql.Tx, ms []membership, user string) ([]history.Chat, error) {
	chats := make([]history.Chat, len(ms))
	if len(ms) == 0 {
		return chats, nil
	}
	index := make(map[string]int, len(ms))
	ids := make([]string, len(ms))
	for i, m := range ms {
		chats[i] = m.chat
		chats[i].LastRead = map[string]string{}
		chats[i].LastActivity = m.activity()
		index[m.chat.ID] = i
		ids[i] = m.chat.ID
	}
	idsJSON, err := json.Marshal(ids)
	if err != nil {
		return nil, unavailable("chat members", err)
	}
	rows, err := tx.QueryContext(ctx, `SELECT m.chat_id, m.user_id, m.admin_at, r.message_id
		FROM members AS m LEFT JOIN reads AS r ON r.chat_id = m.chat_id AND r.user_id = m.user_id
		WHERE m.chat_id IN (SELECT value FROM json_each(?)) ORDER BY m.chat_id, m.user_id`, string(idsJSON))
	if err != nil {
		return nil, unavailable("chat members", err)
	}
	admins := make([][]admin, len(ms))
	for rows.Next() {
		var chatID, u string
		var at int64
		var read sql.NullString
		if err := rows.Scan(&chatID, &u, &at, &read); err != nil {
			rows.Close()
			return nil, unavailable("chat members", err)
		}
		i := index[chatID]
		chats[i].Members = append(chats[i].Members, u)
		if read.Valid {
			chats[i].LastRead[u] = read.String
		}
		if at > 0 {
			admins[i] = append(admins[i], admin{u, at})
		}
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, unavailable("chat members", err)
	}
	// The unread counts and last messages of all the chats in one
	// statement: a bounded range of history_unread each.
	// The chats go in as one JSON parameter: binding thousands of
	// parameters costs more than the query (quadratic in the driver).
	list := make([][5]any, len(ms))
	for i, m := range ms {
		list[i] = [5]any{m.chat.ID, max(m.mark, m.vis.Floor()), m.vis.Floor(), m.vis.Shared, m.vis.Joined}
	}
	pj, err := json.Marshal(list)
	if err != nil {
		return nil, unavailable("unread and last message", err)
	}
	rows, err = tx.QueryContext(ctx, `WITH p AS (SELECT j.value ->> 0 AS chat_id, j.value ->> 1 AS mark, j.value ->> 2 AS floor,
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
		return nil, unavailable("unread and last message", err)
	}
	defer rows.Close()
	for rows.Next() {
		var chatID string
		var n int
		var seq, sentAt, editedAt sql.NullInt64
		var mid, sender, device, corr, body sql.NullString
		var deleted sql.NullBool
		if err := rows.Scan(&chatID, &n, &seq, &mid, &sender, &device, &corr, &body, &sentAt, &editedAt, &deleted); err != nil {
			return nil, unavailable("unread and last message", err)
		}
		i := index[chatID]
		chats[i].Unread = n
		if seq.Valid {
			chats[i].LastMessage = &history.Message{Seq: seq.Int64, ID: mid.String, ChatID: chatID, SenderID: sender.String,
				SenderDevice: device.String, CorrelationID: corr.String, Body: body.String, SentAt: fromNanos(sentAt.Int64)}
			// An ordinary message (kind 0): its current body, editedAt
			// after an edit, or its tombstone after a delete (§7.3).
			setKind(chats[i].LastMessage, history.KindMessage, "", editedAt.Int64, deleted.Bool)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, unavailable("unread and last message", err)
	}
	for i := range chats {
		chats[i].Admins = adminOrder(admins[i])
	}
	return chats, nil
}

// fillVisibleSQL is visibleSQL on the columns of fill's p, for reader ?1.
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
		return false, fmt.Errorf("%w: chat %q", history.ErrNotFound, chatID)
	case err != nil:
		return false, unavailable("is admin", err)
	}
	return adminAt.Valid && adminAt.Int64 > 0, nil
}

// change runs fn on the writer inside one transaction with the chat as
// read in it, and returns the chat as read after fn. fn returns false to
// change nothing (the chat is then returned as read).
func (db *DB) change(ctx context.Context, op, chatID string, fn func(tx *sql.Tx, c history.Chat) (bool, error)) (history.Chat, error) {
	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return history.Chat{}, unavailable(op, err)
	}
	defer rollback(tx)
	c, err := loadChat(ctx, tx, chatID)
	if err != nil {
		return history.Chat{}, err
	}
	changed, err := fn(tx, c)
	if err != nil {
		return history.Chat{}, err
	}
	if changed {
		if c, err = loadChat(ctx, tx, chatID); err != nil {
			return history.Chat{}, err
		}
	}
	return c, commitTx(tx, op)
}

// Rename implements history.ChatAPI.
func (db *DB) Rename(ctx context.Context, chatID, by, title string) (history.Chat, error) {
	if err := validUser("user id", by); err != nil {
		return history.Chat{}, err
	}
	title, err := history.CheckTitle(title)
	if err != nil {
		return history.Chat{}, err
	}
	return db.change(ctx, "rename", chatID, func(tx *sql.Tx, c history.Chat) (bool, error) {
		if err := history.CheckAdminChange(c, by, "rename it"); err != nil {
			return false, err
		}
		if _, err := tx.ExecContext(ctx, `UPDATE chats SET title = ? WHERE id = ?`, title, chatID); err != nil {
			return false, unavailable("rename", err)
		}
		return true, nil
	})
}

// AddAdmin implements history.ChatAPI.
func (db *DB) AddAdmin(ctx context.Context, chatID, by, user string) (history.Chat, error) {
	if err := validUser("user id", by); err != nil {
		return history.Chat{}, err
	}
	if err := validUser("userId", user); err != nil {
		return history.Chat{}, err
	}
	return db.change(ctx, "add admin", chatID, func(tx *sql.Tx, c history.Chat) (bool, error) {
		if err := history.CheckAdminChange(c, by, "make admins"); err != nil {
			return false, err
		}
		if !c.HasMember(user) {
			return false, fmt.Errorf("%w: %q is not a member of the group", history.ErrInvalid, user)
		}
		if c.IsAdmin(user) {
			return false, nil
		}
		if _, err := tx.ExecContext(ctx, `UPDATE members SET admin_at = ? WHERE chat_id = ? AND user_id = ?`,
			nanos(time.Now()), chatID, user); err != nil {
			return false, unavailable("add admin", err)
		}
		return true, nil
	})
}

// RemoveAdmin implements history.ChatAPI.
func (db *DB) RemoveAdmin(ctx context.Context, chatID, by, user string) (history.Chat, error) {
	if err := validUser("user id", by); err != nil {
		return history.Chat{}, err
	}
	if err := validUser("userId", user); err != nil {
		return history.Chat{}, err
	}
	return db.change(ctx, "remove admin", chatID, func(tx *sql.Tx, c history.Chat) (bool, error) {
		switch {
		case !c.HasMember(by):
			return false, fmt.Errorf("%w: %q in chat %q", history.ErrNotMember, by, chatID)
		case c.Kind != history.KindGroup:
			return false, fmt.Errorf("%w: admins: group chats only", history.ErrInvalid)
		case by != user:
			return false, fmt.Errorf("%w: an admin may only step down itself", history.ErrForbidden)
		case !c.IsAdmin(user):
			return false, nil
		}
		if _, err := tx.ExecContext(ctx, `UPDATE members SET admin_at = 0 WHERE chat_id = ? AND user_id = ?`, chatID, user); err != nil {
			return false, unavailable("remove admin", err)
		}
		if _, err := tx.ExecContext(ctx, keepAdminSQL, chatID, nanos(time.Now()), user); err != nil {
			return false, unavailable("remove admin", err)
		}
		return true, nil
	})
}

// keepAdminSQL makes the member of chat ?1 who joined earliest (then by
// id; the member ?3 stepping down last) an admin since ?2 when the group has
// none left (PROTOCOL.md §7.5).
const keepAdminSQL = `UPDATE members SET admin_at = ?2 WHERE chat_id = ?1
	AND NOT EXISTS (SELECT 1 FROM members AS o WHERE o.chat_id = ?1 AND o.admin_at > 0)
	AND user_id = (SELECT o.user_id FROM members AS o WHERE o.chat_id = ?1 ORDER BY o.user_id = ?3, o.joined_at, o.user_id LIMIT 1)
	AND EXISTS (SELECT 1 FROM chats AS c WHERE c.id = ?1 AND c.kind = 'group')`

// loadChatOrClosed reads c again after a removal in tx: a group the
// removal emptied is closed and comes back with no members.
func loadChatOrClosed(ctx context.Context, tx *sql.Tx, c history.Chat) (history.Chat, error) {
	if len(c.Members) <= 1 {
		c.Members, c.Admins = []string{}, []string{}
		return c, nil
	}
	return loadChat(ctx, tx, c.ID)
}
