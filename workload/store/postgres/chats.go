package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetra-messenger/tetra/workload/history"
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

// validUser checks a user id (history.CheckUser, the rule shared by every
// store and the token layer); what names the argument in the error.
func validUser(what, id string) error { return history.CheckUser(what, id) }

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
	if err := validUser("user id", a); err != nil {
		return history.Chat{}, false, err
	}
	if err := validUser("member id", b); err != nil {
		return history.Chat{}, false, err
	}
	if a == b {
		return history.Chat{}, false, fmt.Errorf("%w: a direct chat needs two different users", history.ErrInvalid)
	}
	lo, hi := min(a, b), max(a, b)
	// The chat usually exists already.
	if c, found, err := db.directChat(ctx, lo, hi); err != nil || found {
		return c, false, err
	}
	c := history.Chat{
		ID:        newChatID(),
		Kind:      history.KindDirect,
		Members:   []string{lo, hi},
		Admins:    []string{},
		History:   history.HistoryShared,
		CreatedAt: fromNanos(nanos(time.Now())),
	}
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

// CreateGroup creates a group chat of creator plus members with shared
// history: CreateGroupWith.
func (db *DB) CreateGroup(ctx context.Context, creator, title string, members []string) (history.Chat, error) {
	return db.CreateGroupWith(ctx, history.GroupSpec{Creator: creator, Title: title, Members: members})
}

// CreateGroupWith creates a group chat of spec.Creator plus spec.Members,
// duplicates removed, members sorted, the creator its admin (PROTOCOL.md
// §7.5) and spec.History its history setting (§7.6), in one statement. The
// title is trimmed of surrounding white space and may be empty. Invalid
// user ids, a title over MaxTitleBytes, not UTF-8 or containing NUL
// (history.CheckText), more than MaxGroupMembers members and an unknown
// history setting give ErrInvalid.
func (db *DB) CreateGroupWith(ctx context.Context, spec history.GroupSpec) (history.Chat, error) {
	title, all, err := history.CheckGroup(spec.Creator, spec.Title, spec.Members)
	if err != nil {
		return history.Chat{}, err
	}
	hist, err := history.CheckHistory(spec.History)
	if err != nil {
		return history.Chat{}, err
	}
	c := history.Chat{
		ID:        newChatID(),
		Kind:      history.KindGroup,
		Title:     title,
		CreatedBy: spec.Creator,
		Members:   all,
		Admins:    []string{spec.Creator},
		History:   hist,
		CreatedAt: fromNanos(nanos(time.Now())),
	}
	if _, err := db.pool.Exec(ctx, `WITH c AS (
			INSERT INTO chats (id, kind, title, created_by, created_at, history) VALUES ($1, 'group', $2, $5, $3, $6)
		)
		INSERT INTO members (chat_id, user_id, joined_at, admin_at)
		SELECT $1, u, $3, CASE WHEN u = $5 THEN $3 ELSE 0 END FROM unnest($4::text[]) AS u`,
		c.ID, c.Title, nanos(c.CreatedAt), all, spec.Creator, hist); err != nil {
		return history.Chat{}, unavailable("create group", err)
	}
	return c, nil
}

// Chat returns the chat chatID with its members sorted, or ErrNotFound. It
// reads one snapshot.
func (db *DB) Chat(ctx context.Context, chatID string) (history.Chat, error) {
	if !storable(chatID) {
		return history.Chat{}, fmt.Errorf("%w: chat %q", history.ErrNotFound, chatID)
	}
	c, err := scanChat(db.pool.QueryRow(ctx, `SELECT `+chatColumns+` FROM chats AS c WHERE c.id = $1`, chatID))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return history.Chat{}, fmt.Errorf("%w: chat %q", history.ErrNotFound, chatID)
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
	if !storable(chatID) {
		return false, fmt.Errorf("%w: chat %q", history.ErrNotFound, chatID)
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
		return false, fmt.Errorf("%w: chat %q", history.ErrNotFound, chatID)
	}
	return member, nil
}

