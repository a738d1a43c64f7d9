package sqlite

import (
	"context"

	"github.com/tetra-messenger/tetra/workload/history"
)

var _ history.CoMembers = (*DB)(nil)

// CoMembers implements history.CoMembers: one query on the read pool, a
// range of members_user for user's chats and of the members primary key
// for each.
func (db *DB) CoMembers(ctx context.Context, user string) ([]string, error) {
	rows, err := db.r.QueryContext(ctx, `SELECT DISTINCT o.user_id FROM members AS me
		JOIN members AS o ON o.chat_id = me.chat_id
		WHERE me.user_id = ?1 AND o.user_id <> ?1 ORDER BY o.user_id`, user)
	if err != nil {
		return nil, unavailable("co-members", err)
	}
	defer rows.Close()
	out := []string{}
	for rows.Next() {
		var u string
		if err := rows.Scan(&u); err != nil {
			return nil, unavailable("co-members", err)
		}
		out = append(out, u)
	}
	if err := rows.Err(); err != nil {
		return nil, unavailable("co-members", err)
	}
	return out, nil
}
