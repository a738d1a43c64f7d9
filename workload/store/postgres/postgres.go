package postgres

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/outbox"
	"github.com/tetra-messenger/tetra/workload/store/migrations"
	"github.com/tetra-messenger/tetra/workload/store/storecore"
)

// Compile-time checks: one *DB serves as both the history store and the
// outbox log of the postgres mode.
var (
	_ history.Store         = (*DB)(nil)
	_ history.FleetRecorder = (*DB)(nil)
	_ history.WriteProber   = (*DB)(nil)
	_ outbox.Log            = (*DB)(nil)
)

// AppendLockKey is the key of the transaction-level advisory lock that
// serializes every transaction drawing history or outbox ids (Commit), in
// every process sharing the database. Head and Stats take it in shared mode.
// It shows in pg_locks as locktype 'advisory' with classid 0x74657472 and
// objid 0x613a6f62 ("tetra:ob" in ASCII).
const AppendLockKey int64 = 0x74657472_613a6f62

// migrationLockKey is the session-level advisory lock that lets one process
// at a time run the migrations.
const migrationLockKey int64 = 0x74657472_613a6d67 // "tetra:mg"

// DB is the PostgreSQL store: chats, members, history, read receipts and
// the single-partition outbox log, over one pgx connection pool.
//
// Commit appends under AppendLockKey, so history and outbox ids are drawn
// in commit order across processes, and a follower scanning forward by id
// never skips a row that commits late. All methods are safe for concurrent
// use.
type DB struct {
	// The algorithms of AddMember, RemoveMember and the ChatAPI
	// (storecore), on core.
	storecore.Methods
	// Partitions and PartitionOf: the outbox is one partition.
	storecore.OnePartition

	cfg    Config
	pool   *pgxpool.Pool
	target string // user@host:port/database, for messages

	// cache holds member lists for Commit, valid for one membership epoch.
	cache history.MemberCache
	// readFirst counts the Commits left that read before they write,
	// after an optimistic attempt lost its bet (see DB.Commit).
	readFirst atomic.Int32
	// inst is the instance lock LockInstance holds, nil when none: while
	// it is set, DeleteBelow deletes only under deleteGuardSQL.
	inst atomic.Pointer[instanceLock]
	// settleOff skips LockInstance's second look (tests that need a
	// process started in the gap).
	settleOff bool
	// pingUntil (Unix nanoseconds) is until when every connection the
	// pool hands out is pinged first: set for pingAfterLoss when a pooled
	// connection turned out dead (see noteLost).
	pingUntil atomic.Int64
	// peekOff turns shouldPing's look at the socket off (tests of what
	// happens when a dead session is not seen before use).
	peekOff bool
	// sessionsEnded, commitRetries and readRetries are SessionStats'
	// counts.
	sessionsEnded, commitRetries, readRetries atomic.Int64

	closeOnce sync.Once
}

// Open connects to cfg.URL, applies the embedded migrations (one process
// at a time, under a session advisory lock), and returns the store. A bad
// Config is reported with the field's name; a database that cannot be
// reached or migrated gives an error naming user, host, port and database
// (never the password) and wrapping history.ErrUnavailable. Close the DB
// when done.
func Open(ctx context.Context, cfg Config) (*DB, error) {
	return open(ctx, cfg, nil)
}

// open is Open with a hook that may adjust the pool configuration (tests
// install tracers with it).
func open(ctx context.Context, cfg Config, tweak func(*pgxpool.Config)) (*DB, error) {
	cfg, pc, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	if tweak != nil {
		tweak(pc)
	}
	db := &DB{cfg: cfg, target: target(pc)}
	db.Methods = storecore.Methods{Backend: core{db}}
	if pc.ShouldPing == nil {
		pc.ShouldPing = db.shouldPing
	}
	db.pool, err = pgxpool.NewWithConfig(ctx, pc)
	if err != nil {
		return nil, db.unreachable(err)
	}
	ok := false
	defer func() {
		if !ok {
			db.Close()
		}
	}()
	if err := db.pool.Ping(ctx); err != nil {
		return nil, db.unreachable(err)
	}
	if err := migrate(ctx, db.pool); err != nil {
		return nil, fmt.Errorf("postgres: migrate %s: %w: %w", db.target, history.ErrUnavailable, err)
	}
	ok = true
	return db, nil
}

// unreachable wraps a failure to connect, naming the database.
func (db *DB) unreachable(err error) error {
	return fmt.Errorf("postgres: connect to %s: %w: %w", db.target, history.ErrUnavailable, err)
}

