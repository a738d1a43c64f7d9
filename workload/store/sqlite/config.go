package sqlite

import (
	"fmt"
	"net/url"
	"runtime"
	"strconv"
	"strings"
	"time"
)

// Defaults and limits of Config.
const (
	// DefaultSynchronous is PRAGMA synchronous when Config.Synchronous is
	// empty. FULL fsyncs the WAL on every commit, which G1 (durable
	// acceptance) needs: NORMAL may lose the last transactions on power loss.
	DefaultSynchronous = "FULL"
	// DefaultBusyTimeout is how long a connection waits for a lock held by
	// another connection (another process on the same file, or a WAL
	// checkpoint) before failing with ErrUnavailable, when
	// Config.BusyTimeout is zero.
	DefaultBusyTimeout = 5 * time.Second
	// MaxBusyTimeout is the largest Config.BusyTimeout accepted.
	MaxBusyTimeout = 10 * time.Minute
	// MaxReadConns is the largest Config.ReadConns accepted.
	MaxReadConns = 256
)

// Config configures Open. Build one with DefaultConfig and change fields as
// needed: the zero value of Outbox is false, which a server in SQL mode
// does not want.
type Config struct {
	// Path is the database file. Required. Its parent directory is created
	// when missing (mode 0o750). The file, and its -wal and -shm companions,
	// are created on first open. Must be a plain file path: ":memory:",
	// "file:" URIs and paths containing '?' are refused, because the store
	// opens two connection pools that must see the same database.
	Path string
	// Outbox makes Commit write one outbox row per chat member (SQL mode).
	// False stores history only (Kafka mode, where a relay feeds the log from
	// history); the outbox.Log methods then see an empty log. DefaultConfig
	// sets it to true.
	Outbox bool
	// Synchronous is PRAGMA synchronous for the writer: "FULL" (the default
	// when empty; needed for G1), "EXTRA", "NORMAL" or "OFF". Case is
	// ignored.
	Synchronous string
	// BusyTimeout is PRAGMA busy_timeout for every connection. Zero means
	// DefaultBusyTimeout; allowed range 0 to MaxBusyTimeout, millisecond
	// resolution.
	BusyTimeout time.Duration
	// ReadConns caps the read pool (Page, Chat, ChatsOf, Scan, Head, Stats).
	// Zero means max(4, GOMAXPROCS); allowed range 0 to MaxReadConns. Writes
	// always go through one dedicated connection.
	ReadConns int
}

// DefaultConfig returns the configuration for a database file at path:
// outbox rows on, synchronous FULL, DefaultBusyTimeout, default read pool.
func DefaultConfig(path string) Config {
	return Config{
		Path:        path,
		Outbox:      true,
		Synchronous: DefaultSynchronous,
		BusyTimeout: DefaultBusyTimeout,
	}
}

// validate checks c and returns it with defaults filled in. Errors name the
// field and the allowed values.
func (c Config) validate() (Config, error) {
	switch {
	case strings.TrimSpace(c.Path) == "":
		return c, fmt.Errorf("sqlite: Config.Path is required (a database file path)")
	case c.Path == ":memory:" || strings.HasPrefix(c.Path, "file:"):
		return c, fmt.Errorf("sqlite: Config.Path %q: want a plain file path, not an in-memory database or a URI", c.Path)
	case strings.ContainsAny(c.Path, "?\x00"):
		return c, fmt.Errorf("sqlite: Config.Path %q: must not contain '?' or NUL", c.Path)
	}
	if c.Synchronous == "" {
		c.Synchronous = DefaultSynchronous
	}
	c.Synchronous = strings.ToUpper(c.Synchronous)
	switch c.Synchronous {
	case "FULL", "EXTRA", "NORMAL", "OFF":
	default:
		return c, fmt.Errorf("sqlite: Config.Synchronous %q: want FULL, EXTRA, NORMAL or OFF", c.Synchronous)
	}
	if c.BusyTimeout < 0 || c.BusyTimeout > MaxBusyTimeout {
		return c, fmt.Errorf("sqlite: Config.BusyTimeout %v: want 0 (default %v) to %v", c.BusyTimeout, DefaultBusyTimeout, MaxBusyTimeout)
	}
	if c.BusyTimeout == 0 {
		c.BusyTimeout = DefaultBusyTimeout
	}
	if c.ReadConns < 0 || c.ReadConns > MaxReadConns {
		return c, fmt.Errorf("sqlite: Config.ReadConns %d: want 0 (default) to %d", c.ReadConns, MaxReadConns)
	}
	if c.ReadConns == 0 {
		c.ReadConns = max(4, runtime.GOMAXPROCS(0))
	}
	return c, nil
}

