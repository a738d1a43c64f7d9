package protocol

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestDecodeClient(t *testing.T) {
	big := strings.Repeat("x", 4097)
	cases := []struct {
		name, in string
		code     string // "" = ok
		corr     string
		check    func(t *testing.T, f ClientFrame)
	}{
		{name: "send", in: `{"type":"send","chatId":"c1","correlationId":"k-1","body":"hi"}`,
			check: func(t *testing.T, f ClientFrame) {
				if f.Send == nil || f.Send.Body != "hi" || f.Send.ChatID != "c1" || f.Send.CorrelationID != "k-1" {
					t.Fatalf("send decoded as %+v", f.Send)
				}
			}},
		{name: "ack", in: `{"type":"ack","messageIds":["a","b"]}`, check: func(t *testing.T, f ClientFrame) {
			if f.Ack == nil || len(f.Ack.MessageIDs) != 2 {
				t.Fatalf("ack decoded as %+v", f.Ack)
			}
		}},
		{name: "ping", in: `{"type":"ping"}`, check: func(t *testing.T, f ClientFrame) {
			if f.Ping == nil {
				t.Fatal("ping not decoded")
			}
		}},
		{name: "read ignores a forged userId", in: `{"type":"read","chatId":"c","messageId":"m","userId":"mallory"}`, check: func(t *testing.T, f ClientFrame) {
			if f.Read == nil || f.Read.UserID != "" {
				t.Fatalf("read decoded as %+v", f.Read)
			}
		}},
		// PROTOCOL.md §7.3, §7.4.
		{name: "edit", in: `{"type":"send","chatId":"c1","correlationId":"k-2","body":"fixed","edits":"01J"}`,
			check: func(t *testing.T, f ClientFrame) {
				if f.Send == nil || f.Send.Edits != "01J" || f.Send.Body != "fixed" {
					t.Fatalf("edit decoded as %+v", f.Send)
				}
			}},
		{name: "edit of an over-long id", in: `{"type":"send","chatId":"c","correlationId":"k","body":"x","edits":"` + strings.Repeat("m", 129) + `"}`, code: CodeInvalid, corr: "k"},
		{name: "edit id not a string", in: `{"type":"send","chatId":"c","correlationId":"k","body":"x","edits":5}`, code: CodeInvalid, corr: "k"},
		{name: "edits in another case", in: `{"type":"send","chatId":"c","correlationId":"k","body":"x","Edits":"m"}`, code: CodeInvalid, corr: "k"},
		{name: "edit without body", in: `{"type":"send","chatId":"c","correlationId":"k","edits":"m"}`, code: CodeInvalid, corr: "k"},
		{name: "typing ignores a forged userId", in: `{"type":"typing","chatId":"c1","userId":"mallory"}`, check: func(t *testing.T, f ClientFrame) {
			if f.Typing == nil || f.Typing.ChatID != "c1" || f.Typing.UserID != "" {
				t.Fatalf("typing decoded as %+v", f.Typing)
			}
		}},
		{name: "typing without chatId", in: `{"type":"typing"}`, code: CodeInvalid},
		{name: "typing chatId with NUL", in: `{"type":"typing","chatId":"c\u0000"}`, code: CodeInvalid},
		{name: "typing chatId twice", in: `{"type":"typing","chatId":"a","chatId":"b"}`, code: CodeInvalid},
		{name: "not json", in: `{"type":`, code: CodeInvalid},
		{name: "array", in: `[1,2]`, code: CodeInvalid},
		{name: "string", in: `"send"`, code: CodeInvalid},
		{name: "no type", in: `{"chatId":"c"}`, code: CodeInvalid},
		{name: "type not string", in: `{"type":5}`, code: CodeInvalid},
		{name: "unknown type", in: `{"type":"nuke"}`, code: CodeInvalid},
		{name: "send without correlationId", in: `{"type":"send","chatId":"c","body":"x"}`, code: CodeInvalid},
		{name: "send without chatId", in: `{"type":"send","correlationId":"k","body":"x"}`, code: CodeInvalid, corr: "k"},
		{name: "send without body", in: `{"type":"send","chatId":"c","correlationId":"k"}`, code: CodeInvalid, corr: "k"},
		{name: "send body wrong type", in: `{"type":"send","chatId":"c","correlationId":"k","body":7}`, code: CodeInvalid, corr: "k"},
		{name: "send body too large", in: `{"type":"send","chatId":"c","correlationId":"k","body":"` + big + `"}`, code: CodeTooLarge, corr: "k"},
		{name: "correlationId too long", in: `{"type":"send","chatId":"c","correlationId":"` + strings.Repeat("k", 129) + `","body":"x"}`, code: CodeInvalid},
		{name: "ack not array", in: `{"type":"ack","messageIds":"a"}`, code: CodeInvalid},
		{name: "ack empty", in: `{"type":"ack","messageIds":[]}`, code: CodeInvalid},
		{name: "ack empty id", in: `{"type":"ack","messageIds":[""]}`, code: CodeInvalid},
		{name: "read missing messageId", in: `{"type":"read","chatId":"c"}`, code: CodeInvalid},
		// U+0000 anywhere a client puts text (PROTOCOL.md §3; issue 13).
		{name: "send body with NUL", in: `{"type":"send","chatId":"c","correlationId":"k","body":"a\u0000b"}`, code: CodeInvalid, corr: "k"},
		{name: "send chatId with NUL", in: `{"type":"send","chatId":"c\u0000","correlationId":"k","body":"x"}`, code: CodeInvalid, corr: "k"},
		{name: "send correlationId with NUL", in: `{"type":"send","chatId":"c","correlationId":"k\u0000","body":"x"}`, code: CodeInvalid},
		{name: "ack id with NUL", in: `{"type":"ack","messageIds":["a\u0000"]}`, code: CodeInvalid},
		{name: "read messageId with NUL", in: `{"type":"read","chatId":"c","messageId":"x\u0000y"}`, code: CodeInvalid},
		{name: "refresh", in: `{"type":"refresh","token":"a.b.c"}`, check: func(t *testing.T, f ClientFrame) {
			if f.Refresh == nil || f.Refresh.Token != "a.b.c" {
				t.Fatalf("refresh decoded as %+v", f.Refresh)
			}
		}},
		{name: "refresh without token", in: `{"type":"refresh"}`, code: CodeInvalid},
		{name: "refresh token not a string", in: `{"type":"refresh","token":1}`, code: CodeInvalid},
		{name: "read chatId with NUL", in: `{"type":"read","chatId":"\u0000","messageId":"m"}`, code: CodeInvalid},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			f, err := DecodeClient([]byte(tc.in), DefaultMaxBody)
			if tc.code == "" {
				if err != nil {
					t.Fatalf("unexpected error %v", err)
				}
				tc.check(t, f)
				return
			}
			pe, ok := err.(*Error)
			if !ok {
				t.Fatalf("error %v (%T), want *Error with code %s", err, err, tc.code)
			}
			if pe.Code != tc.code || pe.CorrelationID != tc.corr {
				t.Fatalf("got code %q corr %q, want %q %q", pe.Code, pe.CorrelationID, tc.code, tc.corr)
			}
		})
	}
}

