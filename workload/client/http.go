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

// Chats returns the caller's chats (GET /api/chats). They are also
// remembered for the history sync that follows every (re)connect.
func (c *Client) Chats(ctx context.Context) ([]Chat, error) {
	var out struct {
		Chats []Chat `json:"chats"`
	}
	if err := c.do(ctx, http.MethodGet, "/api/chats", nil, nil, &out); err != nil {
		return nil, err
	}
	for _, ch := range out.Chats {
		c.dd.know(ch.ChatID)
	}
	return out.Chats, nil
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
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(body, &eb) == nil && eb.Error.Code != "" {
		return &Error{Status: status, Code: eb.Error.Code, Message: eb.Error.Message}
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
