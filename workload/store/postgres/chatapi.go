package postgres

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetra-messenger/tetra/workload/history"
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

// membership is what the reading member's row says about one chat.
type membership struct {
	chat      history.Chat // kind, title, creator, creation, history
	joinedAt  int64
	joinedSeq int64
	mark      int64 // the member's read marker's Seq, 0 for none
	newest    int64 // SentAt of the newest message of the current interval (or chat), 0 for none
	vis       history.Visibility
}

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

// memberships reads the rows of membershipSQL.
func memberships(ctx context.Context, q pgx.Tx, user, chatID string) ([]membership, error) {
	rows, err := q.Query(ctx, membershipSQL, user, chatID)
	if err != nil {
		return nil, unavailable("chat list", err)
	}
	ms, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (membership, error) {
		var m membership
		var created int64
		var from, to []int64
		err := row.Scan(&m.chat.ID, &m.chat.Kind, &m.chat.Title, &m.chat.CreatedBy, &created, &m.chat.History,
			&m.joinedAt, &m.joinedSeq, &m.mark, &m.newest, &from, &to)
		m.chat.CreatedAt = fromNanos(created)
		m.vis = history.Visibility{Shared: m.chat.History != history.HistoryMember, Joined: m.joinedSeq}
		for i := range min(len(from), len(to)) {
			m.vis.Spans = append(m.vis.Spans, history.Span{From: from[i], To: to[i]})
		}
		return m, err
	})
	if err != nil {
		return nil, unavailable("chat list", err)
	}
	return ms, nil
}

// activity is m's LastActivity (PROTOCOL.md §7.2).
func (m membership) activity() time.Time {
	var newest time.Time
	if m.newest != 0 {
		newest = fromNanos(m.newest)
	}
	return history.Activity(m.chat.CreatedAt, fromNanos(m.joinedAt), newest)
}

// member reads user's membership of chatID: ErrNotFound for an unknown or
// closed chat, ErrNotMember for a non-member.
func member(ctx context.Context, tx pgx.Tx, chatID, user string) (membership, error) {
	if !storable(chatID) {
		return membership{}, fmt.Errorf("%w: chat %q", history.ErrNotFound, chatID)
	}
	ms, err := memberships(ctx, tx, user, chatID)
	if err != nil {
		return membership{}, err
	}
	if len(ms) == 1 {
		return ms[0], nil
	}
	var closed bool
	switch err := tx.QueryRow(ctx, `SELECT closed FROM chats WHERE id = $1`, chatID).Scan(&closed); {
	case errors.Is(err, pgx.ErrNoRows) || closed:
		return membership{}, fmt.Errorf("%w: chat %q", history.ErrNotFound, chatID)
	case err != nil:
		return membership{}, unavailable("chat", err)
	}
	return membership{}, fmt.Errorf("%w: %q in chat %q", history.ErrNotMember, user, chatID)
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

// Messages implements history.ChatAPI: one page of q.ChatID as q.User may
// read it (PROTOCOL.md §4, §7.1, §7.6). Forward pages start above Since (or
// the beginning); backward pages end below Before, or after the newest
// message when Before is history.PageEnd or does not resolve, and are
// returned oldest first. Each is one range of history_unread; in a
// "member" group the range starts at the member's first interval and the
// messages between its intervals are filtered out. Three round trips in
// one read-only transaction: the membership, the cursor with the page.
func (db *DB) Messages(ctx context.Context, q history.PageQuery) ([]history.Message, bool, error) {
	if err := q.Check(); err != nil {
		return nil, false, err
	}
	tx, err := db.readTx(ctx)
	if err != nil {
		return nil, false, unavailable("page", err)
	}
	defer txRollback(tx)
	m, err := member(ctx, tx, q.ChatID, q.User)
	if err != nil {
		return nil, false, err
	}
	cursor, backward := q.Since, false
	if q.Before != "" {
		cursor, backward = q.Before, true
	}
	if !storable(cursor) {
		cursor = "" // no message: the beginning, or the end
	}
	floor := m.vis.Floor()
	var rows pgx.Rows
	if backward {
		rows, err = tx.Query(ctx, beforeSQL, m.chat.ID, floor, m.vis.Shared, m.vis.Joined, q.User, int64(q.Limit)+1, int64(math.MaxInt64), cursor)
	} else {
		rows, err = tx.Query(ctx, sinceSQL, m.chat.ID, floor, m.vis.Shared, m.vis.Joined, q.User, int64(q.Limit)+1, cursor)
	}
	if err != nil {
		return nil, false, unavailable("page", err)
	}
	msgs, err := scanMessages(rows, m.chat.ID)
	if err != nil {
		return nil, false, unavailable("page", err)
	}
	more := len(msgs) > q.Limit
	if more {
		msgs = msgs[:q.Limit]
	}
	if backward {
		slices.Reverse(msgs)
	}
	if msgs == nil {
		msgs = []history.Message{}
	}
	return msgs, more, nil
}

// ChatFor implements history.ChatAPI on one snapshot.
func (db *DB) ChatFor(ctx context.Context, chatID, user string) (history.Chat, error) {
	if err := validUser("user id", user); err != nil {
		return history.Chat{}, err
	}
	tx, err := db.readTx(ctx)
	if err != nil {
		return history.Chat{}, unavailable("chat", err)
	}
	defer txRollback(tx)
	m, err := member(ctx, tx, chatID, user)
	if err != nil {
		return history.Chat{}, err
	}
	chats, err := fillChats(ctx, tx, []membership{m}, user)
	if err != nil {
		return history.Chat{}, err
	}
	return chats[0], nil
}

// ChatList implements history.ChatAPI: every chat of user is read with
// its activity (members_user, plus one probe of history_unread for its
// newest message), the keys sorted in memory, and only the page's chats
// are filled. On one snapshot.
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
	tx, err := db.readTx(ctx)
	if err != nil {
		return nil, "", unavailable("chat list", err)
	}
	defer txRollback(tx)
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
	}
	chats, err := fillChats(ctx, tx, pageMs, user)
	if err != nil {
		return nil, "", err
	}
	return chats, next, nil
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

