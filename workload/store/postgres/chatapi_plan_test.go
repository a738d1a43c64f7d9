package postgres

import (
	"strings"
	"testing"
)

// TestPagePlans: a history page, newest (before) or forward (since), the
// chat list's probe for a chat's newest message and its unread counts and
// last messages range over history_unread in order under a generic plan
// and readTx's settings, with no sort and no scan of history, whatever
// the chat's size (PROTOCOL.md §7.1, §7.2).
func TestPagePlans(t *testing.T) {
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
	for _, q := range []struct{ name, sql, types, args string }{
		{"beforeSQL", beforeSQL, "text, bigint, bool, bigint, text, bigint, bigint, text",
			"('" + c.ID + "', 0, true, 0, 'alice', 101, 9223372036854775807, 'end')"},
		{"sinceSQL", sinceSQL, "text, bigint, bool, bigint, text, bigint, text",
			"('" + c.ID + "', 0, true, 0, 'alice', 101, 'm5')"},
		{"membershipSQL", membershipSQL, "text, text", "('alice', '')"},
		{"fillSQL", fillSQL, "text[], bigint[], bigint[], bool[], bigint[], text, bigint",
			"(ARRAY['" + c.ID + "'], ARRAY[0::bigint], ARRAY[0::bigint], ARRAY[true], ARRAY[0::bigint], 'alice', 1000)"},
	} {
		// History of many chats, as in production: the planner must not
		// take the primary key backwards and filter by chat.
		for _, stmt := range []string{
			`SET plan_cache_mode = force_generic_plan`,
			`SET enable_bitmapscan = off`, // as readTx does (readTxBegin)
			`DEALLOCATE ALL`,
			`INSERT INTO chats (id, kind, created_at) SELECT 'x' || g, 'group', 0 FROM generate_series(0, 99) AS g ON CONFLICT DO NOTHING`,
			fill(c.ID, 1, 200),
			"PREPARE probe(" + q.types + ") AS " + q.sql,
			"EXECUTE probe" + q.args,
			`INSERT INTO history (message_id, chat_id, sender_id, correlation_id, body, sent_at)
				SELECT 'n' || g, 'x' || (g % 100), 'alice', 'j' || g, 'x', g FROM generate_series(1, 30000) AS g`,
			fill(c.ID, 201, 500),
			`ANALYZE history`,
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
		if strings.Contains(text, "Seq Scan on history") || strings.Contains(text, "Sort") || !strings.Contains(text, "history_unread") ||
			strings.Contains(text, "history_pkey") {
			t.Errorf("%s: the plan is not a range of history_unread:\n%s", q.name, text)
		}
		for _, stmt := range []string{`DEALLOCATE probe`, `TRUNCATE history, outbox_messages`, `UPDATE outbox_line SET below = 0, removed = 0`, `UPDATE outbox_appended SET rows = 0`} {
			if _, err := conn.Exec(ctx, stmt); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := conn.Exec(ctx, `RESET enable_bitmapscan`); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, `RESET plan_cache_mode`); err != nil {
		t.Fatal(err)
	}
}

// TestReadTxSettings: readTx's transaction runs with bitmap scans off (the
// plans TestPagePlans checks) and read-only, on one snapshot.
func TestReadTxSettings(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	tx, err := db.readTx(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer txRollback(tx)
	var bitmap, readOnly, iso string
	if err := tx.QueryRow(t.Context(), `SELECT current_setting('enable_bitmapscan'), current_setting('transaction_read_only'),
		current_setting('transaction_isolation')`).Scan(&bitmap, &readOnly, &iso); err != nil {
		t.Fatal(err)
	}
	if bitmap != "off" || readOnly != "on" || iso != "repeatable read" {
		t.Errorf("readTx: enable_bitmapscan %s, read only %s, isolation %s", bitmap, readOnly, iso)
	}
}