// migrate applies the embedded PostgreSQL migrations that are not yet
// applied, through database/sql on top of the pool.
func migrate(ctx context.Context, pool *pgxpool.Pool) error {
	sqlDB := stdlib.OpenDBFromPool(pool)
	// Closing it releases its connections to the pool; the pool stays open.
	defer sqlDB.Close()
	// Not verbose, so goose logs nothing; no global registry, so Go
	// migrations registered elsewhere in the binary cannot leak in.
	p, err := goose.NewProvider(goose.DialectPostgres, sqlDB, migrations.Postgres(),
		goose.WithDisableGlobalRegistry(true),
		goose.WithSessionLocker(sessionLocker{}))
	if err != nil {
		return err
	}
	return migrations.Up(ctx, p, "postgres")
}

// sessionLocker makes concurrent Opens of one database migrate one at a
// time. It waits on the lock (cancelled with ctx) instead of polling every
// few seconds as goose's own PostgreSQL locker does.
type sessionLocker struct{}

var _ lock.SessionLocker = sessionLocker{}

func (sessionLocker) SessionLock(ctx context.Context, conn *sql.Conn) error {
	_, err := conn.ExecContext(ctx, `SELECT pg_advisory_lock($1)`, migrationLockKey)
	return err
}

func (sessionLocker) SessionUnlock(ctx context.Context, conn *sql.Conn) error {
	_, err := conn.ExecContext(ctx, `SELECT pg_advisory_unlock($1)`, migrationLockKey)
	return err
}

// Ping checks that the database answers. Errors wrap
// history.ErrUnavailable.
func (db *DB) Ping(ctx context.Context) error {
	if err := db.pool.Ping(ctx); err != nil {
		return unavailable("ping", err)
	}
	return nil
}

// Close closes the connection pool, waiting for connections in use to be
// returned. It is idempotent and returns nil. Every other method fails with
// ErrUnavailable after Close.
func (db *DB) Close() error {
	db.closeOnce.Do(func() {
		if db.pool != nil {
			db.pool.Close()
		}
	})
	return nil
}

// Config returns the configuration the store runs with, defaults filled in.
func (db *DB) Config() Config { return db.cfg }

// unavailable wraps a backend failure for the history.Store methods.
func unavailable(op string, err error) error {
	if pgCode(err) == codeDiskFull {
		return fmt.Errorf("postgres: %s: %w: %w: %w", op, history.ErrUnavailable, history.ErrStorageFull, err)
	}
	return fmt.Errorf("postgres: %s: %w: %w", op, history.ErrUnavailable, err)
}

// codeDiskFull is SQLSTATE 53100, disk_full.
const codeDiskFull = "53100"

// logUnavailable wraps a backend failure for the outbox.Log methods.
func logUnavailable(op string, err error) error {
	return fmt.Errorf("postgres: outbox %s: %w: %w", op, outbox.ErrUnavailable, err)
}

// pgCode returns the SQLSTATE of err, or "" when it is not a server error.
func pgCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// SQLSTATEs the store tells apart.
const (
	codeUniqueViolation = "23505"
)

// storable reports whether s can be stored in a PostgreSQL text column
// (storecore.Storable). A lookup key that is not storable matches no row.
func storable(s string) bool { return storecore.Storable(s) }

// pingAfterLoss is how long, after a pooled connection turned out dead,
// every connection the pool hands out is pinged first (DB.noteLost).
const pingAfterLoss = 2 * time.Second

// errConnLost marks a failure on a pooled connection that the failure
// closed (DB.noteLost): the database ended its session (a restart, a
// failover, pg_terminate_backend), most often while the connection sat
// idle in the pool, so the first statement sent on it failed.
var errConnLost = errors.New("the database ended the connection's session")

// shouldPing is the pool's ShouldPing, asked each time a pooled
// connection is about to be handed out. It pings (and so has the pool
// replace a dead one, without a statement failing on it):
//   - a connection whose socket has bytes waiting or is closed
//     (hasPending: one recv(2) that neither waits nor consumes), which
//     is how a session the database ended while the connection sat idle
//     looks, so no statement is sent on such a connection;
//   - pgxpool's own rule, a connection idle for more than a second;
//   - every connection while pingUntil is ahead, so that after one
//     operation failed on a dead connection (noteLost) the others the
//     same event ended are found by a ping too, even where their FATAL
//     has not arrived yet.
//
// Each connection its socket showed so is counted in SessionStats'
// Ended. A session that ends while its connection is in use is not seen
// here: again and Commit's retry are for that.
func (db *DB) shouldPing(_ context.Context, p pgxpool.ShouldPingParams) bool {
	if !db.peekOff && hasPending(p.Conn) {
		db.sessionsEnded.Add(1)
		return true
	}
	return p.IdleDuration > time.Second || time.Now().UnixNano() < db.pingUntil.Load()
}

