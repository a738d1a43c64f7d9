package postgres

import (
	"database/sql"
	"slices"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the database/sql driver "pgx"
	"github.com/pressly/goose/v3"

	"github.com/tetra-messenger/tetra/internal/testenv"
	"github.com/tetra-messenger/tetra/workload/store/migrations"
)

// atVersion migrates a fresh database of the test's own up to version
// and returns its URL and a database/sql handle on it, for an upgrade
// test to fill before Open migrates the rest.
func atVersion(t *testing.T, version int64) (string, *sql.DB) {
	t.Helper()
	url := testenv.Postgres(t)
	raw, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, raw, migrations.Postgres(), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.UpTo(t.Context(), version); err != nil {
		t.Fatal(err)
	}
	return url, raw
}

// TestMigration4Upgrades: chats of schema version 3 come through
// migration 4 with their creator as admin (or, with no creator recorded,
// the earliest member by id), shared history, joined at the creation, and
// read as before.
func TestMigration4Upgrades(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	url, raw := atVersion(t, 3)
	for _, stmt := range []string{
		`INSERT INTO chats (id, kind, title, created_by, created_at) VALUES ('g1', 'group', 'one', 'alice', 1000), ('g2', 'group', 'two', '', 2000), ('d1', 'direct', '', '', 3000)`,
		`INSERT INTO members (chat_id, user_id) VALUES ('g1', 'alice'), ('g1', 'bob'), ('g2', 'zed'), ('g2', 'bob'), ('d1', 'alice'), ('d1', 'bob')`,
		`INSERT INTO history (message_id, chat_id, sender_id, correlation_id, body, sent_at) VALUES ('m1', 'g2', 'zed', 'k1', 'old', 2500)`,
	} {
		if _, err := raw.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("%s: %v", stmt, err)
		}
	}
	raw.Close()
	db := openDB(t, DefaultConfig(url))
	for _, tc := range []struct {
		chat   string
		admins []string
	}{{"g1", []string{"alice"}}, {"g2", []string{"bob"}}, {"d1", []string{}}} {
		c, err := db.ChatFor(ctx, tc.chat, "bob")
		if err != nil {
			t.Fatalf("ChatFor(%s): %v", tc.chat, err)
		}
		if !slices.Equal(c.Admins, tc.admins) || c.History != "shared" || c.LastActivity.UnixNano() < c.CreatedAt.UnixNano() {
			t.Errorf("%s after migration 4: admins %v, history %q, lastActivity %v", tc.chat, c.Admins, c.History, c.LastActivity)
		}
	}
	if c, _ := db.ChatFor(ctx, "g2", "bob"); c.LastMessage == nil || c.LastMessage.ID != "m1" || c.LastActivity.UnixNano() != 2500 {
		t.Errorf("g2: lastMessage %+v, lastActivity %d", c.LastMessage, c.LastActivity.UnixNano())
	}
	if c, _ := db.ChatFor(ctx, "g1", "bob"); c.LastActivity.UnixNano() != 1000 {
		t.Errorf("g1: lastActivity %d, want the creation (1000)", c.LastActivity.UnixNano())
	}
}
