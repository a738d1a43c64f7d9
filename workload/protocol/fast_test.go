package protocol

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// fastFrames are sends and acks the one-pass decoder must take, and
// frames it must leave to the general path (which refuses most of them).
var fastFrames = []struct {
	in   string
	fast bool
}{
	{`{"type":"send","chatId":"c1","correlationId":"k-1","body":"hi"}`, true},
	{` { "body" : "hi" , "type":"send","correlationId":"k-1","chatId":"c1" } ` + "\n", true},
	{`{"type":"send","chatId":"c1","correlationId":"k-1","body":"{\"id\":\"x\",\"pad\":\"\\u00e9\\n\\t\\/\"}"}`, true},
	{`{"type":"send","chatId":"c1","correlationId":"k-1","body":"smile \ud83d\ude00 é 日本"}`, true},
	{`{"type":"s\u0065nd","chatId":"c1","correlationId":"k-1","body":"hi"}`, true},
	{`{"type":"ack","messageIds":["01J","01K"]}`, true},
	{`{"messageIds":[ "01J" ],"type":"ack"}`, true},
	// Left to the general path:
	{`{"type":"send","chatId":"c1","correlationId":"k-1","body":"hi","extra":1}`, false}, // unknown key (accepted there)
	{`{"type":"send","chatId":"c1","correlationId":"k-1","body":"hi","messageIds":[]}`, false},
	{`{"type":"send","chatId":"c1","correlationId":"k-1","Body":"hi"}`, false},
	{`{"type":"send","chatId":"c1","correlationId":"k-1","body":"hi","body":"ho"}`, false},
	{`{"type":"send","chatId":"c1","correlationId":"k-1","b\u006fdy":"hi"}`, false},
	{`{"type":"send","chatId":"c1","correlationId":"k\ud800","body":"hi"}`, false},
	{`{"type":"send","chatId":"c1","correlationId":"k\udc00","body":"hi"}`, false},
	{`{"type":"send","chatId":"c1","correlationId":"k-1","body":"a\u0000"}`, false},
	{`{"type":"send","chatId":"c1","correlationId":"k-1","body":" \n\t "}`, false},
	{`{"type":"send","chatId":"c1","correlationId":"k-1","body":""}`, false},
	{`{"type":"send","chatId":"c1","correlationId":"","body":"hi"}`, false},
	{`{"type":"send","chatId":"c1","correlationId":"k-1","body":"` + strings.Repeat("x", 65) + `"}`, false},
	{`{"type":"send","chatId":"c1","correlationId":"k-1","body":"hi"} x`, false},
	{`{"type":"send","chatId":"c1","correlationId":"k-1","body":"hi"`, false},
	{`{"type":"send","chatId":1,"correlationId":"k-1","body":"hi"}`, false},
	{"{\"type\":\"send\",\"chatId\":\"c1\",\"correlationId\":\"k-1\",\"body\":\"h\xffi\"}", false},
	{"{\"type\":\"send\",\"chatId\":\"c1\",\"correlationId\":\"k-1\",\"body\":\"h\x01i\"}", false},
	{`{"type":"ack","messageIds":[]}`, false},
	{`{"type":"ack","messageIds":null}`, false},
	{`{"type":"ack","messageIds":["01J",""]}`, false},
	{`{"type":"ack","messageIds":["01J"],"chatId":"c"}`, false},
	{`{"type":"ping"}`, false},
	{`{"type":"read","chatId":"c1","messageId":"01J"}`, false},
	{`{}`, false},
}

// The one-pass decoder takes what it should, and what it takes decodes
// exactly as the general path decodes it.
func TestDecodeFastAgreesWithGeneral(t *testing.T) {
	for _, c := range fastFrames {
		f, ok := decodeFast([]byte(c.in), 64)
		if ok != c.fast {
			t.Errorf("decodeFast(%s) ok = %v, want %v", c.in, ok, c.fast)
			continue
		}
		if !ok {
			continue
		}
		g, err := decodeGeneral([]byte(c.in), 64)
		if err != nil {
			t.Errorf("decodeFast took %s, which the general path refuses: %v", c.in, err)
			continue
		}
		if !reflect.DeepEqual(f, g) {
			t.Errorf("%s: fast %+v %+v, general %+v %+v", c.in, f.Send, f.Ack, g.Send, g.Ack)
		}
	}
}

