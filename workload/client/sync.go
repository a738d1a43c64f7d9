package client

import (
	"context"
	"errors"
	"fmt"
	"net/http"
)

// resync pages the history of every chat the user is in from its cursor
// (PROTOCOL.md §4, §5) and reports what is new. It goes on with the other
// chats when one fails and returns the first failure, so the caller retries.
// A chat answered 403 or 404 (the user left it) is forgotten.
func (c *Client) resync(ctx context.Context) error {
	ids, err := c.listChats(ctx)
	if err != nil {
		return fmt.Errorf("client: resync: list chats: %w", err)
	}
	var first error
	for _, id := range ids {
		err := c.syncChat(ctx, id)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return ctx.Err()
		case isGone(err):
			c.dd.forget(id)
			c.emitError(fmt.Errorf("client: chat %s is gone, forgetting it: %w", id, err))
		case first == nil:
			first = err
		}
	}
	return first
}

// catchUp syncs the chats that asked for it (too many ids beyond their
// cursor); errors are reported and the chat asks again later.
func (c *Client) catchUp(ctx context.Context) {
	for _, id := range c.dd.takeCatchUps() {
		err := c.syncChat(ctx, id)
		switch {
		case err == nil, ctx.Err() != nil:
		case isGone(err):
			c.dd.forget(id)
			c.emitError(fmt.Errorf("client: chat %s is gone, forgetting it: %w", id, err))
		default:
			c.emitError(err)
		}
	}
}

// listChats returns the chats to sync: Config.Chats (default GET
// /api/chats) plus every chat the client learnt of otherwise.
func (c *Client) listChats(ctx context.Context) ([]string, error) {
	if c.cfg.Chats != nil {
		ids, err := c.cfg.Chats(ctx)
		if err != nil {
			return nil, err
		}
		for _, id := range ids {
			c.dd.know(id)
		}
	} else if _, err := c.Chats(ctx); err != nil { // Chats registers them
		return nil, err
	}
	return c.dd.chatIDs(), nil
}

// syncChat pages chat's history from its cursor to the end, reporting new
// messages and advancing the cursor page by page.
func (c *Client) syncChat(ctx context.Context, chat string) error {
	self := c.Hello().UserID
	since, epoch := c.dd.beginSync(chat)
	complete := false
	defer func() { c.dd.endSync(chat, epoch, complete) }()
	for {
		msgs, more, err := c.History(ctx, chat, since, c.cfg.HistoryPageSize)
		if err != nil {
			return fmt.Errorf("client: sync chat %s since %q: %w", chat, since, err)
		}
		c.st.historyPages.Add(1)
		last := ""
		for _, m := range msgs {
			if m.MessageID == "" {
				continue
			}
			last = m.MessageID
			if m.ChatID == "" {
				m.ChatID = chat
			}
			isNew := c.dd.seenHistory(chat, m.MessageID)
			if isNew && m.SenderID == self && m.CorrelationID != "" && c.dd.foundOwn(m) {
				isNew = false // a send of ours whose answer is pending: Send reports it
			}
			if isNew {
				c.st.delivered.Add(1)
				c.st.fromHistory.Add(1)
				c.deliver(m)
			} else {
				c.st.historyOverlap.Add(1)
			}
		}
		if last == "" {
			complete = true
			return nil
		}
		if last == since {
			return fmt.Errorf("client: sync chat %s: the server answered the cursor %q again", chat, since)
		}
		since = last
		c.dd.advance(chat, since)
		if !more {
			complete = true
			return nil
		}
	}
}

// isGone reports an HTTP 403 or 404: the chat is not (or no longer) ours.
func isGone(err error) bool {
	var e *Error
	return errors.As(err, &e) && (e.Status == http.StatusForbidden || e.Status == http.StatusNotFound)
}
