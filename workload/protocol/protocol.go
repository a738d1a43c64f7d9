package protocol

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/tetra-messenger/tetra/workload/text"
)

// Frame types (PROTOCOL.md §3).
const (
	TypeHello = "hello"
	TypeSend  = "send"
	TypeAck   = "ack"
	TypePing  = "ping"
	TypePong  = "pong"
	TypeRead  = "read"
	// TypeRefresh (client) replaces the connection's token before it
	// expires; TypeRefreshed (server) answers it (PROTOCOL.md §1).
	TypeRefresh   = "refresh"
	TypeRefreshed = "refreshed"
	TypeAccepted  = "accepted"
	TypeMessage   = "message"
	TypeChat      = "chat"
	TypeError     = "error"
	// TypeTyping (client and server) and TypePresence (server) are
	// ephemeral: never stored, best effort (PROTOCOL.md §7.4).
	TypeTyping   = "typing"
	TypePresence = "presence"
)

// Error codes carried by error frames and HTTP error bodies (PROTOCOL.md §2, §3).
const (
	CodeInvalid         = "invalid"
	CodeForbidden       = "forbidden"
	CodeNotFound        = "not_found"
	CodeTooLarge        = "too_large"
	CodeRateLimited     = "rate_limited"
	CodeCreditExhausted = "credit_exhausted"
	CodeOverloaded      = "overloaded"
	// CodeUnauthorized is used only in HTTP error bodies (status 401).
	CodeUnauthorized = "unauthorized"
	// CodeInternal is used only in HTTP error bodies for store failures (503).
	CodeUnavailable = "unavailable"
)

// WebSocket close codes (PROTOCOL.md §3 "Close codes").
const (
	CloseSuperseded = 4001 // a newer connection of the same (user, device)
	CloseAttempts   = 4002 // withdrawn: unacknowledged past max-delivery-attempts
	ClosePending    = 4003 // withdrawn: more than max-pending unacknowledged
	CloseIdle       = 4004 // no answer to pings
	CloseExpired    = 4005 // the connection's token expired (PROTOCOL.md §1)
	CloseGoingAway  = 1001 // server shutting down
	ClosePolicy     = 1008 // too many bad frames
	CloseTooBig     = 1009 // frame over the transport limit
)

// Limits are the per-connection limits the server reports in hello.
type Limits struct {
	MaxBodyBytes     int `json:"maxBodyBytes"`
	MaxInFlightSends int `json:"maxInFlightSends"`
	SendsPerSecond   int `json:"sendsPerSecond"`
	PingIntervalMs   int `json:"pingIntervalMs"`
	// MaxPending is the push window, an addition to PROTOCOL.md §3: the
	// most message frames the server keeps unacknowledged on this
	// connection; more are sent as acks free the window.
	MaxPending int `json:"maxPending"`
	// FanoutPerSecond is the user's budget of outbox rows per second, an
	// addition to PROTOCOL.md §3: a send costs one row per member of its
	// chat; one over the budget is answered rate_limited
	// (config.Tuning.FanoutPerSecond).
	FanoutPerSecond int `json:"fanoutPerSecond"`
}

// Hello is the first frame the server sends on every connection.
type Hello struct {
	Type         string `json:"type"`
	UserID       string `json:"userId"`
	Device       string `json:"device"`
	ConnectionID string `json:"connectionId"`
	Limits       Limits `json:"limits"`
}

// Send asks the server to store and deliver a message. CorrelationID is the
// client's idempotency key: the same (sender, correlationId) answers with the
// original messageId and stores nothing new; with another chatId or body
// than the original it is refused with CodeInvalid (PROTOCOL.md §3).
type Send struct {
	Type          string `json:"type"`
	ChatID        string `json:"chatId"`
	CorrelationID string `json:"correlationId"`
	Body          string `json:"body"`
	// Edits makes the send an edit of that message of the chat, one the
	// sender sent; Body is its new text (PROTOCOL.md §7.3).
	Edits string `json:"edits,omitempty"`
}

// Ack acknowledges one or many message frames by messageId.
type Ack struct {
	Type       string   `json:"type"`
	MessageIDs []string `json:"messageIds"`
}

// Read is a read receipt. From a client it carries ChatID and MessageID; the
// server adds UserID when it forwards it to the other online members.
type Read struct {
	Type      string `json:"type"`
	ChatID    string `json:"chatId"`
	UserID    string `json:"userId,omitempty"`
	MessageID string `json:"messageId"`
}

// Typing says a user is typing in a chat (PROTOCOL.md §7.4). From a
// client it carries ChatID only (no correlationId, no answer); the server
// adds UserID when it forwards it to the chat's other members, at most one
// per (user, chat) every TypingInterval.
type Typing struct {
	Type   string `json:"type"`
	ChatID string `json:"chatId"`
	UserID string `json:"userId,omitempty"`
}

