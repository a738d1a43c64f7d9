package sqlite

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/pressly/goose/v3"

	"github.com/tetra-messenger/tetra/workload/store/migrations"
	"github.com/tetra-messenger/tetra/workload/store/migrations/migratetest"
)

// TestMigrationsRoundTrip: every Down section leaves the schema (each
// table's statement, columns, indexes with their statements) exactly as
// a fresh migration to the version below left it, and every version comes
// up again to the same schema (migratetest.RoundTrip, as on PostgreSQL).
func TestMigrationsRoundTrip(t *testing.T) {
	t.Parallel()
	db, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "tetra.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	migratetest.RoundTrip(t, db, goose.DialectSQLite3, migrations.SQLite(), migratetest.SQLiteSchema)
}
