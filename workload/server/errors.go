package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/protocol"
	"github.com/tetra-messenger/tetra/workload/text"
)

// codeOf maps a store error to the contract's error code (PROTOCOL.md §3).
func codeOf(err error) string {
	switch {
	case errors.Is(err, history.ErrNotFound):
		return protocol.CodeNotFound
	case errors.Is(err, history.ErrNotMember), errors.Is(err, history.ErrForbidden):
		return protocol.CodeForbidden
	case errors.Is(err, history.ErrInvalid):
		return protocol.CodeInvalid
	case errors.Is(err, history.ErrUnavailable):
		return protocol.CodeOverloaded
	}
	return protocol.CodeOf(err)
}

// sentinelPrefixes are the "package: sentinel: " heads that wrapping adds
// to store and rule errors; clients get the rest (which says what was
// wrong) and the code.
var sentinelPrefixes = []string{
	history.ErrInvalid.Error() + ": ", history.ErrNotFound.Error() + ": ",
	history.ErrNotMember.Error() + ": ", history.ErrForbidden.Error() + ": ", text.ErrInvalid.Error() + ": ",
}

// clientMessage is err's text for a client, in its terms: "not a member of
// this chat" and "no such chat" for ErrNotMember and ErrNotFound (the store
// names the user and chat the client sent), else the text without the
// sentinel prefixes wherever wrapping put them (the code already says it),
// so "history: invalid: invalid text: body contains U+0000" reads "body
// contains U+0000" (issue 13, point 7).
func clientMessage(err error) string {
	switch {
	case errors.Is(err, history.ErrNotMember):
		return "not a member of this chat"
	case errors.Is(err, history.ErrDeleted):
		return "the message was deleted"
	case errors.Is(err, history.ErrNoMessage):
		return "no such message in this chat"
	case errors.Is(err, history.ErrNotFound):
		return "no such chat"
	}
	msg := err.Error()
	for _, p := range sentinelPrefixes {
		msg = strings.ReplaceAll(msg, p, "")
	}
	return msg
}

// statusOf maps a contract code to the HTTP status of PROTOCOL.md §2.
func statusOf(code string) int {
	switch code {
	case protocol.CodeInvalid:
		return http.StatusBadRequest
	case protocol.CodeTooLarge:
		return http.StatusRequestEntityTooLarge
	case codeMethodNotAllowed:
		return http.StatusMethodNotAllowed
	case protocol.CodeUnauthorized:
		return http.StatusUnauthorized
	case protocol.CodeForbidden:
		return http.StatusForbidden
	case protocol.CodeNotFound:
		return http.StatusNotFound
	case protocol.CodeRateLimited:
		return http.StatusTooManyRequests
	case protocol.CodeOverloaded, protocol.CodeUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusBadRequest
}

type errorBody struct {
	Error struct {
		Code    string `json:"code"`
		Message string `json:"message"`
		// RetryAfterMs: on rate_limited, how long to wait (PROTOCOL.md §7.7).
		RetryAfterMs int64 `json:"retryAfterMs,omitempty"`
	} `json:"error"`
}

// writeError answers {"error":{"code","message"}} with code's status.
// Every 401 carries WWW-Authenticate: Bearer (PROTOCOL.md §7.7, RFC 6750).
func writeError(w http.ResponseWriter, code, msg string) {
	writeErrorRetry(w, code, msg, 0)
}

// writeErrorRetry is writeError with retryAfterMs (and, when it is set, a
// Retry-After header in whole seconds, rounded up).
func writeErrorRetry(w http.ResponseWriter, code, msg string, retryAfterMs int64) {
	var b errorBody
	b.Error.Code, b.Error.Message, b.Error.RetryAfterMs = code, msg, retryAfterMs
	if code == protocol.CodeUnauthorized {
		w.Header().Set("WWW-Authenticate", "Bearer")
	}
	if retryAfterMs > 0 {
		w.Header().Set("Retry-After", strconv.FormatInt((retryAfterMs+999)/1000, 10))
	}
	writeJSON(w, statusOf(code), b)
}

// writeStoreError answers a store error; unexpected failures say
// "unavailable" (503) without leaking internals, and are logged at WARN
// with the request's method and path and the store's error, at most every
// slogx.Interval with a count (the 503 is otherwise their only trace).
func (s *Server) writeStoreError(w http.ResponseWriter, r *http.Request, err error) {
	code := codeOf(err)
	msg := clientMessage(err)
	if code == protocol.CodeOverloaded || errors.Is(err, history.ErrUnavailable) {
		code, msg = protocol.CodeUnavailable, "the store is unavailable; retry later"
		s.warnStore.Warn(s.log, "HTTP request answered 503: the store failed", "method", r.Method, "path", r.URL.Path, "err", err)
	}
	writeError(w, code, msg)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}