// again runs read, a statement with no effect to repeat, and runs it once
// more when it failed because the database ended the session of its
// connection under it (sessionEnded) while ctx is still live: the session
// ended while the read was running, or before its FATAL reached the
// client, so the look at the socket (shouldPing) could not see it. For
// pingAfterLoss after that, the pool pings what it hands out. Each second
// try is counted in SessionStats' ReadRetries.
func again[T any](ctx context.Context, db *DB, read func(context.Context) (T, error)) (T, error) {
	v, err := read(ctx)
	if err == nil || ctx.Err() != nil || !sessionEnded(err) {
		return v, err
	}
	db.readRetries.Add(1)
	db.pingUntil.Store(time.Now().Add(pingAfterLoss).UnixNano())
	return read(ctx)
}

// sessionEnded reports whether err says that the database ended the
// session under a statement, or that its connection broke: SQLSTATE
// 57P01 (admin_shutdown: a fast shutdown, pg_terminate_backend), 57P02
// (crash_shutdown), 57P03 (cannot_connect_now), 57P05
// (idle_session_timeout) or class 08 (connection exception), or the
// socket closed or reset under it.
func sessionEnded(err error) bool {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		switch pe.Code {
		case "57P01", "57P02", "57P03", "57P05":
			return true
		}
		return strings.HasPrefix(pe.Code, "08")
	}
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || pgconn.SafeToRetry(err)
}

// SessionStats counts, since Open, how the store met sessions the
// database ended under its pool (a restart, a failover,
// pg_terminate_backend); the server exports them as
// tetra_store_sessions_ended_total and tetra_store_retries_total.
type SessionStats struct {
	// Ended: idle pooled connections whose socket showed the session
	// had ended as the pool handed them out (DB.shouldPing); each was
	// pinged, and replaced when the ping failed.
	Ended int64
	// CommitRetries: Commit attempts that failed because the session of
	// their connection ended under them, and were tried once more (see
	// DB.Commit).
	CommitRetries int64
	// ReadRetries: reads (single statements or read-only transactions,
	// whole) and the BEGINs of writes' transactions that failed because
	// the session ended under them, and were tried once more (again).
	ReadRetries int64
}

// SessionStats returns the counts; safe for concurrent use.
func (db *DB) SessionStats() SessionStats {
	return SessionStats{Ended: db.sessionsEnded.Load(), CommitRetries: db.commitRetries.Load(), ReadRetries: db.readRetries.Load()}
}

// noteLost runs deferred, before conn is released, in an operation on
// ctx whose named error is *err: when that failed and conn is closed while
// ctx is still live (an ended context closes the connection too: a store
// timeout, not a lost session), the session was lost under the operation.
// It then wraps *err with errConnLost and has the pool ping what it hands
// out for pingAfterLoss.
func (db *DB) noteLost(ctx context.Context, conn *pgxpool.Conn, err *error) {
	if *err == nil || ctx.Err() != nil || !conn.Conn().PgConn().IsClosed() {
		return
	}
	db.pingUntil.Store(time.Now().Add(pingAfterLoss).UnixNano())
	*err = fmt.Errorf("%w (%w)", *err, errConnLost)
}

// rollback ends the transaction open on conn, if any, so the connection can
// go back to the pool; when that fails the pool discards the connection on
// Release.
func rollback(conn *pgxpool.Conn) {
	pc := conn.Conn().PgConn()
	if pc.IsClosed() || pc.TxStatus() == 'I' {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, _ = conn.Exec(ctx, "ROLLBACK")
}

// txRollback ends tx when it was not committed; after a Commit it is a
// no-op.
func txRollback(tx pgx.Tx) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = tx.Rollback(ctx)
}

// nanos is storecore.Nanos: the stored form of a time, Unix nanoseconds.
func nanos(t time.Time) int64 { return storecore.Nanos(t) }

// fromNanos is storecore.FromNanos: a stored time back, in UTC.
func fromNanos(n int64) time.Time { return storecore.FromNanos(n) }
