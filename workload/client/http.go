package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/tetra-messenger/tetra/workload/protocol"
)

// Chat kinds (PROTOCOL.md §2).
const (
	KindDirect = "direct"
	KindGroup  = "group"
)

// Chat is a conversation as the HTTP API returns it (PROTOCOL.md §2).
type Chat struct {
	ChatID  string   `json:"chatId"`
	Kind    string   `json:"kind"` // KindDirect or KindGroup
	Title   string   `json:"title"`
	Members []string `json:"members"`
	// CreatedBy is the group's creator, its first admin; "" for direct
	// chats.
	CreatedBy string `json:"createdBy"`
	// LastRead maps each member who has read anything to the messageId of
	// its read marker (forward-only; PROTOCOL.md §3 read). It survives
	// reloads and is the same on every device.
	LastRead map[string]string `json:"lastRead"`
	// Unread is the caller's count of messages after its own read marker
	// that others sent, capped by the server (at 1,000). Only Chats (and
	// the answers of the chat calls) fill it; in a ChatEvent it is 0 and
	// HasUnread is false.
	Unread int `json:"unread"`
	// HasUnread reports whether the server sent Unread.
	HasUnread bool `json:"-"`
	// Admins are a group's admins, the creator first (PROTOCOL.md §7.5);
	// nil for direct chats.
	Admins []string `json:"admins"`
	// History is a group's history setting, HistoryShared or HistoryMember
	// (§7.6); "" for direct chats.
	History string `json:"history"`
	// LastMessage is the newest message the caller may see (nil when there
	// is none) and LastActivity the latest of its SentAt, the caller's last
	// add and the chat's creation (§7.2). Filled by Chats, ChatPage and
	// GetChat; zero in a ChatEvent.
	LastMessage  *protocol.Message `json:"lastMessage"`
	LastActivity time.Time         `json:"lastActivity"`
}

