package backends

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/tetra-messenger/tetra/workload/config"
	"github.com/tetra-messenger/tetra/workload/history"
	redisidx "github.com/tetra-messenger/tetra/workload/waterline/redis"
)

// fleetIdentity is what every process on one database must agree on (issue
// 24, point 1): the Redis deployment of the waterline index, its key prefix
// and the token secret. The store keeps the running fleet's in its meta
// table (history.FleetRecorder, tetra_meta key "fleet", as this struct's
// JSON), and a shared-index process on PostgreSQL holds an advisory lock
// on it for its life (postgres.DB.LockInstance), so a process that
// disagrees with a running fleet is refused at start, naming what differs.
// A Redis failover changes none of the three (Redis names the configured
// deployment, not the server behind it), so it rebuilds as before.
type fleetIdentity struct {
	// Redis is redis.Index.Deployment ("127.0.0.1:6379 db 0", "sentinel
	// master mymaster db 0") or "in-process" for --index memory.
	Redis string `json:"redis"`
	// Prefix is the --index-prefix ("" with the in-process index).
	Prefix string `json:"prefix"`
	// JWT is auth.Signer.Fingerprint of the token secret.
	JWT string `json:"jwt"`
}

// fleetIdentity returns this process's identity; call it once the index
// and the signer exist.
func (b *Backends) fleetIdentity() fleetIdentity {
	id := fleetIdentity{Redis: "in-process", JWT: b.Signer.Fingerprint()}
	if ri, ok := b.Index.(*redisidx.Index); ok {
		id.Redis = ri.Deployment()
		id.Prefix = b.cfg.prefix()
	}
	return id
}

func (f fleetIdentity) String() string {
	b, _ := json.Marshal(f)
	return string(b)
}

// lockName is the name of the fleet's advisory lock: the identity itself.
func (f fleetIdentity) lockName() string { return f.String() }

func parseFleetIdentity(v string) (fleetIdentity, bool) {
	var f fleetIdentity
	if v == "" || json.Unmarshal([]byte(v), &f) != nil {
		return fleetIdentity{}, false
	}
	return f, true
}

// differences lists, for an error, what other (the running fleet's) and f
// (this process's) disagree on; empty when nothing.
func (f fleetIdentity) differences(other fleetIdentity) []string {
	var d []string
	if f.Redis != other.Redis {
		d = append(d, fmt.Sprintf("Redis: the fleet uses %s, this process %s (--index, --index-sentinel-master, --index-sentinel-master-url)", other.Redis, f.Redis))
	}
	if f.Prefix != other.Prefix {
		d = append(d, fmt.Sprintf("key prefix: the fleet uses %q, this process %q (--index-prefix)", other.Prefix, f.Prefix))
	}
	if f.JWT != other.JWT {
		d = append(d, fmt.Sprintf("token secret: the fleet's has fingerprint %s, this process's %s (TETRA_JWT_SECRET; a token from one would get 401 on the other)", other.JWT, f.JWT))
	}
	return d
}

// otherFleetError is the refusal of a process whose identity is not the
// running fleet's, naming what differs and how to fix it; recorded is the
// store's record ("" or unreadable: the other fleet's processes are
// starting too, and nothing can be named).
func (b *Backends) otherFleetError(mine fleetIdentity, recorded string) error {
	where := config.RedactURL(b.cfg.Store)
	fix := "every process on one database must use the same Redis (--index), the same --index-prefix and the same TETRA_JWT_SECRET: give this process the fleet's, or stop every process of the fleet first to move it (the record follows the first process to start on a database nobody uses)"
	other, ok := parseFleetIdentity(recorded)
	if d := mine.differences(other); ok && len(d) > 0 {
		return fmt.Errorf("server: the PostgreSQL database at %s belongs to a running fleet that disagrees with this process: %s; %s", where, strings.Join(d, "; "), fix)
	}
	return fmt.Errorf("server: a tetra process with another Redis, --index-prefix or TETRA_JWT_SECRET (its record is not written yet: it is starting too) uses the PostgreSQL database at %s; this process has %s; %s", where, mine, fix)
}

// recordFleet writes this process's identity to the store once it may run
// (no running process disagrees), logging when it replaces another fleet's
// (every process of which has stopped: a move to another Redis or secret).
func (b *Backends) recordFleet(ctx context.Context, mine fleetIdentity) error {
	fr, ok := b.Store.(history.FleetRecorder)
	if !ok {
		return nil
	}
	old, err := fr.Fleet(ctx)
	if err != nil {
		return fmt.Errorf("server: read the fleet identity from the store: %w", err)
	}
	if old == mine.String() {
		return nil
	}
	if prev, ok := parseFleetIdentity(old); ok {
		b.log.Warn("fleet: the database's fleet identity changes (no process of the old one is running)",
			"was", prev.String(), "now", mine.String(), "differences", strings.Join(mine.differences(prev), "; "))
	}
	if err := fr.SetFleet(ctx, mine.String()); err != nil {
		return fmt.Errorf("server: record the fleet identity in the store: %w", err)
	}
	return nil
}
