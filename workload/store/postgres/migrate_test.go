package postgres

import (
	"database/sql"
	"testing"

	_ "github.com/jackc/pgx/v5/stdlib" // the database/sql driver "pgx"
	"github.com/pressly/goose/v3"

	"github.com/tetra-messenger/tetra/internal/testenv"
	"github.com/tetra-messenger/tetra/workload/store/migrations"
	"github.com/tetra-messenger/tetra/workload/store/migrations/migratetest"
)

// TestMigrationsRoundTrip: on a database of the test's own, every Down
// section leaves the schema (columns, indexes with their definitions,
// constraints, sequences) exactly as a fresh migration to the version
// below left it, and every version comes up again to the same schema
// (migratetest.RoundTrip). It failed on 0005's Down, which recreated
// history_unread with kind (0005's form, not 0003's), so dropping kind
// dropped the index and 0003's Down could not find it.
func TestMigrationsRoundTrip(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("pgx", testenv.Postgres(t))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	migratetest.RoundTrip(t, db, goose.DialectPostgres, migrations.Postgres(), migratetest.PostgresSchema,
		goose.WithSessionLocker(sessionLocker{}))
}
