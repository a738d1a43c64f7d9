package client

import (
	"context"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"

	"github.com/oklog/ulid/v2"

	"github.com/tetra-messenger/tetra/workload/protocol"
)

// Send sends body to chatID under a fresh correlationId (a ULID) and
// returns the server's accepted answer, that is, once the message is
// committed to history. See SendWithID for the retry rules.
func (c *Client) Send(ctx context.Context, chatID, body string) (protocol.Accepted, error) {
	return c.SendWithID(ctx, chatID, NewCorrelationID(), body)
}

// NewCorrelationID returns a fresh correlationId (a ULID, 26 characters).
func NewCorrelationID() string { return ulid.Make().String() }

// SendWithID sends body to chatID under correlationID, the caller's
// idempotency key, and waits for its answer:
//
//   - accepted: returned. The message counts as seen: it will not be
//     reported to OnMessage when history returns it. If a history sync
//     finds the message while the send still waits (its answer was lost
//     with a connection), SendWithID returns an Accepted built from it.
//   - connection lost before the answer: the same frame, with the same
//     correlationID, is sent again on the next connection, until ctx ends.
//     The server answers a repeated key with the original messageId, so a
//     message is stored once however many times it is sent.
//   - overloaded: retried with the client's backoff (BackoffMin..BackoffMax).
//   - rate_limited, credit_exhausted: retried after LimitRetryWait, or
//     returned as *Error when Config.ReturnLimitErrors is set.
//   - any other error code (invalid, forbidden, not_found, too_large):
//     returned as *Error, with Status 0. The message was not stored.
//
// Before sending, SendWithID waits for a slot among hello's
// maxInFlightSends (so the client never exceeds the server's credit) and,
// unless Config.DisableRateLimit, for the client-side rate limiter paced at
// hello's sendsPerSecond. Empty ids or body, and a body over maxBodyBytes,
// are refused locally (*Error with Local set).
//
// When ctx ends first SendWithID returns ctx's error, and the message may or
// may not have been stored: call SendWithID again with the same
// correlationID to find out, or let the history sync report it (it then
// reaches OnMessage, with this CorrelationID and this user as SenderID).
// After Close, or when the client stopped, it returns the terminal error
// (ErrClosed, ErrSuperseded...).
func (c *Client) SendWithID(ctx context.Context, chatID, correlationID, body string) (protocol.Accepted, error) {
	return c.sendWithID(ctx, chatID, correlationID, body, "")
}

