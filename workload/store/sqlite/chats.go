package sqlite

import (
	"context"
	"database/sql"
	"errors"

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

// querier is what both the pools and transactions offer for reads.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// validUser is storecore.ValidUser.
func validUser(what, id string) error { return storecore.ValidUser(what, id) }

// CreateDirect returns the direct chat of {a, b}, creating it when missing.
// The pair is stored ordered, under a primary key, so the same chat comes
// back whichever side asks and however many calls race (created is true for
// exactly one of them). Invalid user ids (see MaxUserIDBytes) and a == b
// give ErrInvalid; store failures ErrUnavailable.
func (db *DB) CreateDirect(ctx context.Context, a, b string) (history.Chat, bool, error) {
	lo, hi, err := storecore.DirectPair(a, b)
	if err != nil {
		return history.Chat{}, false, err
	}
	const findPair = `SELECT chat_id FROM direct_pairs WHERE user_a = ? AND user_b = ?`

	// Fast path on the read pool: the chat usually exists already.
	var id string
	switch err := db.r.QueryRowContext(ctx, findPair, lo, hi).Scan(&id); {
	case err == nil:
		c, err := loadChat(ctx, db.r, id)
		return c, false, err
	case !errors.Is(err, sql.ErrNoRows):
		return history.Chat{}, false, unavailable("create direct", err)
	}

	tx, err := db.w.BeginTx(ctx, nil)
	if err != nil {
		return history.Chat{}, false, unavailable("create direct", err)
	}
	defer rollback(tx)
	// Check again under the write lock: another caller, or another process,
	// may have created it since.
	switch err := tx.QueryRowContext(ctx, findPair, lo, hi).Scan(&id); {
	case err == nil:
		c, err := loadChat(ctx, tx, id)
		if err != nil {
			return history.Chat{}, false, err
		}
		return c, false, commitTx(tx, "create direct")
	case !errors.Is(err, sql.ErrNoRows):
		return history.Chat{}, false, unavailable("create direct", err)
	}
	c := storecore.NewDirect(lo, hi)
	if err := insertChat(ctx, tx, c); err != nil {
		return history.Chat{}, false, err
	}
	if _, err := tx.ExecContext(ctx, `INSERT INTO direct_pairs (user_a, user_b, chat_id) VALUES (?, ?, ?)`,
		lo, hi, c.ID); err != nil {
		return history.Chat{}, false, unavailable("create direct", err)
	}
	if err := commitTx(tx, "create direct"); err != nil {
		return history.Chat{}, false, err
	}
	return c, true, nil
}

// InsertGroup implements storecore.Backend: the chat's rows in one
// transaction on the writer.
func (c core) InsertGroup(ctx context.Context, chat history.Chat) error {
	tx, err := c.db.w.BeginTx(ctx, nil)
	if err != nil {
		return unavailable("create group", err)
	}
	defer rollback(tx)
	if err := insertChat(ctx, tx, chat); err != nil {
		return err
	}
	return commitTx(tx, "create group")
}

// insertChat writes the chats row and one members row per member, each
// joined at the chat's creation, c.Admins admins.
func insertChat(ctx context.Context, tx *sql.Tx, c history.Chat) error {
	created := nanos(c.CreatedAt)
	if _, err := tx.ExecContext(ctx, `INSERT INTO chats (id, kind, title, created_by, created_at, history) VALUES (?, ?, ?, ?, ?, ?)`,
		c.ID, c.Kind, c.Title, c.CreatedBy, created, c.History); err != nil {
		return unavailable("insert chat", err)
	}
	stmt, err := tx.PrepareContext(ctx, `INSERT INTO members (chat_id, user_id, joined_at, joined_seq, admin_at) VALUES (?, ?, ?, 0, ?)`)
	if err != nil {
		return unavailable("insert chat", err)
	}
	defer stmt.Close()
	for _, m := range c.Members {
		var adminAt int64
		if c.IsAdmin(m) {
			adminAt = created
		}
		if _, err := stmt.ExecContext(ctx, c.ID, m, created, adminAt); err != nil {
			return unavailable("insert chat", err)
		}
	}
	return nil
}

// Chat returns the chat chatID with its members sorted, or ErrNotFound.
func (db *DB) Chat(ctx context.Context, chatID string) (history.Chat, error) {
	tx, err := db.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return history.Chat{}, unavailable("chat", err)
	}
	defer rollback(tx)
	return loadChat(ctx, tx, chatID)
}

