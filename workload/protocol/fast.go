package protocol

import (
	"encoding/json"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"
)

// The hot path's two frames, send and ack, are decoded here in one pass
// over the bytes, without reflection (issue 22: the general path makes
// five passes, two of them encoding/json's, and was about a third of the
// WebSocket reader's CPU). decodeFast takes only the plainest well-formed
// frames: a JSON object of the frame's own keys (exactly as PROTOCOL.md §3
// writes them, each once), string values, an ack's array of strings. For
// anything else (another frame type, an unknown key, a repeated one, a
// value of another type, invalid UTF-8, an unpaired surrogate escape, a
// value the rules refuse, bytes after the object) it reports false and
// DecodeClient decodes the frame on the general path, which gives every
// answer. So a frame decodeFast takes decodes exactly as the general path
// decodes it (FuzzDecodeFastAgrees checks that), and a frame it refuses
// is answered by the general path word for word.

// decodeFast decodes data when it is a well-formed send or ack that keeps
// every rule of DecodeClient with the body limit maxBody; ok is false
// otherwise, and f is then empty.
func decodeFast(data []byte, maxBody int) (f ClientFrame, ok bool) {
	d := fastDecoder{data: data}
	d.space()
	if !d.eat('{') {
		return f, false
	}
	var typ, chatID, corr, body string
	var ids []string
	var seen uint8 // one bit per key below
	const (
		kType = 1 << iota
		kChat
		kCorr
		kBody
		kIDs
	)
	d.space()
	if d.eat('}') {
		return f, false // no type: the general path says so
	}
	for {
		d.space()
		key, ok := d.rawKey()
		if !ok {
			return f, false
		}
		d.space()
		if !d.eat(':') {
			return f, false
		}
		d.space()
		var bit uint8
		switch key {
		case "type":
			bit = kType
			typ, ok = d.str()
		case "chatId":
			bit = kChat
			chatID, ok = d.str()
		case "correlationId":
			bit = kCorr
			corr, ok = d.str()
		case "body":
			bit = kBody
			body, ok = d.str()
		case "messageIds":
			bit = kIDs
			ids, ok = d.strs()
		default:
			return f, false // an unknown key, or one in another letter case
		}
		if !ok || seen&bit != 0 {
			return f, false
		}
		seen |= bit
		d.space()
		if d.eat(',') {
			continue
		}
		if !d.eat('}') {
			return f, false
		}
		break
	}
	d.space()
	if d.i != len(d.data) {
		return f, false
	}
	switch typ {
	case TypeSend:
		if seen&kIDs != 0 || !validID(corr) || !validID(chatID) || body == "" ||
			(maxBody > 0 && len(body) > maxBody) || !validText(body) || strings.TrimSpace(body) == "" {
			return f, false
		}
		f.Send = &Send{Type: TypeSend, ChatID: chatID, CorrelationID: corr, Body: body}
	case TypeAck:
		if seen&(kChat|kCorr|kBody) != 0 || len(ids) == 0 || len(ids) > MaxAckIDs {
			return f, false
		}
		for _, id := range ids {
			if !validID(id) {
				return f, false
			}
		}
		f.Ack = &Ack{Type: TypeAck, MessageIDs: ids}
	default:
		return f, false
	}
	return f, true
}

// validText is text.Valid for a string decodeFast built: valid UTF-8 it
// has checked already, so only U+0000 is left to look for.
func validText(s string) bool { return strings.IndexByte(s, 0) < 0 }

// fastDecoder walks one frame; it never reads past data.
type fastDecoder struct {
	data []byte
	i    int
}

func (d *fastDecoder) space() {
	for d.i < len(d.data) {
		switch d.data[d.i] {
		case ' ', '\t', '\r', '\n':
			d.i++
		default:
			return
		}
	}
}

func (d *fastDecoder) eat(c byte) bool {
	if d.i < len(d.data) && d.data[d.i] == c {
		d.i++
		return true
	}
	return false
}

