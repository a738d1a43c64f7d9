package migratetest

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"

	"github.com/pressly/goose/v3"
)

// Schema lists the schema of db, one line per object (a column, an index,
// a constraint), in any order; RoundTrip sorts the lines. Goose's own
// goose_db_version table is left out.
type Schema func(ctx context.Context, db *sql.DB) ([]string, error)

// RoundTrip migrates db, which must be empty, with the migrations of fsys
// (goose's layout: numbered .sql files at the root) in dialect: up one
// version at a time from 0 to the latest, recording the schema after each
// (the reference: a fresh migration to that version), then down one
// version at a time to 0 and up again one at a time to the latest,
// comparing the schema after every step with the reference of the version
// it reached. A failing step (a Down that cannot run) or a differing
// schema fails t, naming the version, the direction and the lines that
// differ. opts are passed to goose.NewProvider after
// goose.WithDisableGlobalRegistry(true).
func RoundTrip(t *testing.T, db *sql.DB, dialect goose.Dialect, fsys fs.FS, schema Schema, opts ...goose.ProviderOption) {
	t.Helper()
	ctx := t.Context()
	p, err := goose.NewProvider(dialect, db, fsys, append([]goose.ProviderOption{goose.WithDisableGlobalRegistry(true)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	var versions []int64 // versions[i] is the version after i+1 migrations
	for _, s := range p.ListSources() {
		versions = append(versions, s.Version)
	}
	if len(versions) < 2 {
		t.Fatalf("migratetest: %d migrations; a round trip needs at least 2", len(versions))
	}
	list := func() []string {
		t.Helper()
		lines, err := schema(ctx, db)
		if err != nil {
			t.Fatalf("migratetest: list the schema: %v", err)
		}
		slices.Sort(lines)
		return lines
	}
	want := map[int64][]string{0: list()}
	for _, v := range versions {
		if _, err := p.UpByOne(ctx); err != nil {
			t.Fatalf("migratetest: fresh up to %d: %v", v, err)
		}
		want[v] = list()
	}
	check := func(step string, v int64) {
		t.Helper()
		got, err := p.GetDBVersion(ctx)
		if err != nil {
			t.Fatalf("migratetest: %s: version: %v", step, err)
		}
		if got != v {
			t.Fatalf("migratetest: %s: at version %d, want %d", step, got, v)
		}
		if d := diff(want[v], list()); d != "" {
			t.Fatalf("migratetest: %s: the schema at version %d differs from a fresh migration to %d (- fresh, + here):\n%s", step, v, v, d)
		}
	}
	for i := len(versions) - 1; i >= 0; i-- {
		below := int64(0)
		if i > 0 {
			below = versions[i-1]
		}
		step := fmt.Sprintf("down from %d", versions[i])
		if _, err := p.Down(ctx); err != nil {
			t.Fatalf("migratetest: %s: %v", step, err)
		}
		check(step, below)
	}
	for i, v := range versions {
		from := int64(0)
		if i > 0 {
			from = versions[i-1]
		}
		step := fmt.Sprintf("up again from %d", from)
		if _, err := p.UpByOne(ctx); err != nil {
			t.Fatalf("migratetest: %s: %v", step, err)
		}
		check(step, v)
	}
}

// diff lists the lines of a not in b ("- ") and of b not in a ("+ "); both
// are sorted. Empty when they are equal.
func diff(a, b []string) string {
	var out strings.Builder
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case j == len(b) || (i < len(a) && a[i] < b[j]):
			fmt.Fprintf(&out, "- %s\n", a[i])
			i++
		case i == len(a) || b[j] < a[i]:
			fmt.Fprintf(&out, "+ %s\n", b[j])
			j++
		default:
			i++
			j++
		}
	}
	return out.String()
}

// PostgresSchema lists the current schema of a PostgreSQL database:
// columns (type, nullability, default, collation; not their position,
// since a column dropped and added again comes back last), indexes
// (pg_indexes' definition), constraints (pg_get_constraintdef) and
// sequences.
func PostgresSchema(ctx context.Context, db *sql.DB) ([]string, error) {
	return queryLines(ctx, db,
		`SELECT format('column %s.%s %s null=%s default=%s collate=%s', table_name, column_name, data_type,
		        is_nullable, coalesce(column_default, '-'), coalesce(collation_name, '-'))
		   FROM information_schema.columns
		  WHERE table_schema = current_schema() AND table_name <> 'goose_db_version'`,
		`SELECT format('index %s.%s %s', tablename, indexname, indexdef)
		   FROM pg_indexes
		  WHERE schemaname = current_schema() AND tablename <> 'goose_db_version'`,
		`SELECT format('constraint %s.%s %s', c.conrelid::regclass, c.conname, pg_get_constraintdef(c.oid))
		   FROM pg_constraint AS c
		  WHERE c.connamespace = current_schema()::regnamespace AND c.conrelid::regclass::text <> 'goose_db_version'`,
		`SELECT format('sequence %s %s', sequence_name, data_type)
		   FROM information_schema.sequences
		  WHERE sequence_schema = current_schema() AND sequence_name NOT LIKE 'goose_db_version%'`,
	)
}

// SQLiteSchema lists the current schema of a SQLite database: each
// table's statement as sqlite_master keeps it (ALTER TABLE edits that
// text, so its CHECK and REFERENCES clauses are compared too; runs of
// white space count as one space, and a comma followed by white space as a
// comma), each column as pragma table_xinfo reports it, and each index's
// statement (the automatic indexes of PRIMARY KEY and UNIQUE, which have
// none, by their columns from pragma index_xinfo).
func SQLiteSchema(ctx context.Context, db *sql.DB) ([]string, error) {
	lines, err := queryLines(ctx, db,
		`SELECT 'column ' || m.name || '.' || c.name || ' ' || c.type || ' notnull=' || c."notnull" ||
		        ' default=' || coalesce(c.dflt_value, '-') || ' pk=' || c.pk || ' hidden=' || c.hidden
		   FROM sqlite_master AS m, pragma_table_xinfo(m.name) AS c
		  WHERE m.type = 'table' AND m.name NOT IN ('goose_db_version', 'sqlite_sequence')`,
		`SELECT 'index ' || m.tbl_name || '.' || m.name || ' ' || coalesce(m.sql,
		        'auto(' || (SELECT group_concat(coalesce(x.name, '?'), ',') FROM pragma_index_xinfo(m.name) AS x WHERE x.key) || ')')
		   FROM sqlite_master AS m
		  WHERE m.type = 'index' AND m.tbl_name <> 'goose_db_version'`,
		`SELECT 'table ' || name || ' ' || sql FROM sqlite_master
		  WHERE type = 'table' AND name NOT IN ('goose_db_version', 'sqlite_sequence')`,
		`SELECT 'trigger ' || name || ' ' || sql FROM sqlite_master WHERE type IN ('trigger', 'view')`,
	)
	for i, l := range lines {
		l = strings.Join(strings.Fields(l), " ")
		lines[i] = strings.ReplaceAll(l, ", ", ",")
	}
	return lines, err
}

func queryLines(ctx context.Context, db *sql.DB, queries ...string) ([]string, error) {
	var lines []string
	for _, q := range queries {
		rows, err := db.QueryContext(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", strings.Fields(q)[1], err)
		}
		for rows.Next() {
			var l string
			if err := rows.Scan(&l); err != nil {
				rows.Close()
				return nil, err
			}
			lines = append(lines, l)
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return nil, err
		}
	}
	return lines, nil
}
