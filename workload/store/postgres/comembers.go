package postgres

import (
	"context"

	"github.com/jackc/pgx/v5"

	"github.com/tetra-messenger/tetra/workload/history"
)

var _ history.CoMembers = (*DB)(nil)

// CoMembers implements history.CoMembers: one query, a range of
// members_user for user's chats and of the members primary key for each.
func (db *DB) CoMembers(ctx context.Context, user string) ([]string, error) {
	return again(ctx, db, func(ctx context.Context) ([]string, error) { return db.coMembersOnce(ctx, user) })
}

// coMembersOnce is one try of CoMembers.
func (db *DB) coMembersOnce(ctx context.Context, user string) ([]string, error) {
	if !storable(user) {
		return []string{}, nil
	}
	rows, err := db.pool.Query(ctx, `SELECT DISTINCT o.user_id FROM members AS me
		JOIN members AS o ON o.chat_id = me.chat_id
		WHERE me.user_id = $1 AND o.user_id <> $1 ORDER BY o.user_id`, user)
	if err != nil {
		return nil, unavailable("co-members", err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, unavailable("co-members", err)
	}
	if out == nil {
		out = []string{}
	}
	return out, nil
}
