package migrations

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"log/slog"

	"github.com/pressly/goose/v3"
)

// FS holds every dialect's migration files under a folder named after the
// dialect ("sqlite", "postgres"). Use SQLite or Postgres for a goose-ready
// view.
//
//go:embed sqlite/*.sql postgres/*.sql
var FS embed.FS

// SQLite returns the SQLite migrations as a file system whose root holds the
// numbered .sql files, the layout goose.NewProvider expects.
func SQLite() fs.FS { return sub("sqlite") }

// Postgres returns the PostgreSQL migrations as a file system whose root
// holds the numbered .sql files, the layout goose.NewProvider expects.
func Postgres() fs.FS { return sub("postgres") }

func sub(dir string) fs.FS {
	s, err := fs.Sub(FS, dir)
	if err != nil {
		// fs.Sub fails only on an invalid path; dir is a constant.
		panic("migrations: " + err.Error())
	}
	return s
}

// Up applies p's pending migrations, then refuses a database whose schema
// is newer than this binary's: recorded at a version above the newest
// migration the binary embeds, which a downgrade leaves (the old binary's
// queries would fail on tables it does not know). The error names both
// versions. store names the store in it ("sqlite", "postgres"). When it
// applied migrations, Up logs one line at info level on slog's default
// logger naming the version it reached and those it applied ("schema
// migrated").
func Up(ctx context.Context, p *goose.Provider, store string) error {
	applied, err := p.Up(ctx)
	if err != nil {
		return err
	}
	current, target, err := p.GetVersions(ctx)
	if err != nil {
		return err
	}
	if current > target {
		return fmt.Errorf("%s: the database's schema is version %d, newer than this binary's %d: run the tetra that migrated it (or a newer one); tetra does not migrate a schema down in place, so going back to this binary means restoring the backup taken before the upgrade", store, current, target)
	}
	if len(applied) > 0 {
		versions := make([]int64, len(applied))
		for i, r := range applied {
			versions[i] = r.Source.Version
		}
		slog.InfoContext(ctx, "schema migrated", "store", store, "to", current, "applied", versions)
	}
	return nil
}
