package client

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Test for them with errors.Is.
var (
	// ErrClosed is returned by every call on a client that was stopped by
	// Close or by the end of the context given to Run. Run itself returns
	// nil after Close.
	ErrClosed = errors.New("client: closed")

	// ErrSuperseded is returned by Run, and by calls waiting for a
	// connection, when the server closed the connection with 4001 (a newer
	// connection of the same user and device took over) and
	// Config.ReconnectOnSuperseded is false. The client is then stopped.
	ErrSuperseded = errors.New("client: superseded by a newer connection of the same user and device (close 4001)")

	// ErrNotConnected is returned by Ack when there is no live connection to
	// carry the acknowledgement. Acks are per connection: the server
	// redelivers, or history recovers, whatever was not acknowledged.
	ErrNotConnected = errors.New("client: not connected")
)

// Error is a failure reported by the server: an error frame answering a
// send (Status is 0), or a non-2xx answer of the HTTP API or of the
// WebSocket upgrade (Status is the HTTP status).
//
// Code is a contract code of PROTOCOL.md (protocol.CodeInvalid,
// protocol.CodeForbidden, ...). For an HTTP answer whose body is not the
// contract's {"error":{"code","message"}}, Code is derived from the status
// (400 invalid, 401 unauthorized, 403 forbidden, 404 not_found,
// 429 rate_limited, 503 unavailable) and is empty for any other status.
//
// A few checks are made locally before anything is sent (an empty chat id,
// correlation id or body gives invalid; a body over hello's maxBodyBytes
// gives too_large); those errors have Status 0 and Local true.
type Error struct {
	Status        int    // HTTP status; 0 for error frames and local checks
	Code          string // contract error code
	Message       string // the server's (or the local check's) explanation
	CorrelationID string // the send's correlationId, when the error answers a send
	Local         bool   // true when the client refused the call without asking the server
	// RetryAfter is the server's retryAfterMs on a rate_limited error
	// (PROTOCOL.md §7.7): resend no sooner. 0 when it gave none.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	switch {
	case e.Status != 0:
		return fmt.Sprintf("client: http %d %s: %s", e.Status, e.Code, e.Message)
	case e.CorrelationID != "":
		return fmt.Sprintf("client: send %s: %s: %s", e.CorrelationID, e.Code, e.Message)
	default:
		return fmt.Sprintf("client: %s: %s", e.Code, e.Message)
	}
}

// CodeOf returns the contract code of the *Error in err's chain, or "" when
// there is none (a network error, a context error, ErrClosed...).
func CodeOf(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

func localError(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Local: true}
}
