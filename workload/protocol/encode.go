package protocol

import (
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"
)

// Encode marshals a server frame (or a client frame, for the Go client).
// The frames of the hot path (message, accepted, and the client's send
// and ack) are written by hand, byte for byte as encoding/json writes them
// (TestEncodeAgreesWithJSON, FuzzEncodeAgreesWithJSON), without
// reflection; every other frame goes through encoding/json. Frames are
// plain structs with no cycles or channels, so an error is a programming
// error: Encode panics on it.
func Encode(frame any) []byte {
	switch f := frame.(type) {
	case Message:
		return AppendMessage(make([]byte, 0, messageSize(&f)), &f)
	case *Message:
		return AppendMessage(make([]byte, 0, messageSize(f)), f)
	case Accepted:
		return appendAccepted(make([]byte, 0, 112+len(f.CorrelationID)+len(f.MessageID)+len(f.ChatID)), &f)
	case Send:
		return appendSend(make([]byte, 0, 96+len(f.Body)), &f)
	case Ack:
		return appendAck(make([]byte, 0, 32+30*len(f.MessageIDs)), &f)
	}
	b, err := json.Marshal(frame)
	if err != nil {
		panic(fmt.Sprintf("protocol: encode %T: %v", frame, err))
	}
	return b
}

// messageSize is the length of m's frame when nothing in it needs an
// escape: the keys, the quotes and a time of up to 35 bytes.
func messageSize(m *Message) int {
	return 128 + len(m.Type) + len(m.MessageID) + len(m.CorrelationID) + len(m.ChatID) + len(m.SenderID) + len(m.Body) +
		len(m.Edits) + len(m.Deletes)
}

// AppendMessage appends m as encoding/json marshals it to dst.
func AppendMessage(dst []byte, m *Message) []byte {
	dst = append(dst, '{')
	if m.Type != "" {
		dst = append(dst, `"type":`...)
		dst = appendString(dst, m.Type)
		dst = append(dst, ',')
	}
	dst = append(dst, `"messageId":`...)
	dst = appendString(dst, m.MessageID)
	dst = append(dst, `,"correlationId":`...)
	dst = appendString(dst, m.CorrelationID)
	dst = append(dst, `,"chatId":`...)
	dst = appendString(dst, m.ChatID)
	dst = append(dst, `,"senderId":`...)
	dst = appendString(dst, m.SenderID)
	dst = append(dst, `,"body":`...)
	dst = appendString(dst, m.Body)
	dst = append(dst, `,"sentAt":`...)
	dst = appendTime(dst, m.SentAt)
	if m.Edits != "" || m.Deletes != "" || m.EditedAt != nil || m.Deleted {
		dst = appendMessageChange(dst, m) // PROTOCOL.md §7.3
	}
	return append(dst, '}')
}

// appendMessageChange writes m's edit and delete fields, as encoding/json
// does with their omitempty tags.
func appendMessageChange(dst []byte, m *Message) []byte {
	if m.Edits != "" {
		dst = append(dst, `,"edits":`...)
		dst = appendString(dst, m.Edits)
	}
	if m.Deletes != "" {
		dst = append(dst, `,"deletes":`...)
		dst = appendString(dst, m.Deletes)
	}
	if m.EditedAt != nil {
		dst = append(dst, `,"editedAt":`...)
		dst = appendTime(dst, *m.EditedAt)
	}
	if m.Deleted {
		dst = append(dst, `,"deleted":true`...)
	}
	return dst
}

func appendAccepted(dst []byte, a *Accepted) []byte {
	dst = append(dst, `{"type":`...)
	dst = appendString(dst, a.Type)
	dst = append(dst, `,"correlationId":`...)
	dst = appendString(dst, a.CorrelationID)
	dst = append(dst, `,"messageId":`...)
	dst = appendString(dst, a.MessageID)
	dst = append(dst, `,"chatId":`...)
	dst = appendString(dst, a.ChatID)
	dst = append(dst, `,"sentAt":`...)
	dst = appendTime(dst, a.SentAt)
	return append(dst, '}')
}

func appendSend(dst []byte, s *Send) []byte {
	dst = append(dst, `{"type":`...)
	dst = appendString(dst, s.Type)
	dst = append(dst, `,"chatId":`...)
	dst = appendString(dst, s.ChatID)
	dst = append(dst, `,"correlationId":`...)
	dst = appendString(dst, s.CorrelationID)
	dst = append(dst, `,"body":`...)
	dst = appendString(dst, s.Body)
	if s.Edits != "" {
		dst = append(dst, `,"edits":`...)
		dst = appendString(dst, s.Edits)
	}
	return append(dst, '}')
}

func appendAck(dst []byte, a *Ack) []byte {
	dst = append(dst, `{"type":`...)
	dst = appendString(dst, a.Type)
	dst = append(dst, `,"messageIds":`...)
	if a.MessageIDs == nil {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, '[')
		for i, id := range a.MessageIDs {
			if i > 0 {
				dst = append(dst, ',')
			}
			dst = appendString(dst, id)
		}
		dst = append(dst, ']')
	}
	return append(dst, '}')
}

// appendTime writes t as time.Time's MarshalJSON does (RFC 3339 with
// nanoseconds, trailing zeros cut). A year outside 0-9999, which
// MarshalJSON refuses, goes through it to panic alike.
func appendTime(dst []byte, t time.Time) []byte {
	if y := t.Year(); y < 0 || y > 9999 {
		b, err := t.MarshalJSON()
		if err != nil {
			panic(fmt.Sprintf("protocol: encode time: %v", err))
		}
		return append(dst, b...)
	}
	dst = append(dst, '"')
	dst = t.AppendFormat(dst, time.RFC3339Nano)
	return append(dst, '"')
}

const hexDigits = "0123456789abcdef"

// appendString writes s as a JSON string exactly as encoding/json does:
// HTML-safe (<, > and & escaped), \b \f \n \r \t as such, other control
// characters as \u00XX, invalid UTF-8 as \ufffd, U+2028 and U+2029
// escaped.
func appendString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	start := 0
	for i := 0; i < len(s); {
		if b := s[i]; b < utf8.RuneSelf {
			if b >= 0x20 && b != '"' && b != '\\' && b != '<' && b != '>' && b != '&' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch b {
			case '\\', '"':
				dst = append(dst, '\\', b)
			case '\b':
				dst = append(dst, '\\', 'b')
			case '\f':
				dst = append(dst, '\\', 'f')
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[b>>4], hexDigits[b&0xF])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xF])
			i += size
			start = i
			continue
		}
		i += size
	}
	dst = append(dst, s[start:]...)
	return append(dst, '"')
}
