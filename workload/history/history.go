package history

import (
	"context"
	"errors"
	"time"
)

// Chat kinds (PROTOCOL.md §2).
const (
	KindDirect = "direct"
	KindGroup  = "group"
)

// Sentinel errors. Implementations wrap them with %w; callers test with
// errors.Is. The server maps them to the contract's codes in one place.
var (
	// ErrNotFound: the chat does not exist.
	ErrNotFound = errors.New("history: not found")
	// ErrNotMember: the user is not a member of the chat.
	ErrNotMember = errors.New("history: not a member")
	// ErrInvalid: the request breaks a rule (for example adding a member to a
	// direct chat); the wrapped message says which.
	ErrInvalid = errors.New("history: invalid")
	// ErrForbidden: the caller is a member but the rule does not let it do
	// this (removing another member of a group it did not create).
	ErrForbidden = errors.New("history: forbidden")
	// ErrUnavailable: the store could not be reached or failed; nothing was
	// written. Callers answer "overloaded" to sends and 503 to HTTP calls.
	ErrUnavailable = errors.New("history: store unavailable")
	// ErrStorageFull: the store answered but has no room to write (SQLite
	// SQLITE_FULL, PostgreSQL SQLSTATE 53100 disk_full); it always comes
	// with ErrUnavailable. Unlike an outage, a small write may still fit,
	// so only a group commit that succeeds proves it over (server
	// readiness).
	ErrStorageFull = errors.New("history: store full")
)

// MaxUnread caps Chat.Unread: counting stops there, so the count costs at
// most this many index entries per chat however long the history
// (PROTOCOL.md §2 allows a cap of 1,000 or more).
const MaxUnread = 1000

// Chat is a conversation. Members are user ids, sorted ascending.
type Chat struct {
	ID    string
	Kind  string // KindDirect or KindGroup
	Title string // empty for direct chats
	// CreatedBy is the user who created the chat: the one who may remove
	// other members of a group (PROTOCOL.md §2). Empty for direct chats
	// and for chats created before it was recorded.
	CreatedBy string
	Members   []string
	CreatedAt time.Time
	// LastRead maps each current member who has read anything to the
	// messageId of its read marker (PROTOCOL.md §3 read: forward-only by
	// Seq). Filled by ChatsOf, ChatFor and ChatList; nil elsewhere.
	LastRead map[string]string
	// Unread is, for the user ChatsOf was asked about, the number of
	// messages after its own read marker sent by others, capped at
	// MaxUnread. Filled by ChatsOf (counting every message) and by ChatFor
	// and ChatList (counting, in a "member" group, only the messages the
	// user may read: PROTOCOL.md §7.6); 0 elsewhere.
	Unread int

	// PROTOCOL.md §7 (ChatAPI): filled by every read of a chat unless
	// said otherwise.
	//
	// Admins are a group's admins, in the order they became admins (the
	// creator first); none for a direct chat (§7.5).
	Admins []string
	// History is HistoryShared or HistoryMember (§7.6).
	History string
	// LastMessage is the newest message the caller may see, nil when
	// there is none; LastActivity the latest of its SentAt, the caller's
	// last add and the chat's creation (§7.2). Filled by ChatFor and
	// ChatList only.
	LastMessage  *Message
	LastActivity time.Time
}

// HasMember reports whether user is in c.Members.
func (c Chat) HasMember(user string) bool {
	for _, m := range c.Members {
		if m == user {
			return true
		}
	}
	return false
}

// Message is one committed message.
type Message struct {
	// Seq is the durable commit sequence (history.id). It orders history
	// and is never shown to clients.
	Seq int64
	// ID is the ULID messageId: identity and the client's dedupe key.
	ID       string
	ChatID   string
	SenderID string
	// SenderDevice is the device of the sending connection; the message is
	// not pushed back to that (user, device). Not part of the wire contract.
	SenderDevice  string
	CorrelationID string
	Body          string
	// SentAt is the acceptance time (UTC), stored with nanoseconds.
	SentAt time.Time
	// Edits and Deletes name the message an edit or a delete applies to
	// (PROTOCOL.md §7.3); both are "" for an ordinary message (Kind
	// KindMessage), at most one is set.
	Edits, Deletes string
	// EditedAt is the SentAt of the newest edit applied to this ordinary
	// message; zero when it was never edited. Body is then the edit's body.
	EditedAt time.Time
	// Deleted is true for an ordinary message that was deleted: its Body
	// is "" (erased from storage, not hidden) and so are its edits' bodies.
	Deleted bool
}

