// Package migrations holds the relational schema of tetra's stores as
// numbered SQL files, embedded in the binary and applied by goose
// (github.com/pressly/goose/v3) through its Provider API, so a fresh
// database and an old one converge on the same schema at startup without a
// separate migration step.
//
// Each dialect has its own folder of files named NNNN_description.sql with
// goose's "-- +goose Up" and "-- +goose Down" sections: sqlite/ for the
// embedded store (package ../sqlite) and postgres/ for the PostgreSQL store
// (package ../postgres). Both describe the same schema shape. A new dialect
// folder must be added to the embed pattern (an embed pattern that matches
// nothing fails the build).
//
// Files are append-only once released: a schema change is a new numbered
// file, never an edit of an applied one, because goose records applied
// versions in the goose_db_version table and will not re-run a file.
//
// Up is how a store applies them: it also refuses a database whose schema
// is newer than the binary's (what a downgrade leaves), naming both
// versions, and logs the versions it migrated from and to. tetra has no
// command that migrates down: going back to an older binary means
// restoring a backup taken before the upgrade. Every file's Down section
// is still written and tested (TestMigrationsRoundTrip in both stores), so
// such a command needs only goose's Provider.DownTo.
package migrations