// loadChat reads one chat, its members and its admins through q. A closed
// group (PROTOCOL.md §7.5) is ErrNotFound.
func loadChat(ctx context.Context, q querier, chatID string) (history.Chat, error) {
	c := history.Chat{ID: chatID}
	var created int64
	var closed bool
	err := q.QueryRowContext(ctx, `SELECT kind, title, created_by, created_at, history, closed FROM chats WHERE id = ?`, chatID).
		Scan(&c.Kind, &c.Title, &c.CreatedBy, &created, &c.History, &closed)
	if errors.Is(err, sql.ErrNoRows) || closed {
		return history.Chat{}, storecore.NotFound(chatID)
	}
	if err != nil {
		return history.Chat{}, unavailable("chat", err)
	}
	c.CreatedAt = fromNanos(created)
	rows, err := q.QueryContext(ctx, `SELECT user_id, admin_at FROM members WHERE chat_id = ? ORDER BY user_id`, chatID)
	if err != nil {
		return history.Chat{}, unavailable("chat members", err)
	}
	defer rows.Close()
	var admins []storecore.Admin
	for rows.Next() {
		var m string
		var at int64
		if err := rows.Scan(&m, &at); err != nil {
			return history.Chat{}, unavailable("chat members", err)
		}
		c.Members = append(c.Members, m)
		if at > 0 {
			admins = append(admins, storecore.Admin{User: m, At: at})
		}
	}
	if err := rows.Err(); err != nil {
		return history.Chat{}, unavailable("chat members", err)
	}
	c.Admins = storecore.AdminOrder(admins)
	return c, nil
}

// ChatsOf lists the chats user is a member of, oldest first (by creation
// time, then id), each with its members sorted, CreatedBy, LastRead (the
// read markers of its current members) and Unread (for user: messages
// after its marker that others sent, capped at history.MaxUnread), all
// from one read snapshot. The unread count of a chat reads at most
// MaxUnread entries of the history_unread index after the marker (plus
// user's own messages among them), never the table. An unknown user has
// no chats; an invalid user id gives ErrInvalid.
func (db *DB) ChatsOf(ctx context.Context, user string) ([]history.Chat, error) {
	if err := validUser("user id", user); err != nil {
		return nil, err
	}
	// One read transaction: every query sees the same snapshot.
	tx, err := db.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, unavailable("chats of", err)
	}
	defer rollback(tx)
	rows, err := tx.QueryContext(ctx, `SELECT c.id, c.kind, c.title, c.created_by, c.created_at,
			coalesce((SELECT r.seq FROM reads AS r WHERE r.chat_id = c.id AND r.user_id = m.user_id), 0)
		FROM members AS m JOIN chats AS c ON c.id = m.chat_id
		WHERE m.user_id = ? ORDER BY c.created_at, c.id`, user)
	if err != nil {
		return nil, unavailable("chats of", err)
	}
	chats := []history.Chat{}
	var marks []int64
	index := map[string]int{}
	for rows.Next() {
		var c history.Chat
		var created, mark int64
		if err := rows.Scan(&c.ID, &c.Kind, &c.Title, &c.CreatedBy, &created, &mark); err != nil {
			rows.Close()
			return nil, unavailable("chats of", err)
		}
		c.CreatedAt = fromNanos(created)
		c.LastRead = map[string]string{}
		index[c.ID] = len(chats)
		chats = append(chats, c)
		marks = append(marks, mark)
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, unavailable("chats of", err)
	}
	if len(chats) == 0 {
		return chats, nil
	}
	rows, err = tx.QueryContext(ctx, `SELECT o.chat_id, o.user_id, r.message_id
		FROM members AS m JOIN members AS o ON o.chat_id = m.chat_id
		LEFT JOIN reads AS r ON r.chat_id = o.chat_id AND r.user_id = o.user_id
		WHERE m.user_id = ? ORDER BY o.chat_id, o.user_id`, user)
	if err != nil {
		return nil, unavailable("chats of", err)
	}
	for rows.Next() {
		var chatID, member string
		var read sql.NullString
		if err := rows.Scan(&chatID, &member, &read); err != nil {
			rows.Close()
			return nil, unavailable("chats of", err)
		}
		if i, ok := index[chatID]; ok {
			chats[i].Members = append(chats[i].Members, member)
			if read.Valid {
				chats[i].LastRead[member] = read.String
			}
		}
	}
	if err := errors.Join(rows.Err(), rows.Close()); err != nil {
		return nil, unavailable("chats of", err)
	}
	unread, err := tx.PrepareContext(ctx, unreadQuery)
	if err != nil {
		return nil, unavailable("chats of: unread", err)
	}
	defer unread.Close()
	for i := range chats {
		if err := unread.QueryRowContext(ctx, chats[i].ID, marks[i], user, history.MaxUnread).Scan(&chats[i].Unread); err != nil {
			return nil, unavailable("chats of: unread", err)
		}
	}
	return chats, nil
}