// AddMember adds user to the group chatID on behalf of by and returns the
// chat. Errors, in the order checked: ErrInvalid for bad user ids,
// ErrNotFound for an unknown chat, ErrNotMember when by is not a member,
// ErrInvalid for a direct chat or a group already at MaxGroupMembers.
// Adding an existing member changes nothing. The chat row is locked (FOR NO
// KEY UPDATE, which does not block Commit's foreign key checks) so
// concurrent additions to one group cannot overshoot MaxGroupMembers, and
// the membership epoch is bumped in the same transaction. The transaction
// takes the append lock (AppendLockKey) first, as RemoveMember does, so it
// serializes with Commit's write: a commit that follows AddMember's return
// sees the new epoch and the new member.
func (db *DB) AddMember(ctx context.Context, chatID, by, user string) (history.Chat, error) {
	if err := validUser("user id", by); err != nil {
		return history.Chat{}, err
	}
	if err := validUser("member id", user); err != nil {
		return history.Chat{}, err
	}
	if !storable(chatID) {
		return history.Chat{}, fmt.Errorf("%w: chat %q", history.ErrNotFound, chatID)
	}
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		return history.Chat{}, unavailable("add member", err)
	}
	defer txRollback(tx)
	// Lock the chat row first, then read the chat with its members in a
	// statement of its own: under READ COMMITTED a statement that waited
	// for the lock still sees the member list of its own snapshot, taken
	// before the wait, so two concurrent additions at the limit would both
	// count 999 (TestGroupLimits caught it, about one run in six).
	// The append lock first, as RemoveMember takes it: changes of one
	// chat's members never interleave, and none interleaves with a
	// commit's write.
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, AppendLockKey); err != nil {
		return history.Chat{}, unavailable("add member", err)
	}
	var locked string
	err = tx.QueryRow(ctx, `SELECT id FROM chats WHERE id = $1 FOR NO KEY UPDATE`, chatID).Scan(&locked)
	var c history.Chat
	if err == nil {
		c, err = scanChat(tx.QueryRow(ctx, `SELECT `+chatColumns+` FROM chats AS c WHERE c.id = $1`, chatID))
	}
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return history.Chat{}, fmt.Errorf("%w: chat %q", history.ErrNotFound, chatID)
	case err != nil:
		return history.Chat{}, unavailable("add member", err)
	}
	if !c.HasMember(by) {
		return history.Chat{}, fmt.Errorf("%w: %q in chat %q", history.ErrNotMember, by, chatID)
	}
	if c.Kind != history.KindGroup {
		return history.Chat{}, fmt.Errorf("%w: members can be added to group chats only", history.ErrInvalid)
	}
	if c.HasMember(user) {
		return c, nil // the deferred rollback ends the read-only transaction
	}
	if len(c.Members) >= MaxGroupMembers {
		return history.Chat{}, fmt.Errorf("%w: a group has at most %d members", history.ErrInvalid, MaxGroupMembers)
	}
	b := &pgx.Batch{}
	// The new membership interval holds the Seqs above every one
	// committed so far (PROTOCOL.md §7.6): commits wait for the append
	// lock this transaction holds.
	b.Queue(`INSERT INTO members (chat_id, user_id, joined_at, joined_seq)
		VALUES ($1, $2, $3, (SELECT coalesce(max(id), 0) FROM history))`, chatID, user, nanos(time.Now()))
	// Invalidates every process's cache of member lists (see Commit).
	b.Queue(`UPDATE membership_epoch SET epoch = epoch + 1 WHERE id = 1`)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return history.Chat{}, unavailable("add member", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return history.Chat{}, unavailable("add member", err)
	}
	i, _ := slices.BinarySearch(c.Members, user)
	c.Members = slices.Insert(c.Members, i, user)
	return c, nil
}

