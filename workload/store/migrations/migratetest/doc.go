// Package migratetest checks a dialect's migrations in both directions:
// RoundTrip migrates an empty database up one version at a time, recording
// its schema at each version, then down one version at a time to empty and
// up again to the latest, and fails at the first version whose schema
// differs from the one the fresh migration to that version left (a Down
// section that recreates an index in another form, forgets a column,
// drops what an earlier Down then cannot find).
//
// The schema of a version is what the store's queries depend on and a
// dialect can list: every column with its type, nullability, default and
// collation, every index with its definition (columns, INCLUDE, WHERE),
// every constraint, table and sequence. The dialect packages (../../sqlite,
// ../../postgres) pass the listing of their database (SQLiteSchema,
// PostgresSchema here) and a database of their own.
package migratetest
