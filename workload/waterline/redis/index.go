package redis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tetra-messenger/tetra/internal/redisinfo"
	"github.com/tetra-messenger/tetra/workload/waterline"
)

// MaxPos bounds the positions (and hold positions) the index accepts:
// sorted-set scores are doubles, exact for integers up to 2^53. SQL ids and
// Kafka offsets stay far below it.
const MaxPos = 1 << 53

// clientJSON is a registration as stored in the owner's clients hash.
type clientJSON struct {
	ID     string          `json:"id"`
	User   string          `json:"user"`
	Device string          `json:"device"`
	Start  map[int32]int64 `json:"start,omitempty"`
}

// Connect registers c under this index's owner with an empty pending set,
// or, if c.ID is registered, replaces its User, Device and Start and keeps
// its pending set: one HSET, then the registration in the process
// (pending.go). The id must be non-empty and free of NUL bytes (the
// registration hash's values use NUL as a separator).
func (x *Index) Connect(ctx context.Context, c waterline.Client) error {
	if c.ID == "" {
		return errors.New("redis: connect: empty client id")
	}
	if strings.IndexByte(c.ID, 0) >= 0 {
		return fmt.Errorf("redis: connect: client id %q contains a NUL byte", c.ID)
	}
	b, err := json.Marshal(clientJSON{ID: c.ID, User: c.User, Device: c.Device, Start: c.Start})
	if err != nil {
		return fmt.Errorf("redis: connect %q: %w", c.ID, err)
	}
	cctx, cancel := x.call(ctx)
	defer cancel()
	if err := x.rdb.HSet(cctx, x.kClients, c.ID, b).Err(); err != nil {
		return unavailable("connect", err)
	}
	return x.local.Connect(ctx, c)
}

// Withdraw removes the client, if this owner registered it: its
// registration and pins in one script, then its pending set in the
// process. It reports whether Redis held the registration. An id this
// owner did not register is a no-op returning false, even if keys of that
// id exist (they can only be another owner's, or a lost registration's,
// and leaving them keeps rows, never loses them). When Redis cannot be
// reached nothing is dropped: the pins left in Redis only keep rows, and
// the pending set in the process makes Expired list the client again
// once its leases end, so the poller withdraws it again.
func (x *Index) Withdraw(ctx context.Context, clientID string) (bool, error) {
	cctx, cancel := x.call(ctx)
	defer cancel()
	n, err := withdrawScript.Run(cctx, x.rdb, []string{x.kClients, x.kParts(clientID)}, x.cfg.Prefix, clientID).Int64()
	if err != nil {
		// The pending set stays, and with it the pins in Redis: once its
		// leases end, Expired lists the client and the poller, which no
		// longer has it, withdraws it again.
		return false, unavailable("withdraw", err)
	}
	x.forget(clientID)
	return n == 1, nil
}

func checkPos(op, clientID string, e waterline.Entry) error {
	if e.Pos > MaxPos || e.Pos < -MaxPos {
		return fmt.Errorf("redis: %s %q: position %d of %q is beyond ±2^53", op, clientID, e.Pos, e.MessageID)
	}
	return nil
}

func checkEntries(op, clientID string, entries []waterline.Entry) error {
	for _, e := range entries {
		if err := checkPos(op, clientID, e); err != nil {
			return err
		}
	}
	return nil
}

// Hold pins partition at pos for holder until ttl passes on the Redis
// server's clock (TIME) without another Hold by the same holder for the same
// partition; pos < 0 releases the hold. Holders are kept per owner, so two
// processes using the same holder name do not replace each other's holds.
func (x *Index) Hold(ctx context.Context, holder string, partition int32, pos int64, ttl time.Duration) error {
	var ttlMS int64
	if pos >= 0 {
		if ttl <= 0 {
			return fmt.Errorf("redis: hold %q: ttl %v must be positive", holder, ttl)
		}
		if pos > MaxPos {
			return fmt.Errorf("redis: hold %q: position %d is beyond 2^53", holder, pos)
		}
		ttlMS = int64((ttl + time.Millisecond - 1) / time.Millisecond)
	}
	if pos < 0 {
		pos = -1
	}
	cctx, cancel := x.call(ctx)
	defer cancel()
	err := holdScript.Run(cctx, x.rdb,
		[]string{x.kHolds(partition), x.kHoldExp(partition), x.kHoldParts},
		x.cfg.Owner+"\x00"+holder, pos, ttlMS, itoa32(partition)).Err()
	if err != nil {
		return unavailable("hold", err)
	}
	return nil
}

