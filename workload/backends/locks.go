package backends

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tetra-messenger/tetra/workload/config"
	"github.com/tetra-messenger/tetra/workload/store/postgres"
	redisidx "github.com/tetra-messenger/tetra/workload/waterline/redis"
)

// lockInstance refuses to run an in-process index next to another process
// on the same PostgreSQL database (its GC would delete rows the other's
// clients have not acknowledged, and theirs its own), and refuses a shared
// index next to an in-process one; processes on a shared (Redis) index may
// be many, as long as they are one fleet: the same Redis deployment, key
// prefix and token secret (fleetIdentity; a process of another identity
// than a running one's is refused). Backends.Close releases the lock
// after closing the store.
func (b *Backends) lockInstance(ctx context.Context, db *postgres.DB, fleet fleetIdentity) error {
	exclusive := b.IndexKind == "memory"
	prefix := b.cfg.prefix()
	release, err := db.LockInstance(ctx, exclusive, prefix, fleet.lockName(), func(state error) {
		switch {
		case state == nil:
			b.log.Warn("fleet: the instance lock is held again; the GC deletes again")
		case errors.Is(state, postgres.ErrLockLost):
			b.log.Warn("fleet: PostgreSQL ended the session holding the instance lock; the GC deletes nothing until it is taken again", "err", state)
		default:
			b.log.Error("fleet: while this process's instance lock was lost, another tetra process that may not share this database took it (another --index-prefix, fleet identity or index kind); neither process's GC deletes anything until one of them stops", "err", state, "prefix", prefix)
		}
	})
	switch {
	case errors.Is(err, postgres.ErrOtherFleet):
		recorded, rerr := db.Fleet(ctx)
		if rerr != nil {
			recorded = ""
		}
		return b.otherFleetError(fleet, recorded)
	case errors.Is(err, postgres.ErrOtherNamespace):
		return fmt.Errorf("server: another tetra process uses the PostgreSQL database at %s with a different --index-prefix; every process on one database must share one Redis and one --index-prefix (%q here), or their GCs delete rows each other's clients have not acknowledged", config.RedactURL(b.cfg.Store), prefix)
	case errors.Is(err, postgres.ErrInstanceLocked) && exclusive:
		return fmt.Errorf("server: another tetra process already uses the PostgreSQL database at %s; with the in-process index (--index memory) a database serves one process only: stop the other one, or run every process with a shared --index redis://host:6379/0", config.RedactURL(b.cfg.Store))
	case errors.Is(err, postgres.ErrInstanceLocked):
		return fmt.Errorf("server: a tetra process with the in-process index (--index memory) already uses the PostgreSQL database at %s and must be the only one; stop it, or give it --index redis:// too", config.RedactURL(b.cfg.Store))
	case err != nil:
		return fmt.Errorf("server: PostgreSQL store at %s: %w", config.RedactURL(b.cfg.Store), err)
	}
	b.releases = append(b.releases, release)
	return nil
}

// ownerLockWait is how long lockOwner waits for the owner lock: long
// enough for PostgreSQL to end a killed predecessor's session.
const ownerLockWait = 3 * time.Second

// lockOwner lets a process restarted in place take over at once (issue 13,
// point 6). With a Redis index, a process's liveness record under its
// owner name keeps a successor of the same name waiting until it lapses
// (--owner-ttl), because a live duplicate must be refused. Every such
// process also holds a PostgreSQL session lock on its owner name for its
// life (postgres.DB.LockOwner): taking it proves the previous holder's
// session is gone, so its record is taken over (redis.Index.TakeOver) and
// the engine's start does not wait. When the lock is held (a live
// duplicate, or a dead process whose session PostgreSQL has not ended
// yet) nothing changes: the start waits for the record to lapse and
// refuses a live duplicate, as before. Backends.Close releases
// the lock after closing the store.
func (b *Backends) lockOwner(ctx context.Context, db *postgres.DB) error {
	ri, ok := b.Index.(*redisidx.Index)
	if !ok {
		return nil
	}
	taken, release, err := db.LockOwner(ctx, b.cfg.prefix(), ri.Owner(), ownerLockWait)
	if err != nil {
		return fmt.Errorf("server: PostgreSQL store at %s: %w", config.RedactURL(b.cfg.Store), err)
	}
	b.releases = append(b.releases, release)
	if !taken {
		b.log.Info("fleet: another session holds this owner name's lock; the start waits for its liveness record to lapse", "owner", ri.Owner())
		return nil
	}
	took, err := ri.TakeOver(ctx)
	switch {
	case err != nil:
		b.log.Warn("fleet: could not take over the dead predecessor's owner record; the start waits for it to lapse", "owner", ri.Owner(), "err", err)
	case took:
		b.log.Info("fleet: the previous process of this owner name is gone (its database session ended); took its owner record over", "owner", ri.Owner())
	}
	return nil
}
