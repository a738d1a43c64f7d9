package postgres

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"sync/atomic"
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
// with ErrInstanceLocked, without waiting, when the other mode is held.
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
//
// The locks last as long as their session, and PostgreSQL can end it
// while the process lives on (pg_terminate_backend, a restart, a
// failover): a process that started in that gap would pass the checks
// above. So LockInstance checks twice, 2 x InstanceKeepEvery apart
// (a start takes half a second longer), and the locks are kept, not only
// taken: every InstanceKeepEvery
// they are taken again on their session, which checks it and counts the
// other processes; a lost session is replaced and the locks taken again
// (a conflict found then is kept, the locks this process could take stay
// held, so that the other process sees it too). And DeleteBelow
// deletes only while this session holds the instance lock and no session
// holds a namespace or fleet lock of another name (see deleteGuardSQL), so
// neither of two conflicting processes deletes rows the other's clients
// have not acknowledged. onChange, when not nil, is called from the
// keeper with each change of state: ErrLockLost when the session is found
// gone, nil when the locks are held alone again, ErrInstanceLocked,
// ErrOtherNamespace or ErrOtherFleet when another process uses the
// database in a conflicting way (a newcomer that started while this
// process's session was lost, or the process it met; checked again every
// InstanceKeepEvery until it is gone).
func (db *DB) LockInstance(ctx context.Context, exclusive bool, namespace, fleet string, onChange func(error)) (release func(), err error) {
	l := &instanceLock{db: db, exclusive: exclusive, ns: hash32(namespace), fleet: hash32(fleet), hasFleet: fleet != "",
		onChange: onChange, stop: make(chan struct{}), done: make(chan struct{})}
	conn, err := db.pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres: instance lock: %w", err)
	}
	// Hijack: the connection (and the lock) leaves the pool for good and
	// is closed on release, which ends the session and frees the lock.
	pc := conn.Hijack()
	if err := l.take(ctx, pc); err != nil {
		_ = pc.Close(context.Background()) // ends the session and its locks
		if isConflict(err) {
			return nil, err
		}
		return nil, fmt.Errorf("postgres: instance lock: %w", err)
	}
	// A process whose session the database has just ended takes its locks
	// again within InstanceKeepEvery (keep): look again after twice that,
	// so a process started in that gap is refused at start too.
	if settle := db.lockSettle(); settle > 0 {
		select {
		case <-ctx.Done():
			_ = pc.Close(context.Background())
			return nil, fmt.Errorf("postgres: instance lock: %w", ctx.Err())
		case <-time.After(settle):
		}
		if err := l.take(ctx, pc); err != nil {
			_ = pc.Close(context.Background())
			if isConflict(err) {
				return nil, err
			}
			return nil, fmt.Errorf("postgres: instance lock: %w", err)
		}
	}
	l.conn = pc
	l.pid.Store(int32(pc.PgConn().PID()))
	db.inst.Store(l)
	go l.keep()
	return func() {
		close(l.stop)
		<-l.done
		db.inst.CompareAndSwap(l, nil)
		_ = l.conn.Close(context.Background())
	}, nil
}

// InstanceKeepEvery is how often the instance locks are taken again on
// their session, which is replaced when PostgreSQL has ended it
// (LockInstance).
const InstanceKeepEvery = 250 * time.Millisecond

// lockSettle is how long LockInstance waits before it checks the locks a
// second time: 2 x InstanceKeepEvery, unless a test set settleOff.
func (db *DB) lockSettle() time.Duration {
	if db.settleOff {
		return 0
	}
	return 2 * InstanceKeepEvery
}

// ErrLockLost is what LockInstance's onChange gets when the session
// holding the instance locks is found gone: until they are taken again,
// DeleteBelow deletes nothing.
var ErrLockLost = errors.New("postgres: the session holding the instance lock was ended by the database")

// isConflict reports whether err says another process holds the database
// in a conflicting way.
func isConflict(err error) bool {
	return errors.Is(err, ErrInstanceLocked) || errors.Is(err, ErrOtherNamespace) || errors.Is(err, ErrOtherFleet)
}

