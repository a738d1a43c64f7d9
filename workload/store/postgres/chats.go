package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/store/storecore"
	"github.com/tetra-messenger/tetra/workload/text"
)

// Limits on chat input; a request beyond them fails with history.ErrInvalid.
const (
	// MaxUserIDBytes is the longest user id accepted, in bytes (text.MaxUserBytes).
	MaxUserIDBytes = text.MaxUserBytes
	// MaxTitleBytes: history.MaxTitleBytes.
	MaxTitleBytes = history.MaxTitleBytes
	// MaxGroupMembers: history.MaxGroupMembers.
	MaxGroupMembers = history.MaxGroupMembers
)

// validUser is storecore.ValidUser.
func validUser(what, id string) error { return storecore.ValidUser(what, id) }

// chatColumns reads a chat with its members sorted, in one statement (one
// snapshot). The alias of chats must be c.
const chatColumns = `c.id, c.kind, c.title, c.created_by, c.created_at,
	array(SELECT m.user_id FROM members AS m WHERE m.chat_id = c.id ORDER BY m.user_id),
	c.history, c.closed,
	array(SELECT m.user_id FROM members AS m WHERE m.chat_id = c.id AND m.admin_at > 0 ORDER BY m.admin_at, m.user_id)`

// scanChat scans chatColumns. A closed group (PROTOCOL.md §7.5) reads as
// no row: it answers as unknown.
func scanChat(row pgx.Row) (history.Chat, error) {
	var c history.Chat
	var created int64
	var closed bool
	if err := row.Scan(&c.ID, &c.Kind, &c.Title, &c.CreatedBy, &created, &c.Members, &c.History, &closed, &c.Admins); err != nil {
		return history.Chat{}, err
	}
	if closed {
		return history.Chat{}, pgx.ErrNoRows
	}
	c.CreatedAt = fromNanos(created)
	return c, nil
}

// CreateDirect returns the direct chat of {a, b}, creating it when missing.
// The pair is stored ordered, under a primary key, and created by one
// INSERT ... ON CONFLICT DO NOTHING statement that writes the chat and its
// members only when it wrote the pair, so the same chat comes back whichever
// side asks and however many calls race, in any number of processes
// (created is true for exactly one of them). Invalid user ids (see
// MaxUserIDBytes) and a == b give ErrInvalid; store failures
// ErrUnavailable.
func (db *DB) CreateDirect(ctx context.Context, a, b string) (history.Chat, bool, error) {
	lo, hi, err := storecore.DirectPair(a, b)
	if err != nil {
		return history.Chat{}, false, err
	}
	// The chat usually exists already.
	if c, found, err := db.directChat(ctx, lo, hi); err != nil || found {
		return c, false, err
	}
	c := storecore.NewDirect(lo, hi)
	c.Admins = []string{}
	// The pair row decides. A concurrent insert of the same pair makes ON
	// CONFLICT wait for its transaction; when that commits, this statement
	// writes nothing. Foreign keys are checked at the end of the statement,
	// when the chat row exists.
	tag, err := db.pool.Exec(ctx, `WITH p AS (
			INSERT INTO direct_pairs (user_a, user_b, chat_id) VALUES ($1, $2, $3)
			ON CONFLICT (user_a, user_b) DO NOTHING
			RETURNING chat_id
		), c AS (
			INSERT INTO chats (id, kind, title, created_at)
			SELECT chat_id, 'direct', '', $4 FROM p
			RETURNING id
		)
		INSERT INTO members (chat_id, user_id, joined_at)
		SELECT c.id, u, $4 FROM c, unnest(ARRAY[$1, $2]::text[]) AS u`,
		lo, hi, c.ID, nanos(c.CreatedAt))
	if err != nil {
		return history.Chat{}, false, unavailable("create direct", err)
	}
	if tag.RowsAffected() == 2 {
		return c, true, nil
	}
	// Another caller created it first; it has committed.
	existing, found, err := db.directChat(ctx, lo, hi)
	if err == nil && !found {
		err = unavailable("create direct", fmt.Errorf("pair %s/%s conflicted but no chat holds it", lo, hi))
	}
	return existing, false, err
}

