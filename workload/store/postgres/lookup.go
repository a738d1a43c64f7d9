package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

// MessageSeq implements history.Store: one lookup on the unique index of
// history.message_id, within the chat.
func (db *DB) MessageSeq(ctx context.Context, chatID, messageID string) (int64, bool, error) {
	if !storable(chatID) || !storable(messageID) {
		return 0, false, nil // text the store never holds
	}
	var seq int64
	err := db.pool.QueryRow(ctx, `SELECT id FROM history WHERE message_id = $1 AND chat_id = $2`, messageID, chatID).Scan(&seq)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, unavailable("message lookup", err)
	}
	return seq, true, nil
}