// Draft is a message waiting in the accept pipeline. ID (a ULID) and
// SentAt (UTC) are set by whoever builds the draft, before it is queued:
// package server, for a WebSocket send (ws.go handleSend) and for a delete
// over HTTP (edits.go); the ingest stage passes them through.
type Draft struct {
	ID            string
	ChatID        string
	SenderID      string
	SenderDevice  string
	CorrelationID string
	Body          string
	SentAt        time.Time
	// Edits and Deletes, when one is set, make the draft an edit or a
	// delete of that message of the same chat (PROTOCOL.md §7.3; see
	// CommitPlan.Decide for the rules). A delete's Body is "".
	Edits, Deletes string
}

// Delivery names one outbox row written by Commit: a (recipient, message)
// pair at a position of a partition of the outbox log.
type Delivery struct {
	Recipient string
	Partition int32
	Pos       int64
}

// Result is the outcome of one Draft in a Commit.
type Result struct {
	// Err is nil when the message is committed (or was already committed).
	// Otherwise it wraps ErrNotFound (no such chat), ErrNotMember (sender
	// not in the chat) or ErrInvalid, and nothing was stored for this draft.
	Err error
	// Message is the committed message. For a duplicate it is the original
	// (original ID, SentAt and Seq).
	Message Message
	// Duplicate is true when (SenderID, CorrelationID) was committed before
	// (in an earlier transaction or earlier in the same batch).
	Duplicate bool
	// Deliveries are the outbox rows written for this message, one per
	// member of the chat (the sender included, for the sender's other
	// devices), in recipient order. Empty for duplicates and when the
	// store writes no outbox (Kafka mode).
	Deliveries []Delivery
	// Members is the chat's member list at commit time.
	Members []string
	// Original is, for an edit or a delete committed now, the message it
	// applies to as it is after the commit (for a delete, its Tombstone);
	// for one refused with ErrDeleted, the tombstone already stored. Zero
	// otherwise.
	Original Message
}

