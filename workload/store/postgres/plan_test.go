package postgres

import (
	"fmt"
	"strings"
	"testing"

	"github.com/oklog/ulid/v2"
)

// TestCommitReadsProbeTheIndex: the commit's reads must stay index probes
// under a generic plan, which PostgreSQL may pick for a prepared statement
// after five executions (pgx prepares and caches every statement). A plan
// that scans history makes every commit slower as history grows (see
// keysQuery).
func TestCommitReadsProbeTheIndex(t *testing.T) {
	db := newDB(t)
	ctx := t.Context()
	c, _, err := db.CreateDirect(ctx, "alice", "bob")
	if err != nil {
		t.Fatal(err)
	}
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	keys := make([]string, 36)
	ids := make([]string, 36)
	for i := range keys {
		keys[i] = fmt.Sprint("k", i*500)
		ids[i] = ulid.Make().String()
	}
	for _, q := range []struct{ name, sql, args string }{
		{"keysQuery", keysQuery, fmt.Sprintf("(ARRAY[%s], ARRAY[%s])", quoted(repeat("alice", 36)), quoted(keys))},
		{"usedIDsQuery", usedIDsQuery, fmt.Sprintf("(ARRAY[%s])", quoted(ids))},
	} {
		types := "text[], text[]"
		if q.name == "usedIDsQuery" {
			types = "text[]"
		}
		// The generic plan is made once, on a new (small) history, and
		// kept by the statement while history grows: no ANALYZE
		// invalidates it before autovacuum's first pass.
		for _, stmt := range []string{
			`SET plan_cache_mode = force_generic_plan`,
			`DEALLOCATE ALL`,
			`TRUNCATE history, outbox_messages`, `UPDATE outbox_line SET below = 0, removed = 0`, `UPDATE outbox_appended SET rows = 0`,
			fill(c.ID, 1, 200),
			fmt.Sprintf(`PREPARE probe(%s) AS %s`, types, q.sql),
			"EXECUTE probe" + q.args,
			fill(c.ID, 201, 20000),
		} {
			if _, err := conn.Exec(ctx, stmt); err != nil {
				t.Fatalf("%s: %s: %v", q.name, stmt, err)
			}
		}
		rows, err := conn.Query(ctx, "EXPLAIN EXECUTE probe"+q.args)
		if err != nil {
			t.Fatal(err)
		}
		var plan []string
		for rows.Next() {
			var line string
			if err := rows.Scan(&line); err != nil {
				t.Fatal(err)
			}
			plan = append(plan, line)
		}
		rows.Close()
		text := strings.Join(plan, "\n")
		if strings.Contains(text, "Seq Scan on history") || !strings.Contains(text, "Index") {
			t.Errorf("%s: the generic plan does not probe the index:\n%s", q.name, text)
		}
		if _, err := conn.Exec(ctx, `DEALLOCATE probe`); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Exec(ctx, `RESET plan_cache_mode`); err != nil {
		t.Fatal(err)
	}
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func quoted(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = "'" + s + "'"
	}
	return strings.Join(q, ",")
}

// fill inserts history rows from..to of chat.
func fill(chat string, from, to int) string {
	return fmt.Sprintf(`INSERT INTO history (message_id, chat_id, sender_id, correlation_id, body, sent_at)
		SELECT 'm' || g, '%s', 'alice', 'k' || g, 'x', g FROM generate_series(%d, %d) AS g`, chat, from, to)
}