// SafeLine returns the minimum, for partition, over the pins of every
// registered client (of every owner sharing the prefix: one process's GC
// must respect another's connections) and the live holds, in one script
// that also drops the holds that expired by the server's clock. The same
// script first checks that the server's identity (INFO run_id and
// master_replid, as Identity) is identity, that this owner's primed flag
// records identity and that every live owner's does; otherwise it reads no
// pin and SafeLine returns waterline.ErrNotPrimed. Before any of that it
// writes the pins a failed flight left unwritten (pending.go), and fails
// with ErrUnavailable while it cannot.
func (x *Index) SafeLine(ctx context.Context, partition int32, identity string) (int64, bool, error) {
	if err := x.flushRetries(ctx); err != nil {
		return 0, false, fmt.Errorf("redis: safe line: pins not yet written: %w", err)
	}
	cctx, cancel := x.call(ctx)
	defer cancel()
	line, err := safeLineScript.Run(cctx, x.rdb,
		[]string{x.kPins(partition), x.kHolds(partition), x.kHoldExp(partition), x.kPrimed, x.kOwners()},
		identity, x.cfg.Prefix).Int64()
	switch {
	case errors.Is(err, goredis.Nil):
		return 0, false, nil
	case err != nil && strings.HasPrefix(err.Error(), "NOTPRIMED"):
		return 0, false, fmt.Errorf("redis: safe line: %s: %w", strings.TrimPrefix(err.Error(), "NOTPRIMED "), waterline.ErrNotPrimed)
	case err != nil:
		return 0, false, unavailable("safe line", err)
	}
	return line, true, nil
}

// Clients lists the clients this owner registered, sorted by ID.
func (x *Index) Clients(ctx context.Context) ([]waterline.Client, error) {
	cctx, cancel := x.call(ctx)
	defer cancel()
	all, err := x.rdb.HGetAll(cctx, x.kClients).Result()
	if err != nil {
		return nil, unavailable("clients", err)
	}
	out := make([]waterline.Client, 0, len(all))
	for id, v := range all {
		if i := strings.IndexByte(v, 0); i >= 0 {
			v = v[:i] // the partitions listed in parts (scripts.go)
		}
		var c clientJSON
		if err := json.Unmarshal([]byte(v), &c); err != nil {
			return nil, fmt.Errorf("redis: clients: registration of %q: %w", id, err)
		}
		out = append(out, waterline.Client{ID: id, User: c.User, Device: c.Device, Start: c.Start})
	}
	slices.SortFunc(out, func(a, b waterline.Client) int { return strings.Compare(a.ID, b.ID) })
	return out, nil
}

// Reset forgets, in one script, this owner's clients with their pins,
// this owner's holds and its primed flag (and what a version that kept
// pending entries in Redis left: their pending sets, state and lease
// entries), then the pending sets in the process. Other owners sharing the
// prefix are untouched. Identity is unchanged.
//
// Reset finds a client's keys through this owner's registrations. Keys of a
// client whose registration was lost (an owner that went away for good, a
// registration deleted by hand) are not found, and their pins survive. That
// can only keep MORE outbox rows, never fewer: a pin only ever protects
// rows. The outbox age backstop (26 h by default) bounds what they keep.
func (x *Index) Reset(ctx context.Context) error {
	cctx, cancel := x.call(ctx)
	defer cancel()
	err := resetScript.Run(cctx, x.rdb,
		[]string{x.kClients, x.kLease, x.kPrimed, x.kHoldParts},
		x.cfg.Prefix, x.cfg.Owner).Err()
	if err != nil {
		return unavailable("reset", err)
	}
	x.forgetAll(ctx)
	return nil
}

// State returns this owner's priming record: Primed is false until
// MarkPrimed, again after Reset, and whenever the server lost the key (a
// flush, a restart without persistence, a fresh instance).
func (x *Index) State(ctx context.Context) (waterline.State, error) {
	cctx, cancel := x.call(ctx)
	defer cancel()
	id, err := x.rdb.Get(cctx, x.kPrimed).Result()
	switch {
	case errors.Is(err, goredis.Nil):
		return waterline.State{}, nil
	case err != nil:
		return waterline.State{}, unavailable("state", err)
	}
	return waterline.State{Primed: true, Identity: id}, nil
}

// MarkPrimed sets this owner's primed flag, recording identity.
func (x *Index) MarkPrimed(ctx context.Context, identity string) error {
	cctx, cancel := x.call(ctx)
	defer cancel()
	if err := x.rdb.Set(cctx, x.kPrimed, identity, 0).Err(); err != nil {
		return unavailable("mark primed", err)
	}
	return nil
}

// Identity returns the key of the server the index talks to,
// redisinfo.Identity.Key ("run_id/master_replid" from INFO server and INFO
// replication, pipelined, read by the parser the operator uses too). A
// restart changes run_id; a promotion of a replica changes master_replid
// (and the promoted server's run_id differs from the old master's anyway).
// The address is deliberately not part of it: behind a stable Service or a
// Sentinel it may not change.
func (x *Index) Identity(ctx context.Context) (string, error) {
	cctx, cancel := x.call(ctx)
	defer cancel()
	var server, repl *goredis.StringCmd
	_, err := x.rdb.Pipelined(cctx, func(p goredis.Pipeliner) error {
		server = p.Info(cctx, "server")
		repl = p.Info(cctx, "replication")
		return nil
	})
	if err != nil {
		return "", unavailable("identity", err)
	}
	id := redisinfo.Parse(server.Val() + "\n" + repl.Val()).Identity()
	if id.RunID == "" {
		return "", errors.New("redis: identity: INFO server reports no run_id")
	}
	return id.Key(), nil
}