// hash32 is the second key of a two-key advisory lock on name.
func hash32(name string) int32 {
	h := fnv.New32a()
	h.Write([]byte(name))
	return int32(h.Sum32())
}

// instanceLock is what LockInstance holds: the session with the locks,
// what it takes, and its keeper.
type instanceLock struct {
	db        *DB
	exclusive bool
	ns, fleet int32 // the second keys of the namespace and fleet locks
	hasFleet  bool
	onChange  func(error)
	conn      *pgx.Conn    // the keeper's alone after LockInstance returns
	pid       atomic.Int32 // the backend pid of conn's session, for DeleteBelow
	stop      chan struct{}
	done      chan struct{}
}

// presenceLockKey is a session-level advisory lock every process that
// takes the instance lock holds shared, whatever its mode, and keeps even
// when the keeper finds the instance lock refused to it: so any other
// process sees it (take, deleteGuardSQL), including one that took the
// instance lock while this process's session was lost. It shows in
// pg_locks with classid 0x74657472 and objid 0x613a7072 ("tetra:pr").
const presenceLockKey int64 = 0x74657472_613a7072

// take takes the locks on conn, without waiting: the presence lock, the
// instance lock, then (shared index) the namespace and fleet locks, each
// refused when another session holds one of another name. On a refusal
// the locks already taken stay held; the caller closes conn or keeps it.
func (l *instanceLock) take(ctx context.Context, conn *pgx.Conn) error {
	q := `SELECT pg_try_advisory_lock_shared($1), pg_try_advisory_lock_shared($2)`
	if l.exclusive {
		q = `SELECT pg_try_advisory_lock($1), pg_try_advisory_lock_shared($2)`
	}
	var ok, present bool
	if err := conn.QueryRow(ctx, q, InstanceLockKey, presenceLockKey).Scan(&ok, &present); err != nil {
		return err
	}
	if !ok {
		return ErrInstanceLocked
	}
	// Another process on the database that the instance lock does not
	// show: with the in-process index, any other holder of the presence
	// lock; with a shared index, one that holds it without the instance
	// lock in shared mode (an in-process index that lost its instance
	// lock to this process, see keep).
	var others int
	if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks AS p
		WHERE p.locktype = 'advisory' AND p.granted AND p.objsubid = 1 AND p.pid <> pg_backend_pid()
		AND p.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND p.classid = x'74657472'::int4::oid AND p.objid = x'613a7072'::int4::oid
		AND ($1::bool OR NOT EXISTS (SELECT 1 FROM pg_locks AS i
			WHERE i.locktype = 'advisory' AND i.granted AND i.pid = p.pid AND i.objsubid = 1
			AND i.classid = x'74657472'::int4::oid AND i.objid = x'613a696e'::int4::oid AND i.mode = 'ShareLock'))`,
		l.exclusive).Scan(&others); err != nil {
		return err
	}
	if others > 0 {
		return ErrInstanceLocked
	}
	if l.exclusive {
		return nil
	}
	checks := []struct {
		class int32
		key   int32
		err   error
	}{{namespaceLockClass, l.ns, ErrOtherNamespace}, {fleetLockClass, l.fleet, ErrOtherFleet}}
	for _, c := range checks {
		if c.class == fleetLockClass && !l.hasFleet {
			continue
		}
		others, err := lockSharedAlone(ctx, conn, c.class, c.key)
		if err != nil {
			return err
		}
		if others > 0 {
			return c.err
		}
	}
	return nil
}

// keep takes the locks again on their session every InstanceKeepEvery
// until release (which checks the session and the other processes),
// replaces the session when the database ended it, and reports each
// change of state.
func (l *instanceLock) keep() {
	defer close(l.done)
	var state error // what onChange was last told; nil: held
	report := func(s error) {
		if s != state || (s != nil && state != nil && s.Error() != state.Error()) {
			state = s
			if l.onChange != nil {
				l.onChange(s)
			}
		}
	}
	t := time.NewTicker(InstanceKeepEvery)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), InstanceKeepEvery+5*time.Second)
		// Take the locks again on the same session (advisory locks are
		// reentrant): that checks the session and counts the other
		// processes, so a newcomer that started while this one's session
		// was lost learns of the conflict too.
		if err := l.take(ctx, l.conn); err == nil || isConflict(err) {
			report(err)
			cancel()
			continue
		}
		if !l.conn.IsClosed() && l.conn.Ping(ctx) == nil {
			cancel()
			continue // a slow or failed statement on a live session: keep it
		}
		if state == nil {
			report(ErrLockLost)
		}
		conn, err := l.db.pool.Acquire(ctx)
		if err != nil {
			cancel()
			continue // the database does not answer: try again at the next tick
		}
		pc := conn.Hijack()
		err = l.take(ctx, pc)
		cancel()
		if err != nil && !isConflict(err) {
			_ = pc.Close(context.Background())
			continue
		}
		_ = l.conn.Close(context.Background())
		l.conn = pc
		l.pid.Store(int32(pc.PgConn().PID()))
		report(err)
	}
}

// deleteGuardSQL is true while the session $1 holds the instance lock,
// no other session on this database holds the presence lock (with the
// in-process index, $2) or holds it without the instance lock in shared
// mode (with a shared one), and, with a shared index, no session on this
// database holds a namespace lock ($3, objid $4) or fleet lock ($5, objid
// $6, when $7) of another name. DeleteBelow deletes only when it is (see
// LockInstance).
const deleteGuardSQL = `(SELECT EXISTS (SELECT 1 FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND pid = $1::int4 AND objsubid = 1
		AND classid = ` + "x'74657472'" + `::int4::oid AND objid = ` + "x'613a696e'" + `::int4::oid)
	AND NOT EXISTS (SELECT 1 FROM pg_locks AS p
		WHERE p.locktype = 'advisory' AND p.granted AND p.objsubid = 1 AND p.pid <> $1::int4
		AND p.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND p.classid = ` + "x'74657472'" + `::int4::oid AND p.objid = ` + "x'613a7072'" + `::int4::oid
		AND ($2::bool OR NOT EXISTS (SELECT 1 FROM pg_locks AS i
			WHERE i.locktype = 'advisory' AND i.granted AND i.pid = p.pid AND i.objsubid = 1
			AND i.classid = ` + "x'74657472'" + `::int4::oid AND i.objid = ` + "x'613a696e'" + `::int4::oid AND i.mode = 'ShareLock')))
	AND CASE WHEN $2::bool THEN true
	ELSE NOT EXISTS (SELECT 1 FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 2
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND ((classid = $3::int4::oid AND objid <> ($4::int4::bigint & 4294967295)::oid)
		  OR ($7::bool AND classid = $5::int4::oid AND objid <> ($6::int4::bigint & 4294967295)::oid))) END)`

// guardArgs are deleteGuardSQL's $1 to $7 for l.
func (l *instanceLock) guardArgs() []any {
	return []any{l.pid.Load(), l.exclusive, namespaceLockClass, l.ns, fleetLockClass, l.fleet, l.hasFleet}
}

// lockSharedAlone takes a shared two-key advisory lock (class, key: the
// hash32 of a name) and counts the sessions holding a lock of that class
// on another key. Taking first and counting second means two processes starting at
// once with different names see each other (both are refused, and
// whichever restarts first wins), never neither.
func lockSharedAlone(ctx context.Context, conn *pgx.Conn, class, key int32) (others int, err error) {
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
// Unlike LockInstance's, this lock guards starts only: if PostgreSQL drops
// the holder's session while the holder lives on, a later process with the
// same owner name can take it (it then takes the owner record over, and
// the running process, finding its record taken, closes its connections:
// its clients reconnect and recover from history).
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
	return again(ctx, db, func(ctx context.Context) (string, error) { return db.fleetOnce(ctx) })
}

// fleetOnce is one try of Fleet.
func (db *DB) fleetOnce(ctx context.Context) (string, error) {
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