// unreadQuery counts the ordinary messages not deleted (kind 0: not edits
// or deletes, PROTOCOL.md §7.3; deleted 0: a deleted message is not
// unread, docs/design.md "Edit and delete") of chat ?1 after Seq ?2 not
// sent by ?3, up to ?4: a range of the covering index history_unread
// (chat_id, id, sender_id, kind, deleted) that stops after ?4 matches (TestUnreadPlan checks the plan).
const unreadQuery = `SELECT count(*) FROM (SELECT 1 FROM history
	WHERE chat_id = ?1 AND id > ?2 AND sender_id <> ?3 AND kind = 0 AND deleted = 0 ORDER BY id LIMIT ?4)`

// ReadMarks implements history.Store: the read markers of chatID's
// current members, one range of the reads primary key, on the read pool.
func (db *DB) ReadMarks(ctx context.Context, chatID string) (map[string]string, error) {
	rows, err := db.r.QueryContext(ctx, `SELECT r.user_id, r.message_id FROM reads AS r
		JOIN members AS m ON m.chat_id = r.chat_id AND m.user_id = r.user_id WHERE r.chat_id = ?`, chatID)
	if err != nil {
		return nil, unavailable("read marks", err)
	}
	defer rows.Close()
	marks := map[string]string{}
	for rows.Next() {
		var u, id string
		if err := rows.Scan(&u, &id); err != nil {
			return nil, unavailable("read marks", err)
		}
		marks[u] = id
	}
	if err := rows.Err(); err != nil {
		return nil, unavailable("read marks", err)
	}
	return marks, nil
}

// IsMember reports whether user is a member of chatID, reading the store
// (one probe of the members primary key, on the read pool). An unknown
// chat is ErrNotFound.
func (db *DB) IsMember(ctx context.Context, chatID, user string) (bool, error) {
	var member, chat int
	err := db.r.QueryRowContext(ctx, `SELECT
		(SELECT count(*) FROM members WHERE chat_id = ?1 AND user_id = ?2),
		(SELECT count(*) FROM chats WHERE id = ?1 AND closed = 0)`, chatID, user).Scan(&member, &chat)
	if err != nil {
		return false, unavailable("is member", err)
	}
	if chat == 0 {
		return false, storecore.NotFound(chatID)
	}
	return member == 1, nil
}

// commitTx commits tx, translating a failure.
func commitTx(tx *sql.Tx, op string) error {
	if err := tx.Commit(); err != nil {
		return unavailable(op, err)
	}
	return nil
}