// FuzzDecodeFastAgrees: whatever the input, a frame the one-pass decoder
// takes decodes exactly as on the general path.
func FuzzDecodeFastAgrees(f *testing.F) {
	for _, c := range fastFrames {
		f.Add([]byte(c.in))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fr, ok := decodeFast(data, 64)
		if !ok {
			return
		}
		g, err := decodeGeneral(data, 64)
		if err != nil {
			t.Fatalf("decodeFast took %q, which the general path refuses: %v", data, err)
		}
		if !reflect.DeepEqual(fr, g) {
			t.Fatalf("%q: fast %+v %+v, general %+v %+v", data, fr.Send, fr.Ack, g.Send, g.Ack)
		}
	})
}

// The frame peerbench sends: a JSON document as the body, so escaped quotes.
var benchSend = []byte(`{"type":"send","chatId":"c_01M8P9XTTE1RN63NE9BG3K7S55","correlationId":"pb1a2b3c4d-000017-000000042","body":"{\"id\":\"1a2b3c4d-000017-000000042\",\"ts\":\"1733100000000000000\",\"pad\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\"}"}`)

func BenchmarkDecodeSendGeneral(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeGeneral(benchSend, DefaultMaxBody); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeSendEscaped(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeClient(benchSend, DefaultMaxBody); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeAck(b *testing.B) {
	frame := []byte(`{"type":"ack","messageIds":["01M8P9XTTE1RN63NE9BG3K7S55"]}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeClient(frame, DefaultMaxBody); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeAckGeneral(b *testing.B) {
	frame := []byte(`{"type":"ack","messageIds":["01M8P9XTTE1RN63NE9BG3K7S55"]}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := decodeGeneral(frame, DefaultMaxBody); err != nil {
			b.Fatal(err)
		}
	}
}

// The client's one-pass decoders give what json.Unmarshal gives, on the
// frames the server writes and on anything else.
func TestDecodeMessageAgreesWithJSON(t *testing.T) {
	at := time.Date(2026, 12, 2, 1, 2, 3, 456789000, time.UTC)
	var frames [][]byte
	for _, s := range encodeStrings {
		frames = append(frames,
			Encode(Message{Type: TypeMessage, MessageID: s, CorrelationID: s, ChatID: s, SenderID: s, Body: s, SentAt: at}),
			Encode(Accepted{Type: TypeAccepted, CorrelationID: s, MessageID: s, ChatID: s, SentAt: at}))
	}
	frames = append(frames, []byte(`{"messageId":"m","Body":"x"}`), []byte(`{"messageId":"m","messageId":"n"}`),
		[]byte(`{"messageId":"m","edits":"e","sentAt":"2026-12-02T01:02:03Z"}`), []byte(`{"sentAt":"nope"}`), []byte(`[]`))
	for _, f := range frames {
		checkDecodeMessage(t, f)
	}
	if _, ok := decodeMessageFast(frames[0]); !ok {
		t.Fatalf("a plain message frame took the slow path: %s", frames[0])
	}
	if _, ok := decodeAcceptedFast(frames[1]); !ok {
		t.Fatalf("a plain accepted frame took the slow path: %s", frames[1])
	}
}

func checkDecodeMessage(t *testing.T, f []byte) {
	t.Helper()
	var wm Message
	werr := json.Unmarshal(f, &wm)
	m, err := DecodeMessage(f)
	if (err == nil) != (werr == nil) || !reflect.DeepEqual(m, wm) {
		t.Fatalf("DecodeMessage(%s) = %+v, %v; json: %+v, %v", f, m, err, wm, werr)
	}
	var wa Accepted
	werr = json.Unmarshal(f, &wa)
	a, err := DecodeAccepted(f)
	if (err == nil) != (werr == nil) || !reflect.DeepEqual(a, wa) {
		t.Fatalf("DecodeAccepted(%s) = %+v, %v; json: %+v, %v", f, a, err, wa, werr)
	}
}

func FuzzDecodeMessageAgrees(f *testing.F) {
	f.Add([]byte(`{"type":"message","messageId":"m","correlationId":"k","chatId":"c","senderId":"s","body":"b","sentAt":"2026-12-02T01:02:03.5Z"}`))
	f.Add([]byte(`{"type":"accepted","correlationId":"k","messageId":"m","chatId":"c","sentAt":"2026-12-02T01:02:03Z"}`))
	f.Fuzz(func(t *testing.T, data []byte) { checkDecodeMessage(t, data) })
}
