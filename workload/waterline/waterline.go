package waterline

import (
	"context"
	"errors"
	"time"
)

// Sentinel errors.
var (
	// ErrUnknownClient: the client is not registered (never connected, or
	// withdrawn). Nothing was recorded.
	ErrUnknownClient = errors.New("waterline: unknown client")
	// ErrUnavailable wraps failures to reach the backing server.
	ErrUnavailable = errors.New("waterline: index unavailable")
	// ErrOwnerTaken: another live process uses this process's owner name
	// in a shared index (Fleet).
	ErrOwnerTaken = errors.New("waterline: another live process uses this owner name")
	// ErrNotPrimed is returned by SafeLine when the index is not in the
	// state it was primed in: its primed flag is missing or records another
	// identity, the backing server's identity changed (a restart, a flush,
	// a failover to a replica), or, in a shared index, a live process has
	// not primed with the current identity. No line is computed; the
	// caller must rebuild (and wait for the other processes) before it
	// deletes anything.
	ErrNotPrimed = errors.New("waterline: index not primed with the expected identity")
	// ErrPrefixTaken: the shared index's key prefix already indexes
	// another outbox, and a process of that deployment is alive (Fleet).
	ErrPrefixTaken = errors.New("waterline: the key prefix indexes another outbox")
)

// Client is one connection registered for live delivery.
type Client struct {
	// ID is the connection id: unique per connection and never reused.
	ID     string
	User   string
	Device string
	// Start holds, per partition, the outbox head when the client
	// connected: rows at or below it are the client's to recover from
	// history, not to be delivered live, and a rebuild does not pin them.
	Start map[int32]int64
}

// Entry is one outbox row as sent to one client.
type Entry struct {
	MessageID string
	Partition int32
	Pos       int64
}

// Pending is an entry sent to a client and not yet acknowledged.
type Pending struct {
	ClientID string
	Entry
	// Attempts is how many times the entry was sent; 0 for an entry
	// restored by a rebuild and not sent since.
	Attempts int
	// LeaseUntil is when the entry becomes due for re-delivery.
	LeaseUntil time.Time
}

// State is the index's priming record.
type State struct {
	// Primed is true once a rebuild completed since the index was created
	// or reset.
	Primed bool
	// Identity is the backing server's identity recorded by MarkPrimed.
	Identity string
}

// Stats counts what the index holds.
type Stats struct {
	Clients int
	Pending int
}