// walCheckpointPages is about how many frames the WAL holds when the
// checkpointer copies it (checkpointMessages; checkpoint.go): 8,000
// frames, 32 MiB of WAL at 4 KiB pages, instead of SQLite's 1,000. A
// checkpoint copies each page once however many frames hold it, and a
// chat's index pages and a sender's dedupe pages are rewritten by commit
// after commit, so fewer, larger checkpoints copy far fewer pages:
// BenchmarkCommit's CPU per message fell from about 74 to 66 µs with it
// (docs/benchmarks.md).
const walCheckpointPages = 8000

// walBackstopPages is the writer's wal_autocheckpoint: the checkpointer
// copies the WAL long before it has this many frames, so the writer
// checkpoints inside a commit only when the checkpointer fell behind.
const walBackstopPages = 4 * walCheckpointPages

// writerCacheKiB is the writer's cache_size in KiB: 32 MiB, at most,
// instead of SQLite's 2 MiB (the read pool keeps the default).
const writerCacheKiB = 32 << 10

// writerDSN is the data source name of the single writer connection: WAL,
// the configured synchronous level, foreign keys off, temp_store MEMORY,
// and BEGIN IMMEDIATE so a write transaction takes the file's write lock up
// front (two processes on one file then queue on busy_timeout instead of
// failing on upgrade).
//
// Foreign keys are off on the writer because an immediate foreign key lets
// a multi-row INSERT stop halfway, so SQLite keeps a statement journal for
// each of Commit's inserts (see committer.insert), and checks a parent row
// per row inserted. What the keys guarded holds by construction, as every
// store of the project must keep it without a database's help (PostgreSQL
// and the Kafka outbox too): a history row is inserted only for a chat the
// same transaction read members of, its outbox rows after it in the same
// transaction, PurgeHistory deletes a message's outbox rows before its
// history row (invariant I1), and chats are never deleted.
// TestForeignKeysHoldWithoutEnforcement runs the conformance suite and
// then PRAGMA foreign_key_check, which reports any row whose parent is
// missing. The read pool keeps them on; they change nothing for a reader.
func (c Config) writerDSN() string {
	q := url.Values{}
	q.Set("_busy_timeout", strconv.FormatInt(c.BusyTimeout.Milliseconds(), 10))
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", c.Synchronous)
	q.Set("_foreign_keys", "0")
	q.Set("_txlock", "immediate")
	// Statement journals (a multi-row INSERT keeps one, to undo itself
	// alone) and temporary tables in memory, not in temporary files: the
	// journal of a statement only matters until the statement ends, and
	// writing it to a file cost a pwrite per page (a sixth of Commit).
	q.Add("_pragma", "temp_store(MEMORY)")
	// The writer's page cache holds the pages commits keep coming back to
	// (the end of each busy chat's range of history_unread, each busy
	// sender's page of the dedupe key, the interior pages above them):
	// with SQLite's default of 2 MiB they no longer fit once a few
	// hundred chats are busy, and every commit read some back with
	// pread(2) (see writerCacheKiB).
	q.Add("_pragma", "cache_size(-"+strconv.Itoa(writerCacheKiB)+")")
	// The checkpointer copies the WAL beside the writer (checkpoint.go);
	// the writer checkpoints only past the backstop.
	q.Add("_pragma", "wal_autocheckpoint("+strconv.Itoa(walBackstopPages)+")")
	// A delete erases the message's text (PROTOCOL.md §7.3): with
	// secure_delete the space a row update or delete frees is overwritten
	// with zeros in the pages written, so the old text does not linger in
	// the database file (docs/design.md, "Edit and delete").
	q.Add("_pragma", "secure_delete(ON)")
	return c.Path + "?" + q.Encode()
}

// readerDSN is the data source name of the read pool: query-only
// connections on the WAL, which read a snapshot and never wait for the
// writer.
func (c Config) readerDSN() string {
	q := url.Values{}
	q.Set("_busy_timeout", strconv.FormatInt(c.BusyTimeout.Milliseconds(), 10))
	q.Set("_foreign_keys", "1")
	q.Set("_query_only", "1")
	return c.Path + "?" + q.Encode()
}
