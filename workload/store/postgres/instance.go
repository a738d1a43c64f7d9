package postgres

import (
	"context"
	"errors"
	"fmt"
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

// LockInstance takes InstanceLockKey, exclusively when exclusive is true
// (in-process index: this must be the only process on the database) or
// shared otherwise (shared index: any number of such processes), on a
// connection it keeps out of the pool until release is called. It fails
// with ErrInstanceLocked, without waiting, when the other mode is held. The
// lock lasts as long as that connection: if PostgreSQL drops it, the check
// no longer applies (it guards starts, not a running process).
func (db *DB) LockInstance(ctx context.Context, exclusive bool) (release func(), err error) {
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
	// Hijack: the connection (and the lock) leaves the pool for good and
	// is closed on release, which ends the session and frees the lock.
	pc := conn.Hijack()
	return func() { _ = pc.Close(context.Background()) }, nil
}
