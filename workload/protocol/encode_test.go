package protocol

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"
)

// filled returns a frame of type T with every field set, so a field added
// to the struct that the hand-written encoder does not write shows up as a
// difference from encoding/json.
func filled[T any](t *testing.T, s string, at time.Time) T {
	var v T
	rv := reflect.ValueOf(&v).Elem()
	for i := range rv.NumField() {
		f := rv.Field(i)
		switch {
		case f.Kind() == reflect.String:
			f.SetString(s + "-" + rv.Type().Field(i).Name)
		case f.Type() == reflect.TypeOf(time.Time{}):
			f.Set(reflect.ValueOf(at))
		case f.Type() == reflect.TypeOf([]string{}):
			f.Set(reflect.ValueOf([]string{s, s + "2"}))
		case f.Type() == reflect.TypeOf(&time.Time{}):
			f.Set(reflect.ValueOf(&at))
		case f.Kind() == reflect.Bool:
			f.SetBool(true)
		default:
			t.Fatalf("%T.%s: a field of kind %s the test does not fill: teach encode.go and this test about it", v, rv.Type().Field(i).Name, f.Kind())
		}
	}
	return v
}

func sameAsJSON(t *testing.T, frame any) {
	t.Helper()
	want, err := json.Marshal(frame)
	if err != nil {
		t.Fatal(err)
	}
	if got := Encode(frame); !bytes.Equal(got, want) {
		t.Fatalf("Encode(%T):\n got %s\nwant %s", frame, got, want)
	}
}

var encodeStrings = []string{
	"", "hello", `{"id":"x","pad":"yy"}`, "<script>&amp;</script>", "tab\tnl\ncr\rbs\bff\f\x00\x01\x1f\x7f",
	"é日本\U0001F600", "\u2028\u2029", "bad \xff\xfe utf8 \xc3", `back\slash "quote"`,
}

// The hand-written frames are byte for byte what encoding/json writes,
// for every field of each struct.
func TestEncodeAgreesWithJSON(t *testing.T) {
	times := []time.Time{
		time.Date(2026, 12, 2, 1, 2, 3, 0, time.UTC),
		time.Date(2026, 12, 2, 1, 2, 3, 456789000, time.UTC),
		time.Date(2026, 12, 2, 1, 2, 3, 1, time.FixedZone("x", 3600)),
		{},
	}
	for _, s := range encodeStrings {
		for _, at := range times {
			sameAsJSON(t, filled[Message](t, s, at))
			m := filled[Message](t, s, at)
			m.Type = "" // omitempty
			sameAsJSON(t, m)
			sameAsJSON(t, &m)
			sameAsJSON(t, filled[Accepted](t, s, at))
			sameAsJSON(t, filled[Send](t, s, at))
			sameAsJSON(t, filled[Ack](t, s, at))
		}
	}
	sameAsJSON(t, Ack{Type: TypeAck})
}

func FuzzEncodeAgreesWithJSON(f *testing.F) {
	for _, s := range encodeStrings {
		f.Add(s, int64(1733100000123456789))
	}
	f.Fuzz(func(t *testing.T, s string, ns int64) {
		at := time.Unix(0, ns).UTC()
		sameAsJSON(t, Message{Type: TypeMessage, MessageID: s, CorrelationID: s, ChatID: s, SenderID: s, Body: s, SentAt: at})
		sameAsJSON(t, Message{Type: TypeMessage, MessageID: s, ChatID: s, Body: s, SentAt: at, Edits: s})
		sameAsJSON(t, Message{MessageID: s, Deletes: s, EditedAt: &at, Deleted: true})
		sameAsJSON(t, Send{Type: TypeSend, ChatID: s, CorrelationID: s, Body: s, Edits: s})
		sameAsJSON(t, Accepted{Type: TypeAccepted, CorrelationID: s, MessageID: s, ChatID: s, SentAt: at})
		sameAsJSON(t, Send{Type: TypeSend, ChatID: s, CorrelationID: s, Body: s})
		sameAsJSON(t, Ack{Type: TypeAck, MessageIDs: []string{s, s}})
	})
}

func BenchmarkEncodeMessageJSON(b *testing.B) {
	m := Message{Type: TypeMessage, MessageID: "01M8P9XTTE1RN63NE9BG3K7S55", CorrelationID: "k-123456",
		ChatID: "c_01M8P9XTTE1RN63NE9BG3K7S55", SenderID: "alice", Body: "hello there, how are you doing today?",
		SentAt: time.Date(2026, 12, 2, 1, 2, 3, 456789000, time.UTC)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := json.Marshal(m); err != nil {
			b.Fatal(err)
		}
	}
}
