package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	"github.com/jackc/pgx/v5"
)

// InstanceLockKey is the session-level advisory lock that tells whether the
// processes on one database may be several. A process whose waterline index
// is in process holds it exclusively (it must be the only one: another
// process's GC would not see its pins); a process on a shared index (Redis)
// holds it shared. It shows in pg_locks with classid 0x74657472 and objid
// 0x613a696e ("tetra:in").
const InstanceLockKey int64 = 0x74657472_613a696e

// ErrInstanceLocked is returned by LockInstance when the lock is held in the
// conflicting mode by another session.
var ErrInstanceLocked = errors.New("postgres: another tetra process holds the instance lock")

// ErrOtherNamespace is returned by LockInstance when a process on a shared
// index with another namespace (another Redis key prefix) uses the
// database: the two would keep separate waterlines over one outbox, and
// each GC would delete rows the other's clients have not acknowledged.
var ErrOtherNamespace = errors.New("postgres: another tetra process uses this database with a different index namespace")

// ErrOtherFleet is returned by LockInstance when a process of another fleet
// identity (another Redis, key prefix or token secret: the caller's fleet
// argument) holds its fleet lock on the database.
var ErrOtherFleet = errors.New("postgres: another tetra process uses this database with a different fleet identity")

// fleetLockClass is the first key of the two-key advisory lock a
// shared-index process holds on its fleet identity (the second key is a
// hash of the identity); it shows in pg_locks as classid 0x74657466
// ("tetf") with objsubid 2.
const fleetLockClass int32 = 0x74657466

// namespaceLockClass is the first key of the two-key advisory lock a
// shared-index process holds on its namespace (the second key is a hash of
// the namespace); it shows in pg_locks as classid 0x74657470 with
// objsubid 2.
const namespaceLockClass int32 = 0x74657470

// LockInstance takes InstanceLockKey, exclusively when exclusive is true
// (in-process index: this must be the only process on the database) or
// shared otherwise (shared index: any number of such processes), on a
// connection it keeps out of the pool until release is called. It fails
// with ErrInstanceLocked, without waiting, when the other mode is held. The
// lock lasts as long as that connection: if PostgreSQL drops it, the check
// no longer applies (it guards starts, not a running process).
//
// With a shared index, namespace names it (the Redis key prefix): the
// process also holds a shared lock on the namespace and fails with
// ErrOtherNamespace, without waiting, when another session holds one on a
// different namespace. Likewise fleet, when not empty, names the whole fleet
// identity (the Redis deployment, the prefix, the token secret's
// fingerprint): a shared lock on it, and ErrOtherFleet when another session
// holds one on a different identity. The namespace check is kept apart so
// that processes of an older version, which hold only that one, are still
// told apart by prefix during a rolling upgrade.
func (db *DB) LockInstance(ctx context.Context, exclusive bool, namespace, fleet string) (release func(), err error) {
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres: instance lock: %w", err)
	}
	q := `SELECT pg_try_advisory_lock_shared($1)`
	if exclusive {
		q = `SELECT pg_try_advisory_lock($1)`
	}
	var ok bool
	if err := conn.QueryRow(ctx, q, InstanceLockKey).Scan(&ok); err != nil {
		conn.Release()
		return nil, fmt.Errorf("postgres: instance lock: %w", err)
	}
	if !ok {
		conn.Release()
		return nil, ErrInstanceLocked
	}
	if !exclusive {
		checks := []struct {
			class int32
			name  string
			err   error
		}{{namespaceLockClass, namespace, ErrOtherNamespace}, {fleetLockClass, fleet, ErrOtherFleet}}
		for _, c := range checks {
			if c.class == fleetLockClass && fleet == "" {
				continue
			}
			others, err := lockSharedAlone(ctx, conn.Conn(), c.class, c.name)
			if err != nil {
				conn.Conn().Close(ctx)
				conn.Release()
				return nil, fmt.Errorf("postgres: instance lock: %w", err)
			}
			if others > 0 {
				conn.Conn().Close(ctx) // ends the session and its locks
				conn.Release()
				return nil, c.err
			}
		}
	}
	// Hijack: the connection (and the lock) leaves the pool for good and
	// is closed on release, which ends the session and frees the lock.
	pc := conn.Hijack()
	return func() { _ = pc.Close(context.Background()) }, nil
}

