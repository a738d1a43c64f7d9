package client

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/tetra-messenger/tetra/workload/protocol"
)

// Edit replaces the body of messageID, a message this user sent to
// chatID, with body (PROTOCOL.md §7.3). The edit is a message of its own,
// sent like Send (same retries, same correlationId rules) and answered
// with its own messageId; members get it as a message with Edits set, and
// history shows the original with the new body and EditedAt. Another
// user's message is refused with forbidden; an unknown, deleted or other
// chat's message with not_found; an edit or delete as target with
// invalid (each an *Error).
func (c *Client) Edit(ctx context.Context, chatID, messageID, body string) (protocol.Accepted, error) {
	return c.EditWithID(ctx, chatID, NewCorrelationID(), messageID, body)
}

// EditWithID is Edit under the caller's correlationID (see SendWithID).
func (c *Client) EditWithID(ctx context.Context, chatID, correlationID, messageID, body string) (protocol.Accepted, error) {
	if messageID == "" || len(messageID) > protocol.MaxIDLen {
		return protocol.Accepted{}, localError(protocol.CodeInvalid, "messageId must be 1..%d bytes", protocol.MaxIDLen)
	}
	return c.sendWithID(ctx, chatID, correlationID, body, messageID)
}

// Delete deletes messageID of chatID (PROTOCOL.md §7.3): this user's own
// message, or any message of a group this user administers. It returns
// the tombstone (Deleted set, empty Body); deleting a deleted message
// returns the same tombstone. The server erases the body and the bodies
// of the message's edits; members get a message with Deletes set.
// Errors are *Error (forbidden, not_found, invalid; unavailable with
// Status 503, safe to retry).
func (c *Client) Delete(ctx context.Context, chatID, messageID string) (protocol.Message, error) {
	var out struct {
		Message protocol.Message `json:"message"`
	}
	err := c.do(ctx, http.MethodDelete, "/api/chats/"+url.PathEscape(chatID)+"/messages/"+url.PathEscape(messageID), nil, nil, &out)
	return out.Message, err
}

// Typing tells chatID's other members that this user is typing
// (PROTOCOL.md §7.4). Call it as the user types: the server forwards at
// most one per chat every protocol.TypingInterval and drops the rest, so
// the client does not need to throttle. It returns once the frame is
// queued on a live connection; there is no answer (a chat this user is
// not in gets an error frame, reported to OnError).
func (c *Client) Typing(ctx context.Context, chatID string) error {
	if chatID == "" || len(chatID) > protocol.MaxIDLen {
		return localError(protocol.CodeInvalid, "chatId must be 1..%d bytes", protocol.MaxIDLen)
	}
	frame := protocol.Encode(protocol.Typing{Type: protocol.TypeTyping, ChatID: chatID})
	for {
		cn, err := c.waitConn(ctx)
		if err != nil {
			return err
		}
		if err := cn.enqueue(ctx, frame); !errors.Is(err, errConnLost) {
			return err
		}
	}
}

// PresenceStatus is one user's presence as GET /api/presence tells it.
type PresenceStatus struct {
	Online bool `json:"online"`
	// LastSeen is when the user's last connection closed, when offline
	// (nil when never seen).
	LastSeen *time.Time `json:"lastSeen,omitempty"`
}

// Presence asks for the presence of users (PROTOCOL.md §7.4): the answer
// holds only those who share a chat with this user; the others are left
// out. At most 500 users per call. The users go as one comma-separated
// users parameter, or, when an id holds a comma, as users repeated with
// one id each (docs/PROTOCOL.md, "Presence"; a lone such id is given
// twice, since one users value is split at its commas).
func (c *Client) Presence(ctx context.Context, users []string) (map[string]PresenceStatus, error) {
	if len(users) == 0 {
		return map[string]PresenceStatus{}, nil
	}
	var out struct {
		Presence map[string]PresenceStatus `json:"presence"`
	}
	q := url.Values{"users": {strings.Join(users, ",")}}
	if slices.ContainsFunc(users, func(u string) bool { return strings.Contains(u, ",") }) {
		q["users"] = slices.Clone(users)
		if len(users) == 1 {
			q["users"] = append(q["users"], users[0])
		}
	}
	err := c.do(ctx, http.MethodGet, "/api/presence", q, nil, &out)
	if out.Presence == nil {
		out.Presence = map[string]PresenceStatus{}
	}
	return out.Presence, err
}