// directChat loads the direct chat of the ordered pair lo < hi.
func (db *DB) directChat(ctx context.Context, lo, hi string) (history.Chat, bool, error) {
	c, err := scanChat(db.pool.QueryRow(ctx, `SELECT `+chatColumns+`
		FROM direct_pairs AS p JOIN chats AS c ON c.id = p.chat_id
		WHERE p.user_a = $1 AND p.user_b = $2`, lo, hi))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return history.Chat{}, false, nil
	case err != nil:
		return history.Chat{}, false, unavailable("create direct", err)
	}
	return c, true, nil
}

// InsertGroup implements storecore.Backend: the chat and its members in
// one statement.
func (c core) InsertGroup(ctx context.Context, chat history.Chat) error {
	if _, err := c.db.pool.Exec(ctx, `WITH c AS (
			INSERT INTO chats (id, kind, title, created_by, created_at, history) VALUES ($1, 'group', $2, $5, $3, $6)
		)
		INSERT INTO members (chat_id, user_id, joined_at, admin_at)
		SELECT $1, u, $3, CASE WHEN u = $5 THEN $3 ELSE 0 END FROM unnest($4::text[]) AS u`,
		chat.ID, chat.Title, nanos(chat.CreatedAt), chat.Members, chat.CreatedBy, chat.History); err != nil {
		return unavailable("create group", err)
	}
	return nil
}

// Chat returns the chat chatID with its members sorted, or ErrNotFound. It
// reads one snapshot.
func (db *DB) Chat(ctx context.Context, chatID string) (history.Chat, error) {
	return again(ctx, db, func(ctx context.Context) (history.Chat, error) { return db.chatOnce(ctx, chatID) })
}

// chatOnce is one try of Chat.
func (db *DB) chatOnce(ctx context.Context, chatID string) (history.Chat, error) {
	if !storable(chatID) {
		return history.Chat{}, storecore.NotFound(chatID)
	}
	c, err := scanChat(db.pool.QueryRow(ctx, `SELECT `+chatColumns+` FROM chats AS c WHERE c.id = $1`, chatID))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return history.Chat{}, storecore.NotFound(chatID)
	case err != nil:
		return history.Chat{}, unavailable("chat", err)
	}
	return c, nil
}

// ChatsOf lists the chats user is a member of, oldest first (by creation
// time, then id), each with its members sorted, CreatedBy, LastRead (the
// read markers of its current members) and Unread (for user: messages
// after its marker that others sent, capped at history.MaxUnread), in one
// statement (one snapshot). The unread count of a chat ranges over the
// history_unread index (chat_id, id) INCLUDE (sender_id) after the marker
// and stops at MaxUnread matches. An unknown user has no chats; an invalid
// user id gives ErrInvalid.
func (db *DB) ChatsOf(ctx context.Context, user string) ([]history.Chat, error) {
	return again(ctx, db, func(ctx context.Context) ([]history.Chat, error) { return db.chatsOfOnce(ctx, user) })
}

// chatsOfOnce is one try of ChatsOf.
func (db *DB) chatsOfOnce(ctx context.Context, user string) ([]history.Chat, error) {
	if err := validUser("user id", user); err != nil {
		return nil, err
	}
	rows, err := db.pool.Query(ctx, chatsOfQuery, user, int64(history.MaxUnread))
	if err != nil {
		return nil, unavailable("chats of", err)
	}
	chats, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (history.Chat, error) {
		var c history.Chat
		var created int64
		var readers, reads []string
		var closed bool
		if err := row.Scan(&c.ID, &c.Kind, &c.Title, &c.CreatedBy, &created, &c.Members, &c.History, &closed, &c.Admins,
			&readers, &reads, &c.Unread); err != nil {
			return history.Chat{}, err
		}
		c.CreatedAt = fromNanos(created)
		c.LastRead = make(map[string]string, len(readers))
		for i, u := range readers {
			c.LastRead[u] = reads[i]
		}
		return c, nil
	})
	if err != nil {
		return nil, unavailable("chats of", err)
	}
	if chats == nil {
		chats = []history.Chat{}
	}
	return chats, nil
}

