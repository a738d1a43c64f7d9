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
//
// A JSON null is refused too, as a key's value ("key \"title\" is null")
// or anywhere inside it ("members holds a null"): every body of the HTTP
// API takes strings, arrays of strings or objects, never null, and
// encoding/json would decode a null as the key's absence (a nil slice,
// an empty string), so `"members":null` or `"title":null` would be taken
// for something the client did not write.
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
		start := s.i
		if !s.value() {
			return Errorf(CodeInvalid, "%s holds an unpaired UTF-16 surrogate escape (\\ud800-\\udfff), which is no text", key)
		}
		switch nullIn(data[start:s.i]) {
		case nullValue:
			return Errorf(CodeInvalid, "key %.40q is null; give it a value or leave the key out", key)
		case nullInside:
			return Errorf(CodeInvalid, "%.40s holds a null, which is no value of it", key)
		}
		s.space()
		s.eat(',')
	}
}

// Where nullIn found a JSON null.
const (
	noNull = iota
	nullValue
	nullInside
)

// nullIn reports whether the JSON value v (valid, as CheckBody checked
// the whole body first) is null or holds a null in an array or object.
func nullIn(v []byte) int {
	v = bytes.TrimSpace(v)
	if string(v) == "null" {
		return nullValue
	}
	if len(v) == 0 || (v[0] != '[' && v[0] != '{') || !bytes.Contains(v, []byte("null")) {
		return noNull // a string, number or boolean; or no null at all
	}
	dec := json.NewDecoder(bytes.NewReader(v))
	for {
		tok, err := dec.Token()
		if err != nil {
			return noNull
		}
		if tok == nil {
			return nullInside
		}
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
