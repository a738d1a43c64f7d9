// Package client is the Go client of tetra: the client contract of
// PROTOCOL.md implemented once, for applications, for the tests and for the
// load generator (which runs thousands of clients in one process).
//
// # Connecting
//
// Dial (or New then Run) opens GET /ws with "Authorization: Bearer <token>"
// (and token= in the query with Config.TokenInQuery), reads the hello
// frame first and exposes it (Hello, Limits). From then on the client keeps
// itself connected: on any close — 4002, 4003, 4004, 1001, a network error,
// a write timeout, or (with Config.PingInterval) silence — it
// reconnects with exponential backoff and jitter (Config.BackoffMin,
// BackoffMax; 100 ms to 5 s by default). Two closes stop it instead: 4001,
// because another connection of the same (user, device) took over and
// reconnecting would evict it in turn (Config.ReconnectOnSuperseded changes
// that), and HTTP 401 on the upgrade, because the token will not get better
// (unless Config.TokenRefresh supplies another).
// Config.OnState reports every transition with the close code.
//
// # Tokens that expire
//
// The server closes a socket when its token's exp passes (4005, PROTOCOL.md
// §1). With Config.TokenRefresh, a callback through which the application
// supplies new tokens of the same user, the client refreshes ahead of exp
// (Config.RefreshBefore, 30 s by default, or halfway for shorter tokens):
// it sends {"type":"refresh","token":...} on the live socket, which the
// server answers refreshed, and uses the new token for every later HTTP call
// and reconnect, so the socket stays up. A refresh that fails is reported
// to OnError and retried with backoff; an expired token is refreshed before
// a reconnect. Without TokenRefresh the client sees 4005 at exp, then 401
// on the next upgrade, and stops.
//
// # Sending
//
// Send mints a correlationId (a ULID) and waits for the answer matched by
// it; SendWithID takes the caller's own key. The correlationId is an
// idempotency key, so retrying is always safe: when the connection drops
// before the answer the client resends the same frame on the next
// connection until the caller's context ends, and the server answers with
// the original messageId. overloaded is retried with backoff;
// rate_limited and credit_exhausted after Config.LimitRetryWait (or returned,
// with Config.ReturnLimitErrors); every other code is returned as an *Error.
// A semaphore sized by hello's maxInFlightSends and a token bucket paced at
// its sendsPerSecond keep a well-behaved client from being refused at all.
//
// # Receiving: exactly-once reporting over at-least-once delivery
//
// Every message frame is acknowledged on receipt, duplicates included (a
// duplicate means the server missed the earlier ack). Acks are coalesced:
// an ack frame carries every id that arrived while the writer was busy (or,
// with Config.AckDelay, during that delay), up to Config.AckBatch ids.
// Config.OnMessage is called once per new messageId, whether the message
// came live or from history.
//
// After every (re)connect the client lists the user's chats (GET
// /api/chats, or Config.Chats) and pages each one's history from its
// cursor, the last messageId it processed from history, following hasMore;
// new messages go to OnMessage. The cursor moves only with history pages,
// which come in the server's commit order: live messages can arrive out of
// that order, so moving the cursor to a live messageId could skip an
// earlier message that had not arrived yet. Client.Cursors exports the
// cursors and Config.InitialCursors imports them, to resume across runs.
//
// Deduplication needs bounded memory, in two parts. Every id received live
// or sent since a chat's cursor is remembered in that chat's "unsynced"
// set until a history page returns it or a complete sync passes it, which
// makes the overlap between live delivery and the resync exact however
// long the client was away. When a chat holds Config.MaxUnsyncedPerChat such
// ids (4096 by default) the client pages that chat in the background to move
// its cursor and forget them, so the sets stay bounded at that size per
// chat. Independently, the last Config.DedupeWindow ids (4096 by default,
// across chats) are kept in a ring to drop live redeliveries of messages
// already behind the cursor; a redelivery older than that window would be
// reported twice, which cannot happen while acks flow because the server
// redelivers only unacknowledged messages. With the defaults a client holds
// at most about 4096 × (1 + chats with live traffic) ids, roughly 100 bytes
// each.
//
// # Edits, deletes, typing, presence
//
// Edit (a send with "edits") and Delete (DELETE .../messages/{id}) change
// a message this user sent (PROTOCOL.md §7.3); both arrive at the members
// as messages of their own through OnMessage, with Edits or Deletes set,
// and history returns the original with its current Body and EditedAt, or
// as a tombstone (Deleted). Typing sends the ephemeral typing frame (the
// server throttles it, no answer); OnTyping and OnPresence get the frames
// others cause, and Presence asks for the users who share a chat with this
// user (PROTOCOL.md §7.4).
//
// # Efficiency
//
// A connection costs two goroutines (one reader, one writer) plus the
// client's supervisor, which also runs the history syncs; there are no
// per-message goroutines, the outbound queue is bounded (senders block
// with their context: back-pressure), the ack timer runs only while acks
// wait, and the default HTTP client is shared by every Client of the
// process. Stats exposes counters for the load generator.
//
// # Callbacks
//
// OnMessage, OnRead, OnChat, OnTyping, OnPresence, OnState and OnError run one at a time on the client's
// goroutines. They must not block on the client (a callback waiting for a
// Send answer would wait for the very goroutine it runs on); hand work to
// another goroutine.
//
// The end-to-end tests against the real server live in test/ and
// workload/server; this package's tests use a small in-test stand-in.
package client