// TypingInterval is the least time between two typing frames the server
// forwards for one (user, chat); the ones between are dropped. A receiver
// shows "typing" for TypingShown after the last one (PROTOCOL.md §7.4).
const (
	TypingInterval = 2 * time.Second
	TypingShown    = 5 * time.Second
)

// Presence tells that a user went online or offline (PROTOCOL.md §7.4),
// to the devices of the users who share a chat with it. LastSeen is when
// its last connection closed (UTC), set when Online is false.
type Presence struct {
	Type     string     `json:"type"`
	UserID   string     `json:"userId"`
	Online   bool       `json:"online"`
	LastSeen *time.Time `json:"lastSeen,omitempty"`
}

// Chat is a chat on the wire (PROTOCOL.md §2): in GET /api/chats, in the
// answers of the chat calls and in chat events.
type Chat struct {
	ChatID  string   `json:"chatId"`
	Kind    string   `json:"kind"` // "direct" or "group"
	Title   string   `json:"title"`
	Members []string `json:"members"`
	// CreatedBy is the group's creator, its first admin (see Admins); ""
	// for direct chats.
	CreatedBy string `json:"createdBy"`
	// LastRead maps each member who has read anything to the messageId of
	// its read marker (§3 read, forward-only). Never null.
	LastRead map[string]string `json:"lastRead"`
	// Unread counts, for the caller, the messages after its own read
	// marker that others sent, capped at 1,000. Present in GET /api/chats
	// and the chat call answers; absent from chat events, which go to
	// many users at once (a client keeps its own count from there).
	Unread *int `json:"unread,omitempty"`
	// Admins are a group's admins, the creator first (PROTOCOL.md §7.5);
	// absent for direct chats.
	Admins []string `json:"admins,omitempty"`
	// History is a group's history setting, "shared" or "member" (§7.6);
	// absent for direct chats.
	History string `json:"history,omitempty"`
	// LastMessage is the newest message the caller may see, absent when
	// there is none; LastActivity the latest of its sentAt, the caller's
	// last add and the chat's creation (§7.2). Present in GET /api/chats
	// and GET /api/chats/{chatId}; absent from events.
	LastMessage  *Message   `json:"lastMessage,omitempty"`
	LastActivity *time.Time `json:"lastActivity,omitempty"`
}

// Chat event kinds (ChatEvent.Event).
const (
	ChatAdded   = "added"   // to the devices of the user added
	ChatRemoved = "removed" // to the devices of the user removed (or who left)
	ChatUpdated = "updated" // to the devices of the chat's other members
)

// ChatEvent tells a client that a chat's membership changed (PROTOCOL.md
// §3): {"type":"chat","event":"added"|"removed"|"updated","chat":{...}}.
type ChatEvent struct {
	Type  string `json:"type"`
	Event string `json:"event"`
	Chat  Chat   `json:"chat"`
}

// Refresh replaces the connection's token (PROTOCOL.md §1): a valid token
// of the same user moves the connection's expiry to its exp (or removes
// it); any other token is refused with CodeInvalid and changes nothing.
type Refresh struct {
	Type  string `json:"type"`
	Token string `json:"token"`
}

// Refreshed answers a refresh that was applied. Exp is the new token's exp
// in UTC; nil (the key absent) when the new token has none.
type Refreshed struct {
	Type string     `json:"type"`
	Exp  *time.Time `json:"exp,omitempty"`
}

// Ping and Pong are the application-level liveness frames.
type Ping struct {
	Type string `json:"type"`
}

// Accepted answers a send once the message is committed to history (G1).
type Accepted struct {
	Type          string    `json:"type"`
	CorrelationID string    `json:"correlationId"`
	MessageID     string    `json:"messageId"`
	ChatID        string    `json:"chatId"`
	SentAt        time.Time `json:"sentAt"`
}

// Message is one chat message, as pushed in a message frame and as returned
// by history (without Type). SentAt is the commit-time timestamp in UTC.
type Message struct {
	Type          string    `json:"type,omitempty"`
	MessageID     string    `json:"messageId"`
	CorrelationID string    `json:"correlationId"`
	ChatID        string    `json:"chatId"`
	SenderID      string    `json:"senderId"`
	Body          string    `json:"body"`
	SentAt        time.Time `json:"sentAt"`
	// Edits and Deletes mark an edit or a delete of that message
	// (PROTOCOL.md §7.3); absent on ordinary messages.
	Edits   string `json:"edits,omitempty"`
	Deletes string `json:"deletes,omitempty"`
	// EditedAt is, in history, when an ordinary message was last edited
	// (its Body is the newest); Deleted marks a deleted one (its Body is
	// ""). Absent otherwise.
	EditedAt *time.Time `json:"editedAt,omitempty"`
	Deleted  bool       `json:"deleted,omitempty"`
}