// rawKey reads a key without escapes; a key with one goes to the general
// path (it may spell a frame key in escapes: "b\u006fdy").
func (d *fastDecoder) rawKey() (string, bool) {
	if !d.eat('"') {
		return "", false
	}
	start := d.i
	for d.i < len(d.data) {
		c := d.data[d.i]
		switch {
		case c == '"':
			k := d.data[start:d.i]
			d.i++
			// The switch on string(k) does not allocate.
			switch string(k) {
			case "type":
				return "type", true
			case "chatId":
				return "chatId", true
			case "correlationId":
				return "correlationId", true
			case "body":
				return "body", true
			case "messageIds":
				return "messageIds", true
			}
			return "", false
		case c == '\\' || c < 0x20 || c >= utf8.RuneSelf:
			return "", false
		}
		d.i++
	}
	return "", false
}

// str reads a JSON string as encoding/json decodes it, or reports false
// when it is no string, holds invalid UTF-8, a control character, an
// unknown escape or an unpaired surrogate escape.
func (d *fastDecoder) str() (string, bool) {
	if !d.eat('"') {
		return "", false
	}
	start := d.i
	// Without escapes the value is the bytes between the quotes.
	for d.i < len(d.data) {
		c := d.data[d.i]
		switch {
		case c == '"':
			s := d.data[start:d.i]
			d.i++
			return string(s), true
		case c == '\\':
			return d.escaped(start)
		case c < 0x20:
			return "", false
		case c < utf8.RuneSelf:
			d.i++
		default:
			r, n := utf8.DecodeRune(d.data[d.i:])
			if r == utf8.RuneError && n == 1 {
				return "", false
			}
			d.i += n
		}
	}
	return "", false
}

// escaped finishes a string that holds an escape at d.i, copying from
// start.
func (d *fastDecoder) escaped(start int) (string, bool) {
	out := make([]byte, 0, len(d.data)-start)
	out = append(out, d.data[start:d.i]...)
	for d.i < len(d.data) {
		c := d.data[d.i]
		switch {
		case c == '"':
			d.i++
			return string(out), true
		case c == '\\':
			if d.i+1 >= len(d.data) {
				return "", false
			}
			e := d.data[d.i+1]
			d.i += 2
			switch e {
			case '"', '\\', '/':
				out = append(out, e)
			case 'b':
				out = append(out, '\b')
			case 'f':
				out = append(out, '\f')
			case 'n':
				out = append(out, '\n')
			case 'r':
				out = append(out, '\r')
			case 't':
				out = append(out, '\t')
			case 'u':
				r, ok := d.hex4()
				if !ok {
					return "", false
				}
				if utf16.IsSurrogate(r) {
					if r >= 0xDC00 || d.i+1 >= len(d.data) || d.data[d.i] != '\\' || d.data[d.i+1] != 'u' {
						return "", false // unpaired
					}
					d.i += 2
					lo, ok := d.hex4()
					if !ok || lo < 0xDC00 || lo > 0xDFFF {
						return "", false
					}
					r = utf16.DecodeRune(r, lo)
				}
				out = utf8.AppendRune(out, r)
			default:
				return "", false
			}
		case c < 0x20:
			return "", false
		case c < utf8.RuneSelf:
			out = append(out, c)
			d.i++
		default:
			r, n := utf8.DecodeRune(d.data[d.i:])
			if r == utf8.RuneError && n == 1 {
				return "", false
			}
			out = append(out, d.data[d.i:d.i+n]...)
			d.i += n
		}
	}
	return "", false
}

