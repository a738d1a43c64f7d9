package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
)

// MessageSeq implements history.Store: one lookup on the unique index of
// history.message_id, within the chat.
func (db *DB) MessageSeq(ctx context.Context, chatID, messageID string) (seq int64, found bool, err error) {
	_, err = again(ctx, db, func(ctx context.Context) (struct{}, error) {
		seq, found, err = db.messageSeqOnce(ctx, chatID, messageID)
		return struct{}{}, err
	})
	return seq, found, err
}

// messageSeqOnce is one try of MessageSeq.
func (db *DB) messageSeqOnce(ctx context.Context, chatID, messageID string) (int64, bool, error) {
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