func TestServerFramesUseContractFieldNames(t *testing.T) {
	b := Encode(Hello{Type: TypeHello, UserID: "a", Device: "d", ConnectionID: "c",
		Limits: Limits{MaxBodyBytes: 1, MaxInFlightSends: 2, SendsPerSecond: 3, PingIntervalMs: 4}})
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	lim, _ := m["limits"].(map[string]any)
	for _, k := range []string{"maxBodyBytes", "maxInFlightSends", "sendsPerSecond", "pingIntervalMs"} {
		if _, ok := lim[k]; !ok {
			t.Errorf("hello.limits lacks %q: %s", k, b)
		}
	}
	for _, k := range []string{"type", "userId", "device", "connectionId"} {
		if _, ok := m[k]; !ok {
			t.Errorf("hello lacks %q: %s", k, b)
		}
	}
}

// FuzzDecodeClient: whatever bytes a client sends, the decoder neither
// panics nor accepts a frame that breaks the limits it promises.
func FuzzDecodeClient(f *testing.F) {
	for _, s := range []string{
		`{"type":"send","chatId":"c1","correlationId":"k-1","body":"hi"}`,
		`{"type":"ack","messageIds":["01J","01K"]}`,
		`{"type":"ping"}`,
		`{"type":"read","chatId":"c1","messageId":"01J"}`,
		`{"type":"send","chatId":"c1","correlationId":"k","body":"\u0000\ud83d"}`,
		`{"type":"send","chatId":1}`, `[]`, `null`, `{"type":"ack","messageIds":[1]}`,
		`{"type":"send","chatId":"c1","correlationId":"k","body":"new","edits":"01J"}`,
		`{"type":"typing","chatId":"c1"}`, `{"type":"typing","chatId":"c1","userId":"x"}`, `{"type":"typing"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		fr, err := DecodeClient(data, 64)
		if err != nil {
			if _, ok := err.(*Error); !ok {
				t.Fatalf("error of type %T", err)
			}
			return
		}
		n := 0
		if fr.Send != nil {
			n++
			if len(fr.Send.Body) > 64 || fr.Send.Body == "" || fr.Send.CorrelationID == "" || len(fr.Send.CorrelationID) > MaxIDLen || fr.Send.ChatID == "" {
				t.Fatalf("accepted a send that breaks the limits: %+v", fr.Send)
			}
		}
		if fr.Ack != nil {
			n++
			if len(fr.Ack.MessageIDs) == 0 || len(fr.Ack.MessageIDs) > MaxAckIDs {
				t.Fatalf("accepted an ack with %d ids", len(fr.Ack.MessageIDs))
			}
		}
		if fr.Ping != nil {
			n++
		}
		if fr.Read != nil {
			n++
			if fr.Read.UserID != "" {
				t.Fatal("read kept a client-supplied userId")
			}
		}
		if fr.Refresh != nil {
			n++
		}
		if fr.Typing != nil {
			n++
			if fr.Typing.UserID != "" || fr.Typing.ChatID == "" || len(fr.Typing.ChatID) > MaxIDLen {
				t.Fatalf("accepted a typing frame that breaks the limits: %+v", fr.Typing)
			}
		}
		if fr.Send != nil && fr.Send.Edits != "" && len(fr.Send.Edits) > MaxIDLen {
			t.Fatalf("accepted an edit of an over-long id")
		}
		if n != 1 {
			t.Fatalf("decoded %d frames from one input", n)
		}
	})
}

func BenchmarkDecodeSend(b *testing.B) {
	frame := []byte(`{"type":"send","chatId":"c_01M8P9XTTE1RN63NE9BG3K7S55","correlationId":"k-123456","body":"hello there, how are you doing today?"}`)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeClient(frame, DefaultMaxBody); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEncodeMessage(b *testing.B) {
	m := Message{Type: TypeMessage, MessageID: "01M8P9XTTE1RN63NE9BG3K7S55", CorrelationID: "k-123456",
		ChatID: "c_01M8P9XTTE1RN63NE9BG3K7S55", SenderID: "alice", Body: "hello there, how are you doing today?",
		SentAt: time.Date(2026, 12, 2, 1, 2, 3, 456789000, time.UTC)}
	b.ReportAllocs()
	for b.Loop() {
		_ = Encode(m)
	}
}

// A refused frame of a known type says which type it was (the server counts
// refused read receipts by it).
func TestDecodeErrorNamesTheFrameType(t *testing.T) {
	for in, want := range map[string]string{
		`{"type":"read","chatId":"c","messageId":"x\u0000"}`: TypeRead,
		`{"type":"send","chatId":"c"}`:                       TypeSend,
		`{"type":"nuke"}`:                                    "",
		`not json`:                                           "",
	} {
		_, err := DecodeClient([]byte(in), DefaultMaxBody)
		pe, ok := err.(*Error)
		if !ok || pe.FrameType != want {
			t.Errorf("DecodeClient(%s) = %#v, want an *Error with FrameType %q", in, err, want)
		}
	}
}

// The rules encoding/json does not keep by itself (issue 13, point 7):
// exact keys, no duplicates, valid UTF-8, no unpaired surrogate escapes,
// no blank body. Before, each of these frames decoded: "Body" and "TYPE"
// matched case-insensitively, the last duplicate won, and "k\ud800" and
// "k\udbff" both became "k\uFFFD" (one idempotency key for two).
func TestDecodeClientStrictness(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		corr     string // the correlationId the error names ("": none)
	}{
		{"a key in another case", `{"type":"send","chatId":"c","correlationId":"k","Body":"hi"}`, "k"},
		{"the type key in capitals", `{"TYPE":"ping"}`, ""},
		{"a key with U+017F folding to s", `{"type":"read","chatId":"c","meſſageId":"m"}`, ""},
		{"correlationId in another case", `{"type":"send","chatId":"c","CorrelationId":"k","body":"hi"}`, ""},
		{"a duplicate key", `{"type":"send","chatId":"c","correlationId":"k","body":"a","body":"b"}`, "k"},
		{"a duplicate key spelt with an escape", `{"type":"send","chatId":"c","correlationId":"k","body":"a","b\u006fdy":"b"}`, "k"},
		{"a duplicate type", `{"type":"ping","type":"ping"}`, ""},
		{"a duplicate correlationId", `{"type":"send","chatId":"c","correlationId":"k","correlationId":"j","body":"a"}`, ""},
		{"a lone high surrogate in a correlationId", `{"type":"send","chatId":"c","correlationId":"k\ud800","body":"a"}`, ""},
		{"another lone high surrogate", `{"type":"send","chatId":"c","correlationId":"k\udbff","body":"a"}`, ""},
		{"a lone low surrogate", `{"type":"send","chatId":"c","correlationId":"k\uDC00","body":"a"}`, ""},
		{"a high surrogate before a non-surrogate", `{"type":"send","chatId":"c","correlationId":"k\ud800\u0041","body":"a"}`, ""},
		{"two high surrogates", `{"type":"send","chatId":"c","correlationId":"k\ud800\ud800","body":"a"}`, ""},
		{"a lone surrogate in a body", `{"type":"send","chatId":"c","correlationId":"k","body":"a\ud83d"}`, "k"},
		{"a lone surrogate in an ack id", `{"type":"ack","messageIds":["a","\ud800"]}`, ""},
		{"a lone surrogate in an unknown nested key", `{"type":"ping","x":{"y":["\udfff"]}}`, ""},
		{"a lone surrogate in a key", `{"type":"ping","\ud800":1}`, ""},
		{"invalid UTF-8 in a correlationId", "{\"type\":\"send\",\"chatId\":\"c\",\"correlationId\":\"k\xff\",\"body\":\"a\"}", ""},
		// The fault is in the body: the answer names the send (docs/PROTOCOL.md,
		// "Additions"); before, every invalid UTF-8 named none.
		{"invalid UTF-8 in a body", "{\"type\":\"send\",\"chatId\":\"c\",\"correlationId\":\"k\",\"body\":\"\xc3\x28\"}", "k"},
		{"invalid UTF-8 in a chatId", "{\"type\":\"send\",\"chatId\":\"c\xff\",\"correlationId\":\"k\",\"body\":\"a\"}", "k"},
		{"invalid UTF-8 in a key", "{\"type\":\"send\",\"chatId\":\"c\",\"correlationId\":\"k\",\"b\xffody\":\"a\",\"body\":\"a\"}", ""},
		{"invalid UTF-8 in the type", "{\"type\":\"send\xff\",\"chatId\":\"c\",\"correlationId\":\"k\",\"body\":\"a\"}", ""},
		{"a blank body", `{"type":"send","chatId":"c","correlationId":"k","body":" \t\n "}`, "k"},
		{"a body of Unicode spaces", `{"type":"send","chatId":"c","correlationId":"k","body":"\u00a0\u3000\u2028"}`, "k"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := DecodeClient([]byte(tc.in), DefaultMaxBody)
			pe, ok := err.(*Error)
			if !ok || pe.Code != CodeInvalid || pe.CorrelationID != tc.corr || pe.Message == "" {
				t.Fatalf("DecodeClient(%s) = %#v, want an invalid *Error naming correlationId %q", tc.in, err, tc.corr)
			}
		})
	}
	// What stays accepted: a surrogate pair, an escaped backslash before
	// "ud800" (no escape at all), unknown keys, a body with text and
	// spaces, keys spelt with escapes, nested duplicates under an unknown
	// key (they are not decoded).
	for in, check := range map[string]func(ClientFrame) bool{
		`{"type":"send","chatId":"c","correlationId":"k\ud83d\ude00","body":"a"}`:  func(f ClientFrame) bool { return f.Send.CorrelationID == "k😀" },
		`{"type":"send","chatId":"c","correlationId":"k\\ud800","body":"a"}`:       func(f ClientFrame) bool { return f.Send.CorrelationID == `k\ud800` },
		`{"type":"send","chatId":"c","correlationId":"k","body":" hi ","extra":1}`: func(f ClientFrame) bool { return f.Send.Body == " hi " },
		`{"t\u0079pe":"ping"}`: func(f ClientFrame) bool { return f.Ping != nil },
		`{"type":"ack","messageIds":["a","b"],"x":{"k":1,"k":2}}`:       func(f ClientFrame) bool { return len(f.Ack.MessageIDs) == 2 },
		` {"type" : "ping" , "n" : -1.5e3 , "b" : true , "z" : null } `: func(f ClientFrame) bool { return f.Ping != nil },
	} {
		f, err := DecodeClient([]byte(in), DefaultMaxBody)
		if err != nil || !check(f) {
			t.Errorf("DecodeClient(%s) = %+v, %v; want accepted", in, f, err)
		}
	}
}

// TestSendWithEmptyEditsIsInvalid: "edits": "" names no message; it is
// refused as an empty id, not taken for a new message (a fresh user's
// client bug turned an edit into a duplicate message so).
func TestSendWithEmptyEditsIsInvalid(t *testing.T) {
	for _, frame := range []string{
		`{"type":"send","chatId":"c","correlationId":"k","body":"x","edits":""}`,
		`{"type":"send","edits":"","chatId":"c","correlationId":"k","body":"x"}`,
	} {
		_, err := DecodeClient([]byte(frame), 4096)
		var pe *Error
		if !errors.As(err, &pe) || pe.Code != CodeInvalid || !strings.Contains(pe.Message, "edits") {
			t.Errorf("%s: err %v, want invalid naming edits", frame, err)
		}
	}
	f, err := DecodeClient([]byte(`{"type":"send","chatId":"c","correlationId":"k","body":"edits: \"\""}`), 4096)
	if err != nil || f.Send == nil || f.Send.Edits != "" {
		t.Errorf("a body that mentions edits: %+v %v, want an ordinary send", f, err)
	}
}
