package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/store/storecore"
)

// pageQuery reads a page of a chat ($1) after the message $2, resolved to
// its sequence only within the chat (0 when it does not resolve), limit $3.
// It ranges over the history_unread index (chat_id, id).
const pageQuery = `SELECT ` + messageColumns + `
	FROM history AS h
	WHERE h.chat_id = $1
	  AND h.id > coalesce((SELECT id FROM history WHERE message_id = $2 AND chat_id = $1), 0)
	ORDER BY h.chat_id, h.id LIMIT $3`

// Page returns up to limit messages of chatID with a Seq above that of the
// message sinceID, in Seq order, and whether more follow. The cursor is
// resolved to its Seq by the server, within the chat: a sinceID that is
// empty, unknown, purged or from another chat starts at the beginning of
// the retained history (recovery degrades to a full sync, never to a gap).
// limit < 1 gives ErrInvalid (callers cap the upper end); an unknown chat
// ErrNotFound. One round trip.
func (db *DB) Page(ctx context.Context, chatID, sinceID string, limit int) (page []history.Message, more bool, err error) {
	_, err = again(ctx, db, func(ctx context.Context) (struct{}, error) {
		page, more, err = db.pageOnce(ctx, chatID, sinceID, limit)
		return struct{}{}, err
	})
	return page, more, err
}

// pageOnce is one try of Page.
func (db *DB) pageOnce(ctx context.Context, chatID, sinceID string, limit int) ([]history.Message, bool, error) {
	if err := storecore.CheckPageLimit(limit); err != nil {
		return nil, false, err
	}
	if !storable(chatID) {
		return nil, false, storecore.NotFound(chatID)
	}
	if !storable(sinceID) {
		sinceID = "" // matches no message: start at the beginning
	}
	b := &pgx.Batch{}
	b.Queue(`SELECT EXISTS (SELECT 1 FROM chats WHERE id = $1 AND NOT closed)`, chatID)
	// One row beyond the page tells whether more follow.
	b.Queue(pageQuery, chatID, sinceID, int64(limit)+1)
	br := db.pool.SendBatch(ctx, b)
	defer br.Close()
	var exists bool
	if err := br.QueryRow().Scan(&exists); err != nil {
		return nil, false, unavailable("page", err)
	}
	if !exists {
		return nil, false, storecore.NotFound(chatID)
	}
	rows, _ := br.Query()
	msgs, err := pgx.CollectRows(rows, scanMessageRow)
	if err != nil {
		return nil, false, unavailable("page", err)
	}
	if err := br.Close(); err != nil {
		return nil, false, unavailable("page", err)
	}
	if len(msgs) > limit {
		return msgs[:limit:limit], true, nil
	}
	if msgs == nil {
		msgs = []history.Message{}
	}
	return msgs, false, nil
}

// SaveReads upserts the read receipts with one statement (the group
// commit of read receipts): per (ChatID, UserID) the row moves only
// forward, to a receipt with a higher Seq (PROTOCOL.md §3; of several in
// one call the highest Seq wins), and only while UserID is a member of
// ChatID when the statement runs. A receipt that history.CheckRead
// refuses (an empty or over-long id, NUL, invalid UTF-8, a control
// character in the user id) fails the call with ErrInvalid and nothing is
// saved. The message is not checked against the chat; the caller has
// (MessageSeq). An empty slice is a no-op.
func (db *DB) SaveReads(ctx context.Context, reads []history.Read) error {
	if len(reads) == 0 {
		return nil
	}
	type pair struct{ chat, user string }
	latest := make(map[pair]int, len(reads))
	var order []pair
	for i, r := range reads {
		if err := history.CheckRead(r); err != nil {
			return err
		}
		// One row per key: an upsert statement may not touch a row twice.
		p := pair{r.ChatID, r.UserID}
		if j, ok := latest[p]; !ok {
			latest[p] = i
			order = append(order, p)
		} else if r.Seq > reads[j].Seq {
			latest[p] = i
		}
	}
	chats := make([]string, len(order))
	users := make([]string, len(order))
	msgs := make([]string, len(order))
	seqs := make([]int64, len(order))
	ats := make([]int64, len(order))
	for k, p := range order {
		r := reads[latest[p]]
		chats[k], users[k], msgs[k], seqs[k], ats[k] = r.ChatID, r.UserID, r.MessageID, r.Seq, nanos(r.At)
	}
	if _, err := db.pool.Exec(ctx, `INSERT INTO reads (chat_id, user_id, message_id, seq, at)
		SELECT x.* FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[]) AS x(chat_id, user_id, message_id, seq, at)
		WHERE EXISTS (SELECT 1 FROM members AS m WHERE m.chat_id = x.chat_id AND m.user_id = x.user_id)
		ON CONFLICT (chat_id, user_id) DO UPDATE SET message_id = excluded.message_id, seq = excluded.seq, at = excluded.at
		WHERE excluded.seq > reads.seq`, chats, users, msgs, seqs, ats); err != nil {
		return unavailable("save reads", err)
	}
	return nil
}

// PurgeHistory deletes up to limit history rows with SentAt before cutoff,
// oldest SentAt first, and returns how many it deleted. The outbox records
// of those messages are deleted by the same statement, so no outbox row
// outlives its history row (invariant I1; no foreign key checks it since
// migration 7: TestReferencesHoldWithoutForeignKeys), and their rows not
// under the line already count as removed (the outbox depth), in the same
// transaction (which takes the line's row lock first, as DeleteBelow
// does). limit < 1 gives ErrInvalid.
func (db *DB) PurgeHistory(ctx context.Context, cutoff time.Time, limit int) (int64, error) {
	cut, none, err := storecore.PurgeCut(cutoff, limit)
	if err != nil || none {
		return 0, err
	}
	// One statement: the victims are chosen once, locked against a
	// concurrent purge, and both deletes see them.
	var n int64
	err = db.inLineLock(ctx, `WITH v AS (
			SELECT id FROM history WHERE sent_at < $1 ORDER BY sent_at, id LIMIT $2 FOR UPDATE
		), o AS (
			DELETE FROM outbox_messages WHERE history_id IN (SELECT id FROM v) RETURNING id, n
		), x AS (
			SELECT coalesce(sum(o.n - `+cutSQL("o.id", "o.n", "l.below")+`), 0) AS rows
			FROM o CROSS JOIN outbox_line AS l WHERE l.id = 1
		), u AS (
			UPDATE outbox_line SET removed = removed + (SELECT rows FROM x) WHERE id = 1 AND (SELECT rows FROM x) > 0
		), hd AS (
			DELETE FROM history WHERE id IN (SELECT id FROM v) RETURNING 1
		)
		SELECT count(*) FROM hd`, []any{cut, int64(limit)}, &n)
	if err != nil {
		return 0, unavailable("purge history", err)
	}
	return n, nil
}
