package migrations

import (
	"embed"
	"io/fs"
)

// FS holds every dialect's migration files under a folder named after the
// dialect (today only "sqlite"). Use SQLite for a goose-ready view.
//
//go:embed sqlite/*.sql
var FS embed.FS

// SQLite returns the SQLite migrations as a file system whose root holds the
// numbered .sql files, the layout goose.NewProvider expects.
func SQLite() fs.FS {
	sub, err := fs.Sub(FS, "sqlite")
	if err != nil {
		// fs.Sub fails only on an invalid path; "sqlite" is a constant.
		panic("migrations: " + err.Error())
	}
	return sub
}