// hex4 reads the four hex digits of a \u escape.
func (d *fastDecoder) hex4() (rune, bool) {
	if d.i+4 > len(d.data) {
		return 0, false
	}
	var r rune
	for _, c := range d.data[d.i : d.i+4] {
		switch {
		case c >= '0' && c <= '9':
			r = r<<4 | rune(c-'0')
		case c >= 'a' && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case c >= 'A' && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	d.i += 4
	return r, true
}

// strs reads a JSON array of strings.
func (d *fastDecoder) strs() ([]string, bool) {
	if !d.eat('[') {
		return nil, false
	}
	var out []string
	d.space()
	if d.eat(']') {
		return out, true
	}
	for {
		d.space()
		s, ok := d.str()
		if !ok {
			return nil, false
		}
		out = append(out, s)
		d.space()
		if d.eat(',') {
			continue
		}
		if d.eat(']') {
			return out, true
		}
		return nil, false
	}
}

// DecodeMessage decodes a message frame (or a history entry) as
// json.Unmarshal into a Message does. The frames the server writes
// (AppendMessage) take a one-pass path without reflection; anything else
// (an edit's or delete's fields, another key, escapes in a key, any
// error) goes to json.Unmarshal, whose answer it is. For the Go client and
// the load generator, which read one of these per delivery.
func DecodeMessage(data []byte) (Message, error) {
	if m, ok := decodeMessageFast(data); ok {
		return m, nil
	}
	var m Message
	err := json.Unmarshal(data, &m)
	return m, err
}

// DecodeAccepted is DecodeMessage for accepted frames.
func DecodeAccepted(data []byte) (Accepted, error) {
	if a, ok := decodeAcceptedFast(data); ok {
		return a, nil
	}
	var a Accepted
	err := json.Unmarshal(data, &a)
	return a, err
}

// serverFields decodes a flat object of string values whose keys are all
// in keys (each at most once) into vals (by index), with "sentAt"
// decoded by time.Time's own UnmarshalJSON. ok is false for anything
// else.
func serverFields(data []byte, keys []string, vals []string, at *time.Time) bool {
	d := fastDecoder{data: data}
	d.space()
	if !d.eat('{') {
		return false
	}
	var seen uint32
	d.space()
	if d.eat('}') {
		return false
	}
	for {
		d.space()
		if !d.eat('"') {
			return false
		}
		start := d.i
		for d.i < len(d.data) && d.data[d.i] != '"' && d.data[d.i] != '\\' {
			d.i++
		}
		if d.i >= len(d.data) || d.data[d.i] != '"' {
			return false
		}
		key := d.data[start:d.i]
		d.i++
		k := -1
		for i, want := range keys {
			if string(key) == want {
				k = i
				break
			}
		}
		if k < 0 || seen&(1<<k) != 0 {
			return false
		}
		seen |= 1 << k
		d.space()
		if !d.eat(':') {
			return false
		}
		d.space()
		if keys[k] == "sentAt" {
			vstart := d.i
			if _, ok := d.str(); !ok {
				return false
			}
			if at.UnmarshalJSON(d.data[vstart:d.i]) != nil {
				return false
			}
		} else {
			v, ok := d.str()
			if !ok {
				return false
			}
			vals[k] = v
		}
		d.space()
		if d.eat(',') {
			continue
		}
		if !d.eat('}') {
			return false
		}
		break
	}
	d.space()
	return d.i == len(d.data)
}

var messageKeys = []string{"type", "messageId", "correlationId", "chatId", "senderId", "body", "sentAt"}

func decodeMessageFast(data []byte) (Message, bool) {
	var v [7]string
	var m Message
	if !serverFields(data, messageKeys, v[:], &m.SentAt) {
		return Message{}, false
	}
	m.Type, m.MessageID, m.CorrelationID, m.ChatID, m.SenderID, m.Body = v[0], v[1], v[2], v[3], v[4], v[5]
	return m, true
}

var acceptedKeys = []string{"type", "correlationId", "messageId", "chatId", "sentAt"}

func decodeAcceptedFast(data []byte) (Accepted, bool) {
	var v [5]string
	var a Accepted
	if !serverFields(data, acceptedKeys, v[:], &a.SentAt) {
		return Accepted{}, false
	}
	a.Type, a.CorrelationID, a.MessageID, a.ChatID = v[0], v[1], v[2], v[3]
	return a, true
}