// chatsOfQuery lists the chats of $1 with their read markers and $1's
// unread count of ordinary messages not deleted (kind 0, PROTOCOL.md
// §7.3; not deleted, docs/design.md "Edit and delete") up to $2
// (TestUnreadPlan checks that the count is an index-only range of
// history_unread).
const chatsOfQuery = `SELECT ` + chatColumns + `,
		array(SELECT r.user_id FROM reads AS r JOIN members AS o ON o.chat_id = r.chat_id AND o.user_id = r.user_id
			WHERE r.chat_id = c.id ORDER BY r.user_id),
		array(SELECT r.message_id FROM reads AS r JOIN members AS o ON o.chat_id = r.chat_id AND o.user_id = r.user_id
			WHERE r.chat_id = c.id ORDER BY r.user_id),
		(SELECT count(*) FROM (SELECT 1 FROM history AS h
			WHERE h.chat_id = c.id AND h.sender_id <> $1 AND h.kind = 0 AND NOT h.deleted
			  AND h.id > coalesce((SELECT r.seq FROM reads AS r WHERE r.chat_id = c.id AND r.user_id = $1), 0)
			ORDER BY h.id LIMIT $2) AS u)
	FROM members AS me JOIN chats AS c ON c.id = me.chat_id
	WHERE me.user_id = $1 ORDER BY c.created_at, c.id`

// ReadMarks implements history.Store: the read markers of chatID's
// current members, one range of the reads primary key.
func (db *DB) ReadMarks(ctx context.Context, chatID string) (map[string]string, error) {
	return again(ctx, db, func(ctx context.Context) (map[string]string, error) { return db.readMarksOnce(ctx, chatID) })
}

// readMarksOnce is one try of ReadMarks.
func (db *DB) readMarksOnce(ctx context.Context, chatID string) (map[string]string, error) {
	marks := map[string]string{}
	if !storable(chatID) {
		return marks, nil
	}
	rows, err := db.pool.Query(ctx, `SELECT r.user_id, r.message_id FROM reads AS r
		JOIN members AS m ON m.chat_id = r.chat_id AND m.user_id = r.user_id WHERE r.chat_id = $1`, chatID)
	if err != nil {
		return nil, unavailable("read marks", err)
	}
	var u, id string
	if _, err := pgx.ForEachRow(rows, []any{&u, &id}, func() error { marks[u] = id; return nil }); err != nil {
		return nil, unavailable("read marks", err)
	}
	return marks, nil
}

// IsMember reports whether user is a member of chatID, reading the store
// (one probe of the members primary key). An unknown chat is ErrNotFound.
func (db *DB) IsMember(ctx context.Context, chatID, user string) (bool, error) {
	return again(ctx, db, func(ctx context.Context) (bool, error) { return db.isMemberOnce(ctx, chatID, user) })
}

// isMemberOnce is one try of IsMember.
func (db *DB) isMemberOnce(ctx context.Context, chatID, user string) (bool, error) {
	if !storable(chatID) {
		return false, storecore.NotFound(chatID)
	}
	if !storable(user) {
		return false, nil
	}
	var chat, member bool
	err := db.pool.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM chats WHERE id = $1 AND NOT closed),
		EXISTS (SELECT 1 FROM members WHERE chat_id = $1 AND user_id = $2)`, chatID, user).Scan(&chat, &member)
	if err != nil {
		return false, unavailable("is member", err)
	}
	if !chat {
		return false, storecore.NotFound(chatID)
	}
	return member, nil
}
