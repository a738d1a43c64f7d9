package migrations

import (
	"embed"
	"io/fs"
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
