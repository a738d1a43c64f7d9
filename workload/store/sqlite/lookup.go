package sqlite

import (
	"context"
	"database/sql"
	"errors"
)

// MessageSeq implements history.Store: one lookup on the unique index of
// history.message_id, within the chat, on the read pool.
func (db *DB) MessageSeq(ctx context.Context, chatID, messageID string) (int64, bool, error) {
	var seq int64
	err := db.r.QueryRowContext(ctx, `SELECT id FROM history WHERE message_id = ? AND chat_id = ?`, messageID, chatID).Scan(&seq)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, unavailable("message lookup", err)
	}
	return seq, true, nil
}