// Store is the relational store behind history. All methods are safe for
// concurrent use. Every error that is not a rule violation wraps
// ErrUnavailable.
type Store interface {
	// CreateDirect returns the direct chat of the pair {a, b}, creating it
	// when it does not exist; created reports which. The same chat is
	// returned whichever side asks. a == b is ErrInvalid.
	CreateDirect(ctx context.Context, a, b string) (chat Chat, created bool, err error)
	// CreateGroup creates a group chat with creator plus members
	// (duplicates removed).
	CreateGroup(ctx context.Context, creator, title string, members []string) (Chat, error)
	// Chat returns a chat by id, or ErrNotFound.
	Chat(ctx context.Context, chatID string) (Chat, error)
	// ChatsOf lists the chats user is a member of, oldest first, from one
	// snapshot, each with CreatedBy, LastRead (the markers of its current
	// members) and Unread (user's count of messages after its own marker
	// sent by others, capped at MaxUnread: PROTOCOL.md §2). The count must
	// be an index range bounded by MaxUnread, not a scan of the chat's
	// history (see docs/design.md, "Read state and membership").
	ChatsOf(ctx context.Context, user string) ([]Chat, error)
	// AddMember adds user to a group chat; by must be a member (else
	// ErrNotMember), direct chats give ErrInvalid, unknown chats
	// ErrNotFound. Adding an existing member is a no-op. The change
	// serializes with Commit: a message whose commit follows AddMember's
	// return has the new member among its recipients.
	AddMember(ctx context.Context, chatID, by, user string) (Chat, error)
	// RemoveMember removes user from a group chat on behalf of by
	// (PROTOCOL.md §2 DELETE members): by == user is leaving; otherwise by
	// must be the chat's CreatedBy (else ErrForbidden). Errors, in the
	// order checked: ErrInvalid for bad ids, ErrNotFound for an unknown
	// chat, ErrNotMember when by is not a member, ErrInvalid for a direct
	// chat, ErrForbidden. Removing a user who is not a member changes
	// nothing. It returns the chat after the change and cutoff, the
	// highest Seq committed before the removal: every message of the chat
	// with a Seq above cutoff was committed without user among its
	// recipients (membership is read in Commit's transaction, and the
	// removal serializes with it), unless user was added again.
	RemoveMember(ctx context.Context, chatID, by, user string) (chat Chat, cutoff int64, err error)
	// ReadMarks returns the read markers of chatID's current members
	// (member -> messageId), as Chat.LastRead; an unknown chat has none.
	ReadMarks(ctx context.Context, chatID string) (map[string]string, error)
	// IsMember reports whether user is a member of chatID now, reading the
	// store (one index probe). An unknown chat is ErrNotFound.
	IsMember(ctx context.Context, chatID, user string) (bool, error)

	// Commit stores a batch of drafts in ONE transaction: for each draft in
	// order, an idempotency check on (SenderID, CorrelationID) (a taken key
	// with the original's chat and body is a Duplicate, with another chat
	// or body ErrInvalid: CheckResend), then the history row, then one
	// outbox row per member. The returned slice has
	// one Result per draft, in order. A non-nil error (wrapping
	// ErrUnavailable) means the transaction did not commit and nothing in
	// the batch was stored; per-draft rule violations are reported in
	// Result.Err and do not fail the batch.
	Commit(ctx context.Context, drafts []Draft) ([]Result, error)

	// Page returns up to limit messages of chatID strictly after the message
	// sinceID, in Seq order, and whether more follow. An empty, unknown or
	// foreign sinceID starts at the beginning of the retained history
	// (PROTOCOL.md §4). limit must be >= 1.
	Page(ctx context.Context, chatID, sinceID string, limit int) (msgs []Message, hasMore bool, err error)

	// MessageSeq reports whether messageID is a message of chatID in the
	// retained history and, when it is, its Seq: ok is false for an id that
	// is unknown, purged, of another chat or not storable text. One lookup
	// on an index (read receipts are checked with it, PROTOCOL.md §3). err
	// wraps ErrUnavailable only.
	MessageSeq(ctx context.Context, chatID, messageID string) (seq int64, ok bool, err error)

	// SaveReads records read receipts in one transaction (the group
	// commit of read receipts). Per (chat, user) the marker only moves
	// forward: a receipt is stored when its Seq is above the stored one
	// (PROTOCOL.md §3); a receipt from a user who is not a member of the
	// chat when the transaction runs is dropped. Neither is an error.
	SaveReads(ctx context.Context, reads []Read) error

	// PurgeHistory deletes history rows sent before cutoff, at most limit
	// rows per call, and returns how many it deleted.
	PurgeHistory(ctx context.Context, cutoff time.Time, limit int) (int64, error)

	// Ping checks that the store answers.
	Ping(ctx context.Context) error
	// Close releases the store.
	Close() error

	// The calls of PROTOCOL.md §7 (chatapi.go).
	ChatAPI
}

// Read is a read receipt: user has read chatID up to MessageID.
type Read struct {
	ChatID    string
	UserID    string
	MessageID string
	// Seq is MessageID's Seq (Store.MessageSeq): the order read markers
	// move forward by.
	Seq int64
	// Device is the reading connection's device; the receipt is echoed to
	// the user's other devices, not to it. Not stored.
	Device string
	At     time.Time
}

// FleetRecorder is implemented by the stores (SQLite and PostgreSQL) to
// keep the identity of the fleet of processes using the database: one value
// in the store's meta table (tetra_meta, key "fleet"), opaque to the store.
// The server writes it at start and reads it to name what differs when it
// refuses a process that disagrees with the running fleet (issue 24,
// point 1; see backends.fleetIdentity).
type FleetRecorder interface {
	// Fleet returns the recorded identity; "" when none was recorded.
	// Errors wrap ErrUnavailable.
	Fleet(ctx context.Context) (string, error)
	// SetFleet records identity, replacing any earlier one. Errors wrap
	// ErrUnavailable.
	SetFleet(ctx context.Context, identity string) error
}

// WriteProber is implemented by the stores (SQLite and PostgreSQL): one
// small committed write transaction (the meta table's outbox_id row
// rewritten with its own value), to tell whether the store takes writes
// again without waiting for the next group commit. GET /readyz uses it
// while recent commits failed (server.handleReady; issue 24, point 2).
type WriteProber interface {
	// ProbeWrite commits one small write; nil means the store took it.
	// Errors wrap ErrUnavailable.
	ProbeWrite(ctx context.Context) error
}
