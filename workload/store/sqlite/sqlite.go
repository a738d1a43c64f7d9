package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/pressly/goose/v3"
	msqlite "modernc.org/sqlite" // the database/sql driver "sqlite"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/outbox"
	"github.com/tetra-messenger/tetra/workload/store/migrations"
	"github.com/tetra-messenger/tetra/workload/store/storecore"
)

// Compile-time checks: one *DB serves as both the history store and the
// outbox log of the embedded mode.
var (
	_ history.Store         = (*DB)(nil)
	_ history.FleetRecorder = (*DB)(nil)
	_ history.WriteProber   = (*DB)(nil)
	_ outbox.Log            = (*DB)(nil)
)

// DB is the SQLite store: chats, members, history, read receipts and the
// single-partition outbox log in one database file.
//
// Every write (chat changes, Commit, SaveReads, PurgeHistory, DeleteBelow)
// goes through one dedicated writer connection, so write transactions never
// interleave and outbox positions are assigned in commit order. Reads
// (Chat, ChatsOf, Page, Scan, Head, Stats, Partitions) use a separate pool of
// query-only connections that read WAL snapshots and never wait for the
// writer. All methods are safe for concurrent use.
type DB struct {
	// The algorithms of AddMember, RemoveMember and the ChatAPI
	// (storecore), on core.
	storecore.Methods
	// Partitions and PartitionOf: the outbox is one partition.
	storecore.OnePartition

	cfg Config
	w   *sql.DB // the writer: exactly one connection
	r   *sql.DB // the read pool

	// Writer statements, bound to the writer's one connection and reused by
	// every transaction through Tx.StmtContext.
	wMembers, wChatExists, wEpoch, wSeqs, wDepth *sql.Stmt
	// Commit's lookups and multi-row INSERTs (see manyStmt).
	readKeys, readIDs, insertHistory, insertOutbox *manyStmt
	// Reader statements, prepared per pooled connection on first use.
	rPage, rScan, rHead *sql.Stmt

	// cache holds member lists for Commit, valid for one membership epoch.
	cache history.MemberCache
	// ckpt checkpoints the WAL beside the writer, and truncates it after
	// a delete (checkpoint.go).
	ckpt *checkpointer

	closeOnce sync.Once
	closeErr  error
}

// useFdatasync makes SQLite commit with fdatasync(2) instead of fsync(2),
// process-wide, where the platform has it (Linux, the BSDs, illumos;
// elsewhere the driver keeps fsync). fdatasync writes a file's data and
// the metadata needed to read it back, its size included, so a commit
// synced with it survives power loss as one synced with fsync does (G1);
// it skips the timestamps, whose journal commit on ext4 is most of what an
// fsync costs. It is what SQLite itself uses on Linux (its configure
// script finds fdatasync); the transpiled driver keeps SQLite's source
// default, fsync, unless asked (modernc.org/sqlite.Fdatasync). Measured
// in docs/benchmarks.md ("CPU per message, third pass").
var useFdatasync = sync.OnceFunc(func() { _, _ = msqlite.Fdatasync(true) })

// Open opens (creating when missing) the database at cfg.Path, applies the
// embedded migrations, and returns the store. A bad Config is reported with
// the field's name; a database that cannot be opened or migrated gives an
// error wrapping history.ErrUnavailable. Close the DB when done.
func Open(ctx context.Context, cfg Config) (*DB, error) {
	cfg, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	if dir := filepath.Dir(cfg.Path); dir != "" {
		if err := os.MkdirAll(dir, 0o750); err != nil {
			return nil, fmt.Errorf("sqlite: create directory of Config.Path: %w: %w", history.ErrUnavailable, err)
		}
	}
	useFdatasync()
	db := &DB{cfg: cfg}
	db.Methods = storecore.Methods{Backend: core{db}}
	ok := false
	defer func() {
		if !ok {
			db.Close()
		}
	}()

	db.w, err = sql.Open("sqlite", cfg.writerDSN())
	if err != nil {
		return nil, unavailable("open writer", err)
	}
	db.w.SetMaxOpenConns(1)
	db.w.SetMaxIdleConns(1)
	db.w.SetConnMaxLifetime(0)
	db.w.SetConnMaxIdleTime(0)
	if err := db.w.PingContext(ctx); err != nil {
		return nil, unavailable("open writer", err)
	}
	if err := migrate(ctx, db.w); err != nil {
		return nil, unavailable("migrate", err)
	}

	db.r, err = sql.Open("sqlite", cfg.readerDSN())
	if err != nil {
		return nil, unavailable("open readers", err)
	}
	db.r.SetMaxOpenConns(cfg.ReadConns)
	db.r.SetMaxIdleConns(cfg.ReadConns)
	db.r.SetConnMaxLifetime(0)
	if err := db.r.PingContext(ctx); err != nil {
		return nil, unavailable("open readers", err)
	}

	if err := db.prepare(ctx); err != nil {
		return nil, unavailable("prepare", err)
	}
	if db.ckpt, err = startCheckpointer(cfg); err != nil {
		return nil, unavailable("open the checkpointer's connection", err)
	}
	ok = true
	return db, nil
}