// UnmarshalJSON decodes a chat and notes whether unread was present.
func (ch *Chat) UnmarshalJSON(b []byte) error {
	type plain Chat
	var v struct {
		plain
		Unread *int `json:"unread"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*ch = Chat(v.plain)
	if v.Unread != nil {
		ch.Unread, ch.HasUnread = *v.Unread, true
	}
	return nil
}

// Chat event kinds (ChatEvent.Event, PROTOCOL.md §3).
const (
	ChatAdded   = "added"
	ChatRemoved = "removed"
	ChatUpdated = "updated"
)

// ChatEvent is a chat frame: the membership of Chat changed. Event is
// ChatAdded (this user was added), ChatRemoved (this user was removed, or
// left on another device) or ChatUpdated (other members changed); Chat is
// the chat after the change.
type ChatEvent struct {
	Event string `json:"event"`
	Chat  Chat   `json:"chat"`
}

// maxResponseBytes bounds the HTTP answers the client decodes (a history
// page of 1000 messages of 4 KiB, escaped, fits with room to spare).
const maxResponseBytes = 64 << 20

// CreateDirect opens (or finds) the direct chat between the caller and
// peer. The server answers 201 for a new chat and 200 with the same chat
// when it exists, from either side; both return the chat.
func (c *Client) CreateDirect(ctx context.Context, peer string) (Chat, error) {
	var ch Chat
	in := map[string]any{"kind": KindDirect, "members": []string{peer}}
	err := c.do(ctx, http.MethodPost, "/api/chats", nil, in, &ch)
	if err == nil {
		c.dd.know(ch.ChatID)
	}
	return ch, err
}

// CreateGroup creates a group chat titled title with the caller and
// members.
func (c *Client) CreateGroup(ctx context.Context, title string, members []string) (Chat, error) {
	var ch Chat
	if members == nil {
		members = []string{}
	}
	in := map[string]any{"kind": KindGroup, "title": title, "members": members}
	err := c.do(ctx, http.MethodPost, "/api/chats", nil, in, &ch)
	if err == nil {
		c.dd.know(ch.ChatID)
	}
	return ch, err
}

// AddMember adds userID to the group chat chatID (the caller must be a
// member) and returns the chat.
func (c *Client) AddMember(ctx context.Context, chatID, userID string) (Chat, error) {
	var ch Chat
	err := c.do(ctx, http.MethodPost, "/api/chats/"+url.PathEscape(chatID)+"/members", nil,
		map[string]string{"userId": userID}, &ch)
	return ch, err
}

// Leave removes the caller from the group chat chatID (DELETE
// /api/chats/{chatId}/members/{me}, PROTOCOL.md §2) and returns the chat
// without it. The chat is no longer synced after reconnects; its history
// answers 403 until someone adds the caller again. A direct chat is an
// *Error with Code "invalid"; a chat the caller is not in, "forbidden".
func (c *Client) Leave(ctx context.Context, chatID string) (Chat, error) {
	tok, _ := c.tok.get()
	me := tokenSub(tok)
	if me == "" {
		return Chat{}, fmt.Errorf("client: leave: the token names no user (no sub claim)")
	}
	ch, err := c.RemoveMember(ctx, chatID, me)
	if err == nil {
		c.dd.forget(chatID)
	}
	return ch, err
}

// RemoveMember removes userID from the group chat chatID and returns the
// chat after it (PROTOCOL.md §2, §7.5): only an admin of the group may
// remove another member ("forbidden" otherwise); anyone may remove itself
// (see Leave). Removing a user who is not a member changes nothing.
func (c *Client) RemoveMember(ctx context.Context, chatID, userID string) (Chat, error) {
	var ch Chat
	err := c.do(ctx, http.MethodDelete, "/api/chats/"+url.PathEscape(chatID)+"/members/"+url.PathEscape(userID), nil, nil, &ch)
	return ch, err
}

// Chats returns all the caller's chats, newest activity first (GET
// /api/chats, following nextCursor in pages of 500; PROTOCOL.md §7.2).
// They are also remembered for the history sync that follows every
// (re)connect.
func (c *Client) Chats(ctx context.Context) ([]Chat, error) {
	var all []Chat
	cursor := ""
	for {
		page, next, err := c.ChatPage(ctx, cursor, 500)
		if err != nil {
			return nil, err
		}
		all = append(all, page...)
		if next == "" {
			return all, nil
		}
		cursor = next
	}
}

// ChatPage returns one page of the caller's chats by lastActivity, newest
// first, after cursor ("" for the first page), and the cursor of the next
// page ("" when none follow); limit <= 0 leaves the server's default (100)
// (PROTOCOL.md §7.2). Its chats are remembered for the history sync.
func (c *Client) ChatPage(ctx context.Context, cursor string, limit int) ([]Chat, string, error) {
	q := url.Values{}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out struct {
		Chats      []Chat `json:"chats"`
		NextCursor string `json:"nextCursor"`
	}
	if err := c.do(ctx, http.MethodGet, "/api/chats", q, nil, &out); err != nil {
		return nil, "", err
	}
	for _, ch := range out.Chats {
		c.dd.know(ch.ChatID)
	}
	return out.Chats, out.NextCursor, nil
}

// GetChat returns one chat as the caller sees it in its list (GET
// /api/chats/{chatId}, PROTOCOL.md §7.2); a chat the caller is not in is
// an *Error with Code "forbidden" or "not_found".
func (c *Client) GetChat(ctx context.Context, chatID string) (Chat, error) {
	var ch Chat
	err := c.do(ctx, http.MethodGet, "/api/chats/"+url.PathEscape(chatID), nil, nil, &ch)
	return ch, err
}

// History settings of a group (PROTOCOL.md §7.6).
const (
	HistoryShared = "shared" // members read the whole retained history (the default)
	HistoryMember = "member" // members read only what was sent while they were members
)

// GroupOptions describe a group to create (CreateGroupWith).
type GroupOptions struct {
	Title   string
	Members []string
	// History is HistoryShared (also when empty) or HistoryMember.
	History string
}

// CreateGroupWith creates a group chat of the caller and o.Members with
// o.History (PROTOCOL.md §7.6); the caller is its first admin.
func (c *Client) CreateGroupWith(ctx context.Context, o GroupOptions) (Chat, error) {
	var ch Chat
	members := o.Members
	if members == nil {
		members = []string{}
	}
	in := map[string]any{"kind": KindGroup, "title": o.Title, "members": members}
	if o.History != "" {
		in["history"] = o.History
	}
	err := c.do(ctx, http.MethodPost, "/api/chats", nil, in, &ch)
	if err == nil {
		c.dd.know(ch.ChatID)
	}
	return ch, err
}

// Rename sets the title of the group chatID (PATCH /api/chats/{chatId},
// PROTOCOL.md §7.5): admins only ("forbidden" otherwise). Every member's
// devices get a ChatUpdated event.
func (c *Client) Rename(ctx context.Context, chatID, title string) (Chat, error) {
	var ch Chat
	err := c.do(ctx, http.MethodPatch, "/api/chats/"+url.PathEscape(chatID), nil, map[string]string{"title": title}, &ch)
	return ch, err
}

// AddAdmin makes the member userID an admin of the group chatID (POST
// /api/chats/{chatId}/admins, PROTOCOL.md §7.5): admins only.
func (c *Client) AddAdmin(ctx context.Context, chatID, userID string) (Chat, error) {
	var ch Chat
	err := c.do(ctx, http.MethodPost, "/api/chats/"+url.PathEscape(chatID)+"/admins", nil, map[string]string{"userId": userID}, &ch)
	return ch, err
}

// RemoveAdmin is the admin userID stepping down (DELETE
// /api/chats/{chatId}/admins/{userId}, PROTOCOL.md §7.5): userID must be
// the caller ("forbidden" otherwise). A group never loses its last admin:
// the member who joined earliest takes over.
func (c *Client) RemoveAdmin(ctx context.Context, chatID, userID string) (Chat, error) {
	var ch Chat
	err := c.do(ctx, http.MethodDelete, "/api/chats/"+url.PathEscape(chatID)+"/admins/"+url.PathEscape(userID), nil, nil, &ch)
	return ch, err
}

// HistoryBefore returns up to limit messages of chatID immediately before
// the messageId before, oldest first (prepend them), and whether older
// ones exist (PROTOCOL.md §7.1). An empty before (or one the server cannot
// resolve) is the newest page: what a client shows when it opens a chat;
// pass the first messageId of a page to load the one above it. limit <= 0
// leaves the server's default (100). It is the raw API call: it neither
// deduplicates nor moves the client's cursors.
func (c *Client) HistoryBefore(ctx context.Context, chatID, before string, limit int) ([]protocol.Message, bool, error) {
	if before == "" {
		before = "end"
	}
	q := url.Values{"before": {before}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out struct {
		Messages []protocol.Message `json:"messages"`
		HasMore  bool               `json:"hasMore"`
	}
	err := c.do(ctx, http.MethodGet, "/api/chats/"+url.PathEscape(chatID)+"/messages", q, nil, &out)
	return out.Messages, out.HasMore, err
}

// History returns up to limit messages of chatID strictly after the
// messageId since, oldest first, and whether more follow (PROTOCOL.md §4).
// An empty since (or one the server cannot resolve) starts at the beginning
// of the retained history; limit <= 0 leaves the server's default (100).
// It is the raw API call: it neither deduplicates nor moves the client's
// cursors.
func (c *Client) History(ctx context.Context, chatID, since string, limit int) ([]protocol.Message, bool, error) {
	q := url.Values{}
	if since != "" {
		q.Set("since", since)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out struct {
		Messages []protocol.Message `json:"messages"`
		HasMore  bool               `json:"hasMore"`
	}
	err := c.do(ctx, http.MethodGet, "/api/chats/"+url.PathEscape(chatID)+"/messages", q, nil, &out)
	return out.Messages, out.HasMore, err
}

// do makes one API call: JSON in, JSON out, non-2xx answers as *Error.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, in, out any) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, c.cfg.HTTPTimeout)
		defer cancel()
	}
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("client: %s %s: %w", method, path, err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	tok, _ := c.tok.get()
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Accept", "application/json")
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.cfg.HTTPClient.Do(req)
	if err != nil {
		return fmt.Errorf("client: %s %s: %w", method, path, err)
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // keep the connection reusable
		_ = resp.Body.Close()
	}()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		return httpError(resp.StatusCode, b)
	}
	if out == nil {
		return nil
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxResponseBytes)).Decode(out); err != nil {
		return fmt.Errorf("client: %s %s: decode answer: %w", method, path, err)
	}
	return nil
}

// httpError turns a non-2xx answer into an *Error, reading the contract's
// {"error":{"code","message"}} body when there is one.
func httpError(status int, body []byte) *Error {
	var eb struct {
		Error struct {
			Code         string `json:"code"`
			Message      string `json:"message"`
			RetryAfterMs int64  `json:"retryAfterMs"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &eb) == nil && eb.Error.Code != "" {
		return &Error{Status: status, Code: eb.Error.Code, Message: eb.Error.Message,
			RetryAfter: time.Duration(eb.Error.RetryAfterMs) * time.Millisecond}
	}
	e := &Error{Status: status, Message: strings.TrimSpace(string(body))}
	if len(e.Message) > 200 {
		e.Message = e.Message[:200] + "..."
	}
	if e.Message == "" {
		e.Message = http.StatusText(status)
	}
	switch status {
	case http.StatusBadRequest:
		e.Code = protocol.CodeInvalid
	case http.StatusUnauthorized:
		e.Code = protocol.CodeUnauthorized
	case http.StatusForbidden:
		e.Code = protocol.CodeForbidden
	case http.StatusNotFound:
		e.Code = protocol.CodeNotFound
	case http.StatusTooManyRequests:
		e.Code = protocol.CodeRateLimited
	case http.StatusServiceUnavailable:
		e.Code = protocol.CodeUnavailable
	}
	return e
}