// sendWithID is SendWithID; a non-empty edits makes the send an edit of
// that message (PROTOCOL.md §7.3).
func (c *Client) sendWithID(ctx context.Context, chatID, correlationID, body, edits string) (protocol.Accepted, error) {
	var zero protocol.Accepted
	switch {
	case chatID == "" || len(chatID) > protocol.MaxIDLen:
		return zero, localError(protocol.CodeInvalid, "chatId must be 1..%d bytes", protocol.MaxIDLen)
	case correlationID == "" || len(correlationID) > protocol.MaxIDLen || !utf8.ValidString(correlationID):
		return zero, localError(protocol.CodeInvalid, "correlationId must be 1..%d bytes of UTF-8", protocol.MaxIDLen)
	case body == "" || !utf8.ValidString(body):
		return zero, localError(protocol.CodeInvalid, "body must be non-empty UTF-8")
	}
	cn, err := c.waitConn(ctx)
	if err != nil {
		return zero, err
	}
	if limit := cn.hello.Limits.MaxBodyBytes; limit > 0 && len(body) > limit {
		return zero, localError(protocol.CodeTooLarge, "body is %d bytes, the server's limit is %d", len(body), limit)
	}
	if err := c.sem.acquire(ctx, c.stop); err != nil {
		return zero, c.stopErr(err)
	}
	defer c.sem.release()
	found := c.dd.beginSend(correlationID)
	defer c.dd.endSend(correlationID)

	frame := protocol.Encode(protocol.Send{
		Type: protocol.TypeSend, ChatID: chatID, CorrelationID: correlationID, Body: body, Edits: edits,
	})
	overloads := 0
	written := false // the frame went out at least once
	for {
		cn, err := c.waitConn(ctx)
		if err != nil {
			return zero, err
		}
		if c.limiter != nil {
			if err := c.limiter.Wait(ctx); err != nil {
				return zero, fmt.Errorf("client: send %s: waiting for the rate limiter: %w", correlationID, err)
			}
		}
		ca := cn.register(correlationID)
		if ca == nil {
			continue // lost meanwhile; waitConn waits for the next one
		}
		if err := cn.enqueue(ctx, frame); err != nil {
			cn.unregister(correlationID, ca)
			if errors.Is(err, errConnLost) {
				continue
			}
			return zero, err
		}
		if written {
			c.st.sendsRetried.Add(1)
		}
		written = true

		var a answer
		select {
		case a = <-ca.res:
		case <-cn.done:
			select {
			case a = <-ca.res: // answered just before the end
			default:
				continue // resend on the next connection
			}
		case m := <-found:
			// A history sync found the message: it is committed, and the
			// answer was lost with an earlier connection.
			cn.unregister(correlationID, ca)
			a = answer{acc: protocol.Accepted{
				Type: protocol.TypeAccepted, CorrelationID: correlationID,
				MessageID: m.MessageID, ChatID: m.ChatID, SentAt: m.SentAt,
			}}
		case <-ctx.Done():
			cn.unregister(correlationID, ca)
			return zero, ctx.Err()
		case <-c.stop:
			return zero, c.stopErr(nil)
		}

		if a.err == nil {
			c.st.sendsAccepted.Add(1)
			chat := a.acc.ChatID
			if chat == "" {
				chat = chatID
			}
			if _, catchUp := c.dd.seenLive(chat, a.acc.MessageID); catchUp {
				c.kickSync()
			}
			return a.acc, nil
		}
		var wait = backoff(c.cfg.BackoffMin, c.cfg.BackoffMax, overloads)
		switch a.err.Code {
		case protocol.CodeOverloaded:
			overloads++
		case protocol.CodeRateLimited, protocol.CodeCreditExhausted:
			retryAfter := time.Duration(a.err.RetryAfterMs) * time.Millisecond
			if c.cfg.ReturnLimitErrors {
				c.st.sendErrors.Add(1)
				return zero, &Error{Code: a.err.Code, Message: a.err.Message, CorrelationID: correlationID, RetryAfter: retryAfter}
			}
			// Not before the server's retryAfterMs (PROTOCOL.md §7.7).
			wait = max(jitter(c.cfg.LimitRetryWait), retryAfter)
		default:
			c.st.sendErrors.Add(1)
			return zero, &Error{Code: a.err.Code, Message: a.err.Message, CorrelationID: correlationID}
		}
		if !sleep(ctx, c.stop, wait) {
			if ctx.Err() != nil {
				return zero, ctx.Err()
			}
			return zero, c.stopErr(nil)
		}
	}
}

// stopErr returns the terminal error when the client stopped, else err.
func (c *Client) stopErr(err error) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.term != nil {
		return c.term
	}
	return err
}

// Read sends a read receipt: messageID of chatID was read. Other online
// members receive it (Config.OnRead). It returns once the frame is queued
// on a live connection (waiting for one if needed, until ctx ends); there is
// no answer, and a receipt queued on a connection that then drops is lost.
func (c *Client) Read(ctx context.Context, chatID, messageID string) error {
	if chatID == "" || messageID == "" || len(chatID) > protocol.MaxIDLen || len(messageID) > protocol.MaxIDLen {
		return localError(protocol.CodeInvalid, "chatId and messageId must be 1..%d bytes", protocol.MaxIDLen)
	}
	frame := protocol.Encode(protocol.Read{Type: protocol.TypeRead, ChatID: chatID, MessageID: messageID})
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

// Ack acknowledges message frames by messageId, for Config.ManualAck. The
// ids are coalesced with other acks (AckDelay, AckBatch) on the live
// connection. It returns ErrNotConnected when there is none: the server
// redelivers what was not acknowledged on a connection, or history
// recovers it. Acking ids of the automatic mode, or twice, is harmless.
func (c *Client) Ack(ids ...string) error {
	c.mu.Lock()
	cn, term := c.cur, c.term
	c.mu.Unlock()
	if term != nil {
		return term
	}
	if cn == nil {
		return ErrNotConnected
	}
	valid := ids[:0:0]
	for _, id := range ids {
		if id != "" && len(id) <= protocol.MaxIDLen {
			valid = append(valid, id)
		}
	}
	if len(valid) > 0 {
		cn.addAcks(valid...)
	}
	return nil
}
