package migrations

import (
	"context"
	"embed"
	"fmt"
	"io/fs"

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
// versions. store names the store in it ("sqlite", "postgres").
func Up(ctx context.Context, p *goose.Provider, store string) error {
	if _, err := p.Up(ctx); err != nil {
		return err
	}
	current, target, err := p.GetVersions(ctx)
	if err != nil {
		return err
	}
	if current > target {
		return fmt.Errorf("%s: the database's schema is version %d, newer than this binary's %d: run the tetra that migrated it (or a newer one), or migrate it down with that binary first", store, current, target)
	}
	return nil
}
