package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
)

// CheckBody applies the frame rules to an HTTP request body (PROTOCOL.md
// §7.7: bodies are decoded like frames), more strictly than checkFrame:
// data must be one JSON object whose top-level keys are all in keys,
// each written exactly so and at most once (as decoded, so "b\u006fdy" is
// "body"), and no string anywhere in it, key or value, may hold an
// unpaired UTF-16 surrogate escape. It returns nil, or an *Error of
// CodeInvalid whose message names the key: unknown ("unknown key
// \"user\" ..."), in another letter case, repeated, or holding a lone
// surrogate. Invalid UTF-8 is the caller's to refuse first.
func CheckBody(data []byte, keys []string) error {
	if !json.Valid(data) {
		return Errorf(CodeInvalid, "request body is not valid JSON")
	}
	s := scanner{data: data}
	s.space()
	if !s.eat('{') {
		return Errorf(CodeInvalid, "request body must be a JSON object")
	}
	var seen [][]byte
	for {
		s.space()
		if s.eat('}') {
			return nil
		}
		raw, ok := s.str()
		if !ok {
			return Errorf(CodeInvalid, "a key holds an unpaired UTF-16 surrogate escape (\\ud800-\\udfff)")
		}
		key := unquote(raw)
		for _, k := range seen {
			if bytes.Equal(k, key) {
				return Errorf(CodeInvalid, "key %.40q appears twice", key)
			}
		}
		seen = append(seen, key)
		known := false
		for _, k := range keys {
			if string(key) == k {
				known = true
				break
			}
		}
		if !known {
			for _, k := range keys {
				if bytes.EqualFold(key, []byte(k)) {
					return Errorf(CodeInvalid, "key %.40q: keys are case-sensitive, write %q", key, k)
				}
			}
			return Errorf(CodeInvalid, "unknown key %.40q; this call takes %s", key, quoteAll(keys))
		}
		s.space()
		s.eat(':')
		s.space()
		if !s.value() {
			return Errorf(CodeInvalid, "%s holds an unpaired UTF-16 surrogate escape (\\ud800-\\udfff), which is no text", key)
		}
		s.space()
		s.eat(',')
	}
}

// quoteAll lists keys as "a", "b" and "c".
func quoteAll(keys []string) string {
	if len(keys) == 0 {
		return "no keys"
	}
	q := make([]string, len(keys))
	for i, k := range keys {
		q[i] = fmt.Sprintf("%q", k)
	}
	if len(q) == 1 {
		return q[0]
	}
	return strings.Join(q[:len(q)-1], ", ") + " and " + q[len(q)-1]
}
