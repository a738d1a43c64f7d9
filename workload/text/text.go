package text

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// ErrInvalid is wrapped by every error of this package.
var ErrInvalid = errors.New("invalid text")

// MaxUserBytes is the longest user id accepted, in bytes (UTF-8).
const MaxUserBytes = 128

// Valid reports whether s may be stored and forwarded: valid UTF-8 without
// U+0000 (PROTOCOL.md §3). The empty string is valid.
func Valid(s string) bool {
	return utf8.ValidString(s) && strings.IndexByte(s, 0) < 0
}

// Check returns nil when s is Valid, else an error wrapping ErrInvalid that
// names the field (what, for example "body").
func Check(what, s string) error {
	switch {
	case !utf8.ValidString(s):
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalid, what)
	case strings.IndexByte(s, 0) >= 0:
		return fmt.Errorf("%w: %s contains U+0000", ErrInvalid, what)
	}
	return nil
}

// ID checks an identifier (chat id, message id, correlation id): 1..max
// bytes of Valid text. what names the field in the error, which wraps
// ErrInvalid.
func ID(what, s string, max int) error {
	switch {
	case s == "":
		return fmt.Errorf("%w: %s is required", ErrInvalid, what)
	case len(s) > max:
		return fmt.Errorf("%w: %s is longer than %d bytes", ErrInvalid, what, max)
	}
	return Check(what, s)
}

// User checks a user id (a token's sub, a member in a request, a sender):
// 1..MaxUserBytes bytes of valid UTF-8 without any control character (C0,
// DEL, C1; unicode.IsControl), so without U+0000 either. what names the
// field in the error ("user id", "member id", ...), which wraps ErrInvalid.
func User(what, id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: %s is empty", ErrInvalid, what)
	case len(id) > MaxUserBytes:
		return fmt.Errorf("%w: %s is longer than %d bytes", ErrInvalid, what, MaxUserBytes)
	case !utf8.ValidString(id):
		return fmt.Errorf("%w: %s is not valid UTF-8", ErrInvalid, what)
	case strings.ContainsFunc(id, unicode.IsControl):
		return fmt.Errorf("%w: %s contains a control character", ErrInvalid, what)
	}
	return nil
}