// migrate applies the embedded SQLite migrations that are not yet applied.
func migrate(ctx context.Context, w *sql.DB) error {
	// Not verbose, so goose logs nothing; no global registry, so Go
	// migrations registered elsewhere in the binary cannot leak in.
	p, err := goose.NewProvider(goose.DialectSQLite3, w, migrations.SQLite(),
		goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return err
	}
	// Not p.Close: that would close the writer pool the store keeps using.
	return migrations.Up(ctx, p, "sqlite")
}

// pageQuery reads a page of a chat (?1) after the message ?2, resolved to
// its sequence only within the chat, limit ?3. It ranges over history_unread (chat_id, id, sender_id).
const pageQuery = `SELECT ` + messageColumns + `
	FROM history AS h
	WHERE h.chat_id = ?1
	  AND h.id > coalesce((SELECT id FROM history WHERE message_id = ?2 AND chat_id = ?1), 0)
	ORDER BY h.id LIMIT ?3`

// scanQuery is the outbox scan: a range of outbox_messages' primary key
// (a record's id is its last row's position) above ?1, at most ?2 records,
// each joined by key to its history row, with the line below which rows
// are deleted (Scan).
const scanQuery = `SELECT o.id, o.n, o.recipients, o.created_at, (SELECT below FROM outbox_line),
	       ` + messageColumns + `
	FROM outbox_messages AS o JOIN history AS h ON h.id = o.history_id
	WHERE o.id > ?1 ORDER BY o.id LIMIT ?2`

// headQuery is Head: the highest position ever assigned, which
// AUTOINCREMENT keeps across deletes.
const headQuery = `SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'outbox_messages'), 0)`

func (db *DB) prepare(ctx context.Context) error {
	var err error
	prep := func(pool *sql.DB, dst **sql.Stmt, query string) {
		if err != nil {
			return
		}
		*dst, err = pool.PrepareContext(ctx, query)
	}
	prep(db.w, &db.wMembers, `SELECT user_id FROM members WHERE chat_id = ? ORDER BY user_id`)
	prep(db.w, &db.wChatExists, `SELECT 1 FROM chats WHERE id = ?`)
	prep(db.w, &db.wEpoch, `SELECT epoch FROM membership_epoch WHERE id = 1`)
	prep(db.w, &db.wDepth, `UPDATE outbox_line SET depth = depth + ?`)
	prep(db.w, &db.wSeqs, `SELECT coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'history'), 0),
		(`+headQuery+`)`)
	many := func(dst **manyStmt, per int, row string, text func(list string) string) {
		if err == nil {
			*dst, err = prepareMany(ctx, db.w, per, row, text)
		}
	}
	many(&db.readKeys, 2, "(?, ?)", func(list string) string {
		return `WITH k(s, c) AS (VALUES ` + list + `)
		SELECT ` + messageColumns + `
		FROM k CROSS JOIN history AS h ON h.sender_id = k.s AND h.correlation_id = k.c`
	})
	many(&db.readIDs, 1, "?", func(list string) string {
		return `SELECT message_id FROM history WHERE message_id IN (` + list + `)`
	})
	// OR ROLLBACK, and ids left to AUTOINCREMENT: see committer.insert.
	many(&db.insertHistory, 7, "(?, ?, ?, ?, ?, ?, ?)", func(list string) string {
		return `INSERT OR ROLLBACK INTO history (message_id, chat_id, sender_id, sender_device, correlation_id, body, sent_at)
		VALUES ` + list
	})
	many(&db.insertOutbox, 5, "(?, ?, ?, ?, ?)", func(list string) string {
		return `INSERT OR ROLLBACK INTO outbox_messages (id, history_id, recipients, n, created_at) VALUES ` + list
	})
	prep(db.r, &db.rPage, pageQuery)
	prep(db.r, &db.rScan, scanQuery)
	prep(db.r, &db.rHead, headQuery)
	return err
}

