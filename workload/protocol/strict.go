package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"unicode/utf8"
)

// The frame rules encoding/json does not keep by itself (issue 13, point 7;
// docs/PROTOCOL.md, "Additions"). encoding/json matches keys in any letter
// case ("Body", "TYPE", even "meſſageId" with U+017F), lets a later
// duplicate key win, and turns invalid UTF-8 and unpaired UTF-16
// surrogate escapes into U+FFFD, so two different correlationIds
// ("k\ud800", "k\udbff") would decode to one key. checkFrame refuses all
// of these before anything is decoded.

// frameKeys are the keys of every client frame (PROTOCOL.md §3), exactly
// as they must be written.
var frameKeys = []string{"type", "chatId", "correlationId", "body", "messageIds", "messageId", "token", "userId", "edits"}

// strictError is a frame that breaks one of the rules; key names the key
// it concerns ("" when none), so the caller can tell whether the frame's
// correlationId is still worth naming in the answer.
type strictError struct {
	key string
	msg string
}

// checkFrame applies the rules to data, which json.Valid accepted: the
// whole frame is valid UTF-8; the top-level object has no key twice (as
// decoded, so "b\u006fdy" is "body") and no key that differs from a
// frameKeys entry only in letter case (strings.EqualFold, the Unicode
// simple folding encoding/json also applies); no string anywhere in the
// frame, key or value, holds an unpaired surrogate escape. Unknown keys
// are allowed (and ignored by the decoder). It returns nil when the frame
// keeps every rule.
func checkFrame(data []byte) *strictError {
	// Invalid UTF-8 is named by the key whose value holds it, so a send
	// whose body is broken is still answered with its correlationId; in a
	// key, or outside any value, it is the frame's.
	badUTF8 := !utf8.Valid(data)
	frameBad := &strictError{msg: "frame is not valid UTF-8"}
	s := scanner{data: data}
	s.space()
	if !s.eat('{') {
		if badUTF8 {
			return frameBad
		}
		return nil // not an object: the caller refuses it
	}
	var buf [8][]byte // frames have a handful of keys: no allocation
	seen := buf[:0]
	for {
		s.space()
		if s.eat('}') {
			if badUTF8 {
				return frameBad
			}
			return nil
		}
		raw, ok := s.str()
		if !ok {
			return &strictError{msg: "frame holds an unpaired UTF-16 surrogate escape (\\ud800-\\udfff) in a key"}
		}
		if badUTF8 && !utf8.Valid(raw) {
			return frameBad
		}
		key := unquote(raw)
		for _, k := range seen {
			if bytes.Equal(k, key) {
				return &strictError{key: string(key), msg: fmt.Sprintf("key %.40q appears twice", key)}
			}
		}
		seen = append(seen, key)
		for _, k := range frameKeys {
			if string(key) != k && bytes.EqualFold(key, []byte(k)) {
				return &strictError{key: string(key), msg: fmt.Sprintf("key %.40q: keys are case-sensitive, write %q", key, k)}
			}
		}
		s.space()
		s.eat(':')
		s.space()
		start := s.i
		if !s.value() {
			return &strictError{key: string(key), msg: fmt.Sprintf("%s holds an unpaired UTF-16 surrogate escape (\\ud800-\\udfff), which is no text", key)}
		}
		if badUTF8 && !utf8.Valid(s.data[start:s.i]) {
			return &strictError{key: string(key), msg: fmt.Sprintf("%s is not valid UTF-8", key)}
		}
		s.space()
		s.eat(',')
	}
}

// unquote decodes a JSON string literal (quotes included) that the
// scanner accepted; without escapes it is a slice of raw.
func unquote(raw []byte) []byte {
	if bytes.IndexByte(raw, '\\') < 0 {
		return raw[1 : len(raw)-1]
	}
	var v string
	_ = json.Unmarshal(raw, &v) // valid: the frame passed json.Valid
	return []byte(v)
}

// scanner walks a frame that json.Valid accepted; it only needs to find
// where things end, and never reads past the data.
type scanner struct {
	data []byte
	i    int
}

func (s *scanner) space() {
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case ' ', '\t', '\r', '\n':
			s.i++
		default:
			return
		}
	}
}

func (s *scanner) eat(c byte) bool {
	if s.i < len(s.data) && s.data[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str reads the string literal at s.i and returns it with its quotes;
// ok is false when it holds an unpaired surrogate escape.
func (s *scanner) str() (raw []byte, ok bool) {
	start := s.i
	s.i++ // the opening quote
	ok = true
	for s.i < len(s.data) {
		switch s.data[s.i] {
		case '"':
			s.i++
			return s.data[start:s.i], ok
		case '\\':
			if s.i+1 < len(s.data) && s.data[s.i+1] == 'u' {
				cu, n := s.codeUnit(s.i)
				s.i += n
				switch {
				case cu >= 0xD800 && cu <= 0xDBFF:
					// A high surrogate must be followed by a low one.
					if lo, m := s.codeUnit(s.i); m > 0 && lo >= 0xDC00 && lo <= 0xDFFF {
						s.i += m
					} else {
						ok = false
					}
				case cu >= 0xDC00 && cu <= 0xDFFF:
					ok = false // a low surrogate alone
				}
				continue
			}
			s.i += 2
		default:
			s.i++
		}
	}
	return s.data[start:], ok
}

// codeUnit reads a \uXXXX escape at i: its code unit and its length (6),
// or (0, 0) when there is none.
func (s *scanner) codeUnit(i int) (rune, int) {
	if i+6 > len(s.data) || s.data[i] != '\\' || s.data[i+1] != 'u' {
		return 0, 0
	}
	var cu rune
	for _, c := range s.data[i+2 : i+6] {
		switch {
		case c >= '0' && c <= '9':
			cu = cu<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			cu = cu<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			cu = cu<<4 | rune(c-'A'+10)
		default:
			return 0, 0
		}
	}
	return cu, 6
}

// value skips the value at s.i (nested ones included) and reports false
// when a string in it holds an unpaired surrogate escape.
func (s *scanner) value() bool {
	if s.i >= len(s.data) {
		return true
	}
	switch s.data[s.i] {
	case '"':
		_, ok := s.str()
		return ok
	case '{', '[':
		ok, depth := true, 0
		for s.i < len(s.data) {
			switch s.data[s.i] {
			case '"':
				if _, good := s.str(); !good {
					ok = false
				}
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					s.i++
					return ok
				}
			}
			s.i++
		}
		return ok
	default: // a number, true, false or null
		for s.i < len(s.data) {
			switch s.data[s.i] {
			case ',', '}', ']', ' ', '\t', '\r', '\n':
				return true
			}
			s.i++
		}
		return true
	}
}