// RemoveMember removes user from the group chatID on behalf of by
// (history.Store.RemoveMember: leave, or removal by the creator) and
// returns the chat after it and the cutoff Seq. Errors as for AddMember,
// plus ErrForbidden when by removes another member of a chat it did not
// create (history.CheckRemove); removing a non-member changes nothing.
//
// Serializing with Commit: the transaction takes the append lock
// (AppendLockKey) first, the lock Commit's write round trip holds from
// its insert to its COMMIT. A commit holding it finishes first, and its
// messages are at or below cutoff (read under the lock). A commit that
// waits for it takes the statement snapshot of its insert after the
// removal committed, so the insert's epoch check fails and Commit reads
// the member list again, without user. Either way a message committed
// after RemoveMember returned never has user among its recipients.
func (db *DB) RemoveMember(ctx context.Context, chatID, by, user string) (history.Chat, int64, error) {
	if err := validUser("user id", by); err != nil {
		return history.Chat{}, 0, err
	}
	if err := validUser("member id", user); err != nil {
		return history.Chat{}, 0, err
	}
	if !storable(chatID) {
		return history.Chat{}, 0, fmt.Errorf("%w: chat %q", history.ErrNotFound, chatID)
	}
	tx, err := db.pool.Begin(ctx)
	if err != nil {
		return history.Chat{}, 0, unavailable("remove member", err)
	}
	defer txRollback(tx)
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, AppendLockKey); err != nil {
		return history.Chat{}, 0, unavailable("remove member", err)
	}
	c, err := scanChat(tx.QueryRow(ctx, `SELECT `+chatColumns+` FROM chats AS c WHERE c.id = $1`, chatID))
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return history.Chat{}, 0, fmt.Errorf("%w: chat %q", history.ErrNotFound, chatID)
	case err != nil:
		return history.Chat{}, 0, unavailable("remove member", err)
	}
	if err := history.CheckRemove(c, by, user); err != nil {
		return history.Chat{}, 0, err
	}
	var cutoff int64
	if err := tx.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM history`).Scan(&cutoff); err != nil {
		return history.Chat{}, 0, unavailable("remove member", err)
	}
	if !c.HasMember(user) {
		return c, cutoff, nil // the deferred rollback ends the transaction
	}
	b := &pgx.Batch{}
	// The membership interval ends at cutoff (PROTOCOL.md §7.6); an empty
	// one is not kept.
	b.Queue(`INSERT INTO member_spans (chat_id, user_id, from_seq, to_seq)
		SELECT chat_id, user_id, joined_seq, $3 FROM members WHERE chat_id = $1 AND user_id = $2 AND joined_seq < $3
		ON CONFLICT (chat_id, user_id, from_seq) DO UPDATE SET to_seq = greatest(member_spans.to_seq, excluded.to_seq)`,
		chatID, user, cutoff)
	b.Queue(`DELETE FROM members WHERE chat_id = $1 AND user_id = $2`, chatID, user)
	// A group never loses its last admin; the last member leaving closes
	// it (PROTOCOL.md §7.5).
	b.Queue(keepAdminSQL, chatID, nanos(time.Now()), "")
	if len(c.Members) == 1 {
		b.Queue(`UPDATE chats SET closed = true WHERE id = $1`, chatID)
	}
	// Invalidates every process's cache of member lists (see Commit).
	b.Queue(`UPDATE membership_epoch SET epoch = epoch + 1 WHERE id = 1`)
	if err := tx.SendBatch(ctx, b).Close(); err != nil {
		return history.Chat{}, 0, unavailable("remove member", err)
	}
	after := history.Chat{ID: c.ID, Kind: c.Kind, Title: c.Title, CreatedBy: c.CreatedBy, CreatedAt: c.CreatedAt,
		History: c.History, Members: []string{}, Admins: []string{}}
	if len(c.Members) > 1 {
		if after, err = scanChat(tx.QueryRow(ctx, `SELECT `+chatColumns+` FROM chats AS c WHERE c.id = $1`, chatID)); err != nil {
			return history.Chat{}, 0, unavailable("remove member", err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return history.Chat{}, 0, unavailable("remove member", err)
	}
	return after, cutoff, nil
}