// Ping checks that the writer and the read pool both answer. Errors wrap
// history.ErrUnavailable.
func (db *DB) Ping(ctx context.Context) error {
	if err := db.w.PingContext(ctx); err != nil {
		return unavailable("ping writer", err)
	}
	var one int
	if err := db.r.QueryRowContext(ctx, `SELECT 1`).Scan(&one); err != nil {
		return unavailable("ping readers", err)
	}
	return nil
}

// Close closes the statements and both connection pools. It is idempotent:
// later calls return the first call's result. Every other method fails with
// ErrUnavailable after Close.
func (db *DB) Close() error {
	db.closeOnce.Do(func() {
		var errs []error
		if db.ckpt != nil {
			errs = append(errs, db.ckpt.close())
		}
		for _, s := range []*sql.Stmt{db.wMembers, db.wChatExists, db.wEpoch, db.wSeqs, db.wDepth,
			db.rPage, db.rScan, db.rHead} {
			if s != nil {
				errs = append(errs, s.Close())
			}
		}
		for _, r := range []*manyStmt{db.readKeys, db.readIDs, db.insertHistory, db.insertOutbox} {
			if r != nil {
				errs = append(errs, r.close())
			}
		}
		if db.r != nil {
			errs = append(errs, db.r.Close())
		}
		if db.w != nil {
			errs = append(errs, db.w.Close())
		}
		db.closeErr = errors.Join(errs...)
	})
	return db.closeErr
}

// Config returns the configuration the store runs with, defaults filled in.
func (db *DB) Config() Config { return db.cfg }

// unavailable wraps a backend failure for the history.Store methods.
func unavailable(op string, err error) error {
	if isFull(err) {
		return fmt.Errorf("sqlite: %s: %w: %w: %w", op, history.ErrUnavailable, history.ErrStorageFull, err)
	}
	return fmt.Errorf("sqlite: %s: %w: %w", op, history.ErrUnavailable, err)
}

// sqliteFull is SQLITE_FULL, the primary result code of a write that found
// no room (the disk, or max_page_count).
const sqliteFull = 13

// isFull reports whether err is SQLite's SQLITE_FULL (any extended code).
func isFull(err error) bool {
	var se interface{ Code() int }
	return errors.As(err, &se) && se.Code()&0xff == sqliteFull
}

// logUnavailable wraps a backend failure for the outbox.Log methods.
func logUnavailable(op string, err error) error {
	return fmt.Errorf("sqlite: outbox %s: %w: %w", op, outbox.ErrUnavailable, err)
}

// sqliteConstraint is SQLITE_CONSTRAINT, the primary result code of a
// statement a UNIQUE, NOT NULL, CHECK or foreign key constraint stopped.
const sqliteConstraint = 19

// isConstraint reports whether err is SQLite's SQLITE_CONSTRAINT (any
// extended code).
func isConstraint(err error) bool {
	var se interface{ Code() int }
	return errors.As(err, &se) && se.Code()&0xff == sqliteConstraint
}

// rollback ends tx when it was not committed; after a Commit it is a no-op.
func rollback(tx *sql.Tx) { _ = tx.Rollback() }

// nanos is storecore.Nanos: the stored form of a time, Unix nanoseconds.
func nanos(t time.Time) int64 { return storecore.Nanos(t) }

// fromNanos is storecore.FromNanos: a stored time back, in UTC.
func fromNanos(n int64) time.Time { return storecore.FromNanos(n) }