// ErrorFrame reports a failed request. CorrelationID is set when it answers
// a send; a send that got an error was not stored.
type ErrorFrame struct {
	Type          string `json:"type"`
	CorrelationID string `json:"correlationId,omitempty"`
	Code          string `json:"code"`
	Message       string `json:"message"`
	// RetryAfterMs is set on rate_limited errors: how long to wait, in
	// milliseconds, before the resend can pass (PROTOCOL.md §7.7).
	RetryAfterMs int64 `json:"retryAfterMs,omitempty"`
}

// Error is a protocol-level failure with a contract error code.
type Error struct {
	Code          string
	Message       string
	CorrelationID string
	// FrameType is the type of the refused frame when DecodeClient could
	// read a known one (TypeSend, TypeAck, TypePing, TypeRead,
	// TypeRefresh, TypeTyping), else "".
	FrameType string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Errorf builds an *Error with the given code.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// CodeOf returns the contract code of err: the Code of an *Error in its
// chain, or CodeInvalid for anything else.
func CodeOf(err error) string {
	var pe *Error
	if errors.As(err, &pe) {
		return pe.Code
	}
	return CodeInvalid
}

// Field limits enforced by DecodeClient. Ids and keys are opaque strings
// chosen by clients; they are bounded so that nothing a client sends can grow
// the server's memory or index keys without limit.
const (
	MaxIDLen       = 128 // chatId, messageId, correlationId, in bytes
	MaxAckIDs      = 1024
	MaxTokenLen    = 4096 // bytes of a refresh frame's token (as auth accepts)
	DefaultMaxBody = 4096
	TransportLimit = 64 << 10 // bytes: larger frames close the socket with 1009
)

// ClientFrame is a decoded client-to-server frame: exactly one of the
// pointers is set.
type ClientFrame struct {
	Send    *Send
	Ack     *Ack
	Ping    *Ping
	Read    *Read
	Refresh *Refresh
	Typing  *Typing
}

// DecodeClient parses one client frame. maxBody is the body limit in bytes
// (UTF-8); a longer body gives CodeTooLarge. Errors are *Error with code
// CodeInvalid or CodeTooLarge; when the frame was a send whose correlationId
// could be read, the error carries it so the answer can name it, and
// FrameType names a known frame type. Ids and
// bodies holding U+0000 are CodeInvalid (PROTOCOL.md §3; package text), and
// so are (docs/PROTOCOL.md, "Additions"): a frame that is not valid UTF-8;
// a key given twice, or in another letter case than PROTOCOL.md writes it
// ("Body", "TYPE"); an unpaired UTF-16 surrogate escape ("\ud800") in any
// string; a body of only whitespace (unicode.IsSpace). Unknown keys are
// ignored. DecodeClient never panics, whatever the input.
func DecodeClient(data []byte, maxBody int) (ClientFrame, error) {
	if f, ok := decodeFast(data, maxBody); ok {
		return f, nil // a plain send or ack (fast.go)
	}
	return decodeGeneral(data, maxBody)
}

// decodeGeneral is DecodeClient for every frame: encoding/json after the
// rules of strict.go.
func decodeGeneral(data []byte, maxBody int) (f ClientFrame, err error) {
	var head struct {
		Type          string `json:"type"`
		CorrelationID any    `json:"correlationId"`
	}
	defer func() {
		var pe *Error
		if errors.As(err, &pe) {
			switch head.Type {
			case TypeSend, TypeAck, TypePing, TypeRead, TypeRefresh, TypeTyping:
				pe.FrameType = head.Type
			}
		}
	}()
	if !json.Valid(data) {
		return f, Errorf(CodeInvalid, "frame is not valid JSON")
	}
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 || trimmed[0] != '{' {
		return f, Errorf(CodeInvalid, "frame must be a JSON object")
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return f, Errorf(CodeInvalid, "frame type must be a string")
	}
	corr, _ := head.CorrelationID.(string)
	fail := func(code, format string, args ...any) (ClientFrame, error) {
		e := Errorf(code, format, args...)
		if head.Type == TypeSend && validID(corr) {
			e.CorrelationID = corr
		}
		return ClientFrame{}, e
	}
	if se := checkFrame(data); se != nil {
		if se.key == "" || strings.EqualFold(se.key, "correlationId") || strings.EqualFold(se.key, "type") {
			corr = "" // the correlationId, or that this is a send, is in doubt: name none
		}
		return fail(CodeInvalid, "%s", se.msg)
	}
	switch head.Type {
	case TypeSend:
		var s Send
		if err := json.Unmarshal(data, &s); err != nil {
			return fail(CodeInvalid, "send: %s", fieldError(err))
		}
		switch {
		case s.CorrelationID == "":
			return fail(CodeInvalid, "send: correlationId is required")
		case !validID(s.CorrelationID):
			return fail(CodeInvalid, "send: correlationId must be 1..%d bytes of valid UTF-8 without U+0000", MaxIDLen)
		case s.ChatID == "":
			return fail(CodeInvalid, "send: chatId is required")
		case !validID(s.ChatID):
			return fail(CodeInvalid, "send: chatId must be 1..%d bytes of valid UTF-8 without U+0000", MaxIDLen)
		case s.Body == "":
			return fail(CodeInvalid, "send: body is required")
		case strings.TrimSpace(s.Body) == "":
			return fail(CodeInvalid, "send: body is blank: only whitespace")
		case !text.Valid(s.Body):
			return fail(CodeInvalid, "send: body must be valid UTF-8 without U+0000")
		case maxBody > 0 && len(s.Body) > maxBody:
			return fail(CodeTooLarge, "send: body is %d bytes, the limit is %d", len(s.Body), maxBody)
		case (s.Edits != "" || namesEdits(data)) && !validID(s.Edits):
			return fail(CodeInvalid, "send: edits must be a messageId: 1..%d bytes of valid UTF-8 without U+0000", MaxIDLen)
		}
		f.Send = &s
	case TypeAck:
		var a Ack
		if err := json.Unmarshal(data, &a); err != nil {
			return f, Errorf(CodeInvalid, "ack: %s", fieldError(err))
		}
		if len(a.MessageIDs) == 0 {
			return f, Errorf(CodeInvalid, "ack: messageIds must be a non-empty array")
		}
		if len(a.MessageIDs) > MaxAckIDs {
			return f, Errorf(CodeInvalid, "ack: at most %d messageIds per frame", MaxAckIDs)
		}
		for _, id := range a.MessageIDs {
			if !validID(id) {
				return f, Errorf(CodeInvalid, "ack: each messageId must be 1..%d bytes of valid UTF-8 without U+0000", MaxIDLen)
			}
		}
		f.Ack = &a
	case TypePing:
		f.Ping = &Ping{Type: TypePing}
	case TypeRead:
		var r Read
		if err := json.Unmarshal(data, &r); err != nil {
			return f, Errorf(CodeInvalid, "read: %s", fieldError(err))
		}
		if !validID(r.ChatID) || !validID(r.MessageID) {
			return f, Errorf(CodeInvalid, "read: chatId and messageId are required: 1..%d bytes of valid UTF-8 without U+0000", MaxIDLen)
		}
		r.UserID = "" // set by the server, never trusted from a client
		f.Read = &r
	case TypeRefresh:
		var r Refresh
		if err := json.Unmarshal(data, &r); err != nil {
			return f, Errorf(CodeInvalid, "refresh: %s", fieldError(err))
		}
		if r.Token == "" || len(r.Token) > MaxTokenLen {
			return f, Errorf(CodeInvalid, "refresh: token is required (1..%d bytes)", MaxTokenLen)
		}
		f.Refresh = &r
	case TypeTyping:
		var ty Typing
		if err := json.Unmarshal(data, &ty); err != nil {
			return f, Errorf(CodeInvalid, "typing: %s", fieldError(err))
		}
		if !validID(ty.ChatID) {
			return f, Errorf(CodeInvalid, "typing: chatId is required: 1..%d bytes of valid UTF-8 without U+0000", MaxIDLen)
		}
		ty.UserID = "" // set by the server, never trusted from a client
		f.Typing = &ty
	case "":
		return f, Errorf(CodeInvalid, "frame has no type")
	default:
		return f, Errorf(CodeInvalid, "unknown frame type %.32q", head.Type)
	}
	return f, nil
}

// validID reports whether s is an id the wire accepts: 1..MaxIDLen bytes of
// valid UTF-8 without U+0000 (text.Valid, the rule every store applies too:
// PROTOCOL.md §3).
// namesEdits reports whether a send frame has an "edits" key (which
// Send.Edits, empty, cannot tell from no key): "edits": "" is an edit of
// no message, refused like any empty id (PROTOCOL.md §7.3), not a new
// message.
func namesEdits(data []byte) bool {
	var aux struct {
		Edits *string `json:"edits"`
	}
	return json.Unmarshal(data, &aux) == nil && aux.Edits != nil
}

func validID(s string) bool {
	return s != "" && len(s) <= MaxIDLen && text.Valid(s)
}

func fieldError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("field %q has the wrong type", te.Field)
	}
	return "malformed frame"
}