// lockSharedAlone takes a shared two-key advisory lock (class, hash of
// name) and counts the sessions holding a lock of that class on another
// name. Taking first and counting second means two processes starting at
// once with different names see each other (both are refused, and
// whichever restarts first wins), never neither.
func lockSharedAlone(ctx context.Context, conn *pgx.Conn, class int32, name string) (others int, err error) {
	h := fnv.New32a()
	h.Write([]byte(name))
	key := int32(h.Sum32())
	var ok bool
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock_shared($1::int4, $2::int4)`, class, key).Scan(&ok); err != nil {
		return 0, err
	}
	err = conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks
		WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND classid = $1::int4::oid AND objsubid = 2 AND objid <> ($2::int4::bigint & 4294967295)::oid AND granted`,
		class, key).Scan(&others)
	return others, err
}

// ownerLockClass is the first key of the two-key advisory lock a
// shared-index process holds on its owner name (LockOwner); the second key
// is a hash of the namespace and the owner name. It shows in pg_locks as
// classid 0x7465746f ("teto") with objsubid 2.
const ownerLockClass int32 = 0x7465746f

// codeLockNotAvailable is the SQLSTATE of a lock wait cut by lock_timeout.
const codeLockNotAvailable = "55P03"

// LockOwner takes an exclusive session-level advisory lock named by
// (namespace, owner), the Redis key prefix and this process's
// --index-owner, on a connection it keeps out of the pool until release is
// called, waiting up to wait for it (a predecessor's backend may take a
// moment to notice its client died).
//
// Every shared-index process holds the lock for its life, so taken = true
// proves that the last process that held it under this owner name has lost
// its database session: it died (the kernel closed its socket, PostgreSQL
// ended the session and freed the lock), or PostgreSQL dropped the session
// otherwise (a restart of the database). The caller may then take that
// owner's liveness record over at once instead of waiting for it to lapse
// (issue 13, point 6). taken = false (release is then a no-op): another
// session holds it, a live process with the same owner name or a dead one
// whose session PostgreSQL has not ended yet (a host that vanished without
// closing its connections): the caller waits for the record to lapse, as
// without this lock. Errors (the database does not answer) mean neither.
//
// Like LockInstance, the lock guards starts: if PostgreSQL drops the
// holder's session while the holder lives on, a later process with the
// same owner name can take it.
func (db *DB) LockOwner(ctx context.Context, namespace, owner string, wait time.Duration) (taken bool, release func(), err error) {
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return false, nil, fmt.Errorf("postgres: owner lock: %w", err)
	}
	h := fnv.New32a()
	h.Write([]byte(namespace + "\x00" + owner))
	b := &pgx.Batch{}
	// The connection leaves the pool below either way, so the setting
	// dies with it.
	b.Queue(fmt.Sprintf(`SET lock_timeout = %d`, max(wait.Milliseconds(), 1)))
	b.Queue(`SELECT pg_advisory_lock($1::int4, $2::int4)`, ownerLockClass, int32(h.Sum32()))
	err = conn.SendBatch(ctx, b).Close()
	pc := conn.Hijack() // never back to the pool: it holds the lock, or a lock_timeout
	switch {
	case err == nil:
		return true, func() { _ = pc.Close(context.Background()) }, nil
	case pgCode(err) == codeLockNotAvailable:
		_ = pc.Close(ctx)
		return false, func() {}, nil
	default:
		_ = pc.Close(ctx)
		return false, nil, fmt.Errorf("postgres: owner lock: %w", err)
	}
}

// fleetMetaKey is the tetra_meta key of the fleet identity (FleetRecorder).
const fleetMetaKey = "fleet"

// Fleet implements history.FleetRecorder.
func (db *DB) Fleet(ctx context.Context) (string, error) {
	var v string
	err := db.pool.QueryRow(ctx, `SELECT value FROM tetra_meta WHERE key = $1`, fleetMetaKey).Scan(&v)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", unavailable("fleet identity", err)
	}
	return v, nil
}

// SetFleet implements history.FleetRecorder.
func (db *DB) SetFleet(ctx context.Context, identity string) error {
	_, err := db.pool.Exec(ctx, `INSERT INTO tetra_meta (key, value) VALUES ($1, $2)
		ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value`, fleetMetaKey, identity)
	if err != nil {
		return unavailable("record the fleet identity", err)
	}
	return nil
}

// ProbeWrite implements history.WriteProber.
func (db *DB) ProbeWrite(ctx context.Context) error {
	if _, err := db.pool.Exec(ctx, `UPDATE tetra_meta SET value = value WHERE key = 'outbox_id'`); err != nil {
		return unavailable("write probe", err)
	}
	return nil
}