// Index is the waterline index. Every method is safe for concurrent use and
// atomic with respect to the others for one client. Methods that take a
// client id of a client that is not registered return ErrUnknownClient,
// except Withdraw, which is idempotent.
type Index interface {
	// Connect registers a client with an empty pending set. Registering an
	// id twice replaces the first registration's Start and keeps its
	// pending set.
	Connect(ctx context.Context, c Client) error
	// Withdraw removes the client: its whole pending set, its count and
	// its pin, in one step. It reports whether the client was registered.
	Withdraw(ctx context.Context, clientID string) (bool, error)
	// Sent records that entries were sent (again) to the client, each with
	// a lease until leaseUntil: an entry not pending is added with Attempts
	// 1; a pending one (matched by MessageID) gets Attempts+1 and the new
	// lease, keeping its Pos. It returns the client's pending count after.
	Sent(ctx context.Context, clientID string, entries []Entry, leaseUntil time.Time) (pending int, err error)
	// Ack removes the given message ids from the client's pending set;
	// ids that are not pending are ignored. It returns the pending count
	// after.
	Ack(ctx context.Context, clientID string, messageIDs []string) (pending int, err error)
	// Expired returns up to limit pending entries, of the clients this
	// Index value registered, whose lease ended at or before now, earliest
	// lease first (equal leases: lowest Pos first). limit <= 0 returns
	// nothing. It changes nothing.
	Expired(ctx context.Context, now time.Time, limit int) ([]Pending, error)
	// Hold pins partition at pos for holder (rows at or above pos are kept)
	// until ttl passes without another Hold by the same holder; holds are
	// per (holder, partition). pos < 0 releases the hold; otherwise ttl
	// must be > 0.
	Hold(ctx context.Context, holder string, partition int32, pos int64, ttl time.Duration) error
	// SafeLine returns the minimum, for partition, over the pins of the
	// registered clients (each client's lowest pending Pos) and the live
	// holds. ok is false when nothing pins the partition. Rows with
	// Pos < line may be deleted.
	//
	// The line is computed only from the state the caller primed: in the
	// same atomic step as it reads the pins, SafeLine checks that this
	// Index value's primed flag records identity, that the backing
	// server's Identity is identity, and (Fleet) that no live owner lags
	// (Laggards); otherwise it returns ErrNotPrimed and no line. A flush
	// or a failover between the caller's own checks and this call can
	// therefore never yield a line computed from an empty or stale index.
	SafeLine(ctx context.Context, partition int32, identity string) (line int64, ok bool, err error)

	// Clients lists the clients this Index value registered.
	Clients(ctx context.Context) ([]Client, error)
	// Restore adds entries to a registered client's pending set, each
	// with its Attempts and LeaseUntil (a zero LeaseUntil is due at once),
	// unless its MessageID is already pending (then it is left alone). The
	// entries' ClientID fields are ignored. A rebuild uses it to put back
	// what the process's connections hold sent and unacknowledged.
	Restore(ctx context.Context, clientID string, entries []Pending) error
	// Reset forgets every client, pending entry, hold and the primed flag.
	Reset(ctx context.Context) error
	// State returns the primed flag and the identity recorded with it.
	State(ctx context.Context) (State, error)
	// MarkPrimed sets the primed flag and records identity.
	MarkPrimed(ctx context.Context, identity string) error
	// Identity returns the backing server's current identity (for Redis,
	// its run_id and master_replid). A change since MarkPrimed means the
	// index may have lost writes and must be rebuilt.
	Identity(ctx context.Context) (string, error)
	// Stats counts clients and pending entries.
	Stats(ctx context.Context) (Stats, error)
}

// SentBatch is one client's part of a SentMany call.
type SentBatch struct {
	ClientID string
	Entries  []Entry
}

// ManySender is an Index that can record the sends of many clients at
// once: SentMany(ctx, batches, leaseUntil) has the effect of
// Sent(ctx, b.ClientID, b.Entries, leaseUntil) for each batch, in order, in
// one round trip for a remote index (the fast path records a whole
// delivery batch with it). It returns one error per batch (nil,
// ErrUnknownClient, or an error wrapping ErrUnavailable). A batch that
// failed wrote nothing to the shared index; an index that keeps pending
// entries in the process (package redis) may have recorded it there, and
// then writes its pins later. Each batch is atomic as Sent is; the calls
// as a whole are not.
type ManySender interface {
	SentMany(ctx context.Context, batches []SentBatch, leaseUntil time.Time) []error
}

// InProcess is implemented by an Index whose methods never wait on I/O
// (package memory): InProcess reports true, and callers may pass it a
// context without a deadline instead of bounding every call (a timer per
// send and per ack, about 2.5 % of the server's CPU at 4,000 msg/s,
// issue 22). An Index that does not implement it is treated as remote.
type InProcess interface {
	InProcess() bool
}

// AckBatch is one client's part of an AckMany call.
type AckBatch struct {
	ClientID   string
	MessageIDs []string
}

// ManyAcker is an Index that can record the acknowledgements of many
// clients at once: AckMany(ctx, batches) has the effect of
// Ack(ctx, b.ClientID, b.MessageIDs) for each batch, in order, in one round
// trip for a remote index (the engine gathers the acknowledgements of all
// its connections for a moment and records them with it). It returns one
// error per batch (nil, ErrUnknownClient, or an error wrapping
// ErrUnavailable). A batch that failed wrote nothing to the shared index
// (see ManySender). Each batch is atomic as Ack is; the calls as a whole
// are not.
type ManyAcker interface {
	AckMany(ctx context.Context, batches []AckBatch) []error
}

// Claim says that connection ConnID of (User, Device), registered by the
// process Owner, is that device's newest connection (PROTOCOL.md §3: single
// active session per (user, device)).
type Claim struct {
	User, Device, ConnID, Owner string
	// Epoch orders the claims of one device: every claim gets an epoch
	// greater than every earlier claim of the same device.
	Epoch int64
}

