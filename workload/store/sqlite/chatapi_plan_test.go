package sqlite

import (
	"strings"
	"testing"
)

// TestPagePlans: history pages in both directions, the unread count and
// the chat list's probe for a chat's newest message are ranges of
// history_unread without a sort (PROTOCOL.md §7.1, §7.2): the newest page
// of any chat costs the same.
func TestPagePlans(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	for _, q := range []struct {
		name, sql string
		args      []any
		want      string
	}{
		{"backwardSQL", backwardSQL, []any{"c", int64(0), true, int64(0), "u", 101, int64(1 << 62)}, "history_unread (chat_id=? AND id>? AND id<?)"},
		{"forwardSQL", forwardSQL, []any{"c", int64(0), true, int64(0), "u", 101, int64(0)}, "history_unread (chat_id=? AND id>?)"},
		{"unreadVisibleSQL", unreadVisibleSQL, []any{"c", int64(0), true, int64(0), "u", 1000, int64(0)}, "history_unread (chat_id=? AND id>?)"},
		{"membershipSQL", membershipSQL, []any{"u", ""}, "history_unread (chat_id=? AND id>?)"},
	} {
		rows, err := db.r.QueryContext(t.Context(), `EXPLAIN QUERY PLAN `+q.sql, q.args...)
		if err != nil {
			t.Fatalf("%s: %v", q.name, err)
		}
		var plan []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, detail)
		}
		rows.Close()
		text := strings.Join(plan, "\n")
		if !strings.Contains(text, q.want) || strings.Contains(text, "TEMP B-TREE") || strings.Contains(text, "SCAN h\n") || strings.HasSuffix(text, "SCAN h") {
			t.Errorf("%s: the plan is not a range of history_unread:\n%s", q.name, text)
		}
	}
}