// fillChats completes the chats of ms as user sees them: members, admins and
// read markers, unread counts and last messages, in two statements sent
// in one round trip.
func fillChats(ctx context.Context, tx pgx.Tx, ms []membership, user string) ([]history.Chat, error) {
	chats := make([]history.Chat, len(ms))
	if len(ms) == 0 {
		return chats, nil
	}
	index := make(map[string]int, len(ms))
	ids := make([]string, len(ms))
	marks := make([]int64, len(ms))
	floors := make([]int64, len(ms))
	shared := make([]bool, len(ms))
	joined := make([]int64, len(ms))
	for i, m := range ms {
		chats[i] = m.chat
		chats[i].LastRead = map[string]string{}
		chats[i].Members, chats[i].Admins = []string{}, []string{}
		chats[i].LastActivity = m.activity()
		index[m.chat.ID] = i
		ids[i] = m.chat.ID
		floors[i] = m.vis.Floor()
		marks[i] = max(m.mark, floors[i])
		shared[i] = m.vis.Shared
		joined[i] = m.vis.Joined
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT m.chat_id, m.user_id, m.admin_at, r.message_id
		FROM members AS m LEFT JOIN reads AS r ON r.chat_id = m.chat_id AND r.user_id = m.user_id
		WHERE m.chat_id = ANY($1) ORDER BY m.chat_id, m.user_id`, ids)
	b.Queue(fillSQL, ids, marks, floors, shared, joined, user, int64(history.MaxUnread))
	br := tx.SendBatch(ctx, b)
	defer br.Close()
	rows, _ := br.Query()
	type admin struct {
		user string
		at   int64
	}
	admins := make([][]admin, len(ms))
	var chatID, u string
	var at int64
	var read *string
	if _, err := pgx.ForEachRow(rows, []any{&chatID, &u, &at, &read}, func() error {
		i := index[chatID]
		chats[i].Members = append(chats[i].Members, u)
		if read != nil {
			chats[i].LastRead[u] = *read
		}
		if at > 0 {
			admins[i] = append(admins[i], admin{u, at})
		}
		return nil
	}); err != nil {
		return nil, unavailable("chat members", err)
	}
	rows, _ = br.Query()
	var n int
	var seq, sentAt, editedAt *int64
	var mid, sender, device, corr, body *string
	var deleted *bool
	if _, err := pgx.ForEachRow(rows, []any{&chatID, &n, &seq, &mid, &sender, &device, &corr, &body, &sentAt, &editedAt, &deleted}, func() error {
		i := index[chatID]
		chats[i].Unread = n
		if seq != nil {
			chats[i].LastMessage = &history.Message{Seq: *seq, ID: *mid, ChatID: chatID, SenderID: *sender,
				SenderDevice: *device, CorrelationID: *corr, Body: *body, SentAt: fromNanos(*sentAt)}
			// An ordinary message (kind 0): its current body, editedAt
			// after an edit, or its tombstone after a delete (§7.3).
			setKind(chats[i].LastMessage, history.KindMessage, "", *editedAt, *deleted)
		}
		return nil
	}); err != nil {
		return nil, unavailable("unread", err)
	}
	if err := br.Close(); err != nil {
		return nil, unavailable("chat list", err)
	}
	for i := range chats {
		slices.SortFunc(admins[i], func(a, b admin) int {
			if a.at != b.at {
				return int(min(max(a.at-b.at, -1), 1))
			}
			if a.user < b.user {
				return -1
			}
			return 1
		})
		for _, a := range admins[i] {
			chats[i].Admins = append(chats[i].Admins, a.user)
		}
	}
	return chats, nil
}

// IsAdmin implements history.ChatAPI: one probe of the members key.
func (db *DB) IsAdmin(ctx context.Context, chatID, user string) (bool, error) {
	if !storable(chatID) {
		return false, fmt.Errorf("%w: chat %q", history.ErrNotFound, chatID)
	}
	var closed, admin bool
	err := db.pool.QueryRow(ctx, `SELECT c.closed, EXISTS (SELECT 1 FROM members AS m
		WHERE m.chat_id = c.id AND m.user_id = $2 AND m.admin_at > 0) FROM chats AS c WHERE c.id = $1`, chatID, user).Scan(&closed, &admin)
	switch {
	case errors.Is(err, pgx.ErrNoRows) || closed:
		return false, fmt.Errorf("%w: chat %q", history.ErrNotFound, chatID)
	case err != nil:
		return false, unavailable("is admin", err)
	}
	return admin, nil
}

// change runs fn in one transaction with the chat row locked (FOR NO KEY
// UPDATE, so concurrent changes of one chat serialize) and the chat as read
// after the lock, and returns the chat as read after fn. fn returns false
// to change nothing.
func (db *DB) change(ctx context.Context, op, chatID string, fn func(tx pgx.Tx, c history.Chat) (bool, error)) (history.Chat, error) {
	if !storable(chatID) {
		return history.Chat{}, fmt.Errorf("%w: chat %q", history.ErrNotFound, chatID)
	}
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		return history.Chat{}, unavailable(op, err)
	}
	defer txRollback(tx)
	load := func() (history.Chat, error) {
		c, err := scanChat(tx.QueryRow(ctx, `SELECT `+chatColumns+` FROM chats AS c WHERE c.id = $1`, chatID))
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return history.Chat{}, fmt.Errorf("%w: chat %q", history.ErrNotFound, chatID)
		case err != nil:
			return history.Chat{}, unavailable(op, err)
		}
		return c, nil
	}
	var locked string
	switch err := tx.QueryRow(ctx, `SELECT id FROM chats WHERE id = $1 FOR NO KEY UPDATE`, chatID).Scan(&locked); {
	case errors.Is(err, pgx.ErrNoRows):
		return history.Chat{}, fmt.Errorf("%w: chat %q", history.ErrNotFound, chatID)
	case err != nil:
		return history.Chat{}, unavailable(op, err)
	}
	c, err := load()
	if err != nil {
		return history.Chat{}, err
	}
	changed, err := fn(tx, c)
	if err != nil {
		return history.Chat{}, err
	}
	if changed {
		if c, err = load(); err != nil {
			return history.Chat{}, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return history.Chat{}, unavailable(op, err)
	}
	return c, nil
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
	return db.change(ctx, "rename", chatID, func(tx pgx.Tx, c history.Chat) (bool, error) {
		if err := history.CheckAdminChange(c, by, "rename it"); err != nil {
			return false, err
		}
		if _, err := tx.Exec(ctx, `UPDATE chats SET title = $1 WHERE id = $2`, title, chatID); err != nil {
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
	return db.change(ctx, "add admin", chatID, func(tx pgx.Tx, c history.Chat) (bool, error) {
		if err := history.CheckAdminChange(c, by, "make admins"); err != nil {
			return false, err
		}
		if !c.HasMember(user) {
			return false, fmt.Errorf("%w: %q is not a member of the group", history.ErrInvalid, user)
		}
		if c.IsAdmin(user) {
			return false, nil
		}
		if _, err := tx.Exec(ctx, `UPDATE members SET admin_at = $1 WHERE chat_id = $2 AND user_id = $3`,
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
	return db.change(ctx, "remove admin", chatID, func(tx pgx.Tx, c history.Chat) (bool, error) {
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
		b := &pgx.Batch{}
		b.Queue(`UPDATE members SET admin_at = 0 WHERE chat_id = $1 AND user_id = $2`, chatID, user)
		b.Queue(keepAdminSQL, chatID, nanos(time.Now()), user)
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return false, unavailable("remove admin", err)
		}
		return true, nil
	})
}

// keepAdminSQL makes the member of chat $1 who joined earliest (then by
// id; the member $3 stepping down last) an admin since $2 when the group has
// none left (PROTOCOL.md §7.5).
const keepAdminSQL = `UPDATE members SET admin_at = $2 WHERE chat_id = $1
	AND NOT EXISTS (SELECT 1 FROM members AS o WHERE o.chat_id = $1 AND o.admin_at > 0)
	AND user_id = (SELECT o.user_id FROM members AS o WHERE o.chat_id = $1 ORDER BY o.user_id = $3, o.joined_at, o.user_id LIMIT 1)
	AND EXISTS (SELECT 1 FROM chats AS c WHERE c.id = $1 AND c.kind = 'group')`