// FleetHandlers receive what the other processes of a fleet publish.
type FleetHandlers struct {
	OnClaim     func(Claim)
	OnWake      func()
	OnBroadcast func(users []string, frame []byte)
}

// Fleet is implemented by an index that several processes share (Redis).
// It carries what the processes of one deployment tell each other: which
// connection of a device is newest, that new outbox rows were committed,
// and which processes are alive. The in-process index does not implement
// it: it serves exactly one process.
type Fleet interface {
	// Owner names this process in the index.
	Owner() string
	// BindOutbox records that this index (its key prefix) covers the
	// outbox named outboxID (outbox.Log.ID). When another outbox is
	// recorded and any other owner is alive, it fails with ErrPrefixTaken
	// naming it: two outboxes under one waterline would each delete rows
	// the other's clients have not acknowledged. When no other owner is
	// alive, the record is replaced (the old deployment is gone). Call it
	// after Acquire, so two deployments starting at once see each other.
	BindOutbox(ctx context.Context, outboxID string) error
	// Claim records connID as the newest connection of (user, device),
	// returns the claim with its epoch and announces it to the other
	// processes (Subscribe's onClaim). Announcing is best effort; the
	// epoch is recorded atomically with it.
	Claim(ctx context.Context, user, device, connID string) (Claim, error)
	// LatestEpoch returns the epoch of the newest claim of (user, device)
	// still remembered, or 0.
	LatestEpoch(ctx context.Context, user, device string) (int64, error)
	// Wake tells the other processes that outbox rows were committed, so
	// their pollers scan now instead of at the next poll interval. Best
	// effort: a lost wake-up costs one poll interval of latency.
	Wake(ctx context.Context) error
	// Broadcast hands a frame for the connections of users to the other
	// processes (read receipts, PROTOCOL.md §3). Best effort, like Wake.
	Broadcast(ctx context.Context, users []string, frame []byte) error
	// Subscribe calls h's callbacks for the claims, wake-ups and
	// broadcasts of the other processes (never this one's) until ctx
	// ends, reconnecting after errors. The callbacks run on one goroutine
	// and must not block; nil callbacks are skipped. It returns once
	// subscribed (or with the error that prevented it) and done, which is
	// closed when that goroutine has ended (after ctx ended).
	Subscribe(ctx context.Context, h FleetHandlers) (done <-chan struct{}, err error)
	// Acquire takes this owner's liveness record for ttl if no other
	// process holds it (held false: another process with the same owner
	// name heartbeats, or a crashed predecessor's record has not expired
	// yet). A tombstone from an earlier run is cleared.
	Acquire(ctx context.Context, ttl time.Duration) (held bool, err error)
	// Release drops this owner's liveness record if this process holds it
	// (a graceful stop), so a restart under the same name need not wait.
	Release(ctx context.Context) error
	// Heartbeat marks this owner alive for ttl. It reports reaped = true
	// when another process found this owner's liveness lapsed and removed
	// its state (ReapDead) since the last Heartbeat: every registration of
	// this process is gone from the index and the caller must treat its
	// connections as withdrawn. It fails with ErrOwnerTaken when another
	// process holds this owner's liveness record.
	Heartbeat(ctx context.Context, ttl time.Duration) (reaped bool, err error)
	// ReapDead removes, as Reset would for them, the state of every owner
	// that heartbeat at least once and whose liveness lapsed: their
	// registrations, pending sets, pins, leases, holds and primed flag. It
	// returns the owners reaped. Owners that never called Heartbeat are
	// never reaped.
	ReapDead(ctx context.Context) ([]string, error)
	// Laggards returns the live owners (those whose heartbeat has not
	// lapsed) whose primed flag is missing or records an identity other
	// than identity. While any exists, some process's pins may be missing
	// from the index (it has not rebuilt since a flush or a failover), so
	// no process may delete below the safe line.
	Laggards(ctx context.Context, identity string) ([]string, error)
	// IdentityAge returns how long ago any process first saw identity
	// (the first call for an identity records it, by the backing server's
	// clock). Right after a failover every identity is young: processes
	// whose liveness records the failover lost have not listed themselves
	// again yet, so Laggards cannot name them.
	IdentityAge(ctx context.Context, identity string) (time.Duration, error)
}
