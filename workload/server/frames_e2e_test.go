package server_test

import (
	"slices"
	"testing"
)

// Over a real socket: a frame with a key in another letter case, a key
// given twice, an unpaired surrogate escape or invalid UTF-8, or a blank
// body, is answered invalid and stores nothing; the connection stays
// (issue 13, point 7). Before, "Body" and a duplicate "body" were
// accepted, {"TYPE":"ping"} answered pong, and correlationIds "k\ud800"
// and "k\udbff" were one key: the second send answered accepted with the
// first one's messageId and its body was dropped.
func TestE2EFrameStrictness(t *testing.T) {
	t.Parallel()
	e := newEnv(t, backends(t)[0], nil)
	chat := e.createDirect("alice", "bob")
	alice := e.dial("alice", dialOpts{})
	c := chat.ChatID
	for _, tc := range []struct{ name, raw, corr string }{
		{"lone surrogate", `{"type":"send","chatId":"` + c + `","correlationId":"k\ud800","body":"one"}`, ""},
		{"another lone surrogate", `{"type":"send","chatId":"` + c + `","correlationId":"k\udbff","body":"two"}`, ""},
		{"lone low surrogate", `{"type":"send","chatId":"` + c + `","correlationId":"k\udc00","body":"three"}`, ""},
		{"invalid UTF-8", "{\"type\":\"send\",\"chatId\":\"" + c + "\",\"correlationId\":\"k\xff\",\"body\":\"four\"}", ""},
		{"Body", `{"type":"send","chatId":"` + c + `","correlationId":"case-1","Body":"five"}`, "case-1"},
		{"TYPE", `{"TYPE":"send","chatId":"` + c + `","correlationId":"case-2","body":"six"}`, ""},
		{"duplicate body", `{"type":"send","chatId":"` + c + `","correlationId":"dup-1","body":"a","body":"seven"}`, "dup-1"},
		{"duplicate type", `{"type":"ping","type":"ping"}`, ""},
		{"blank body", `{"type":"send","chatId":"` + c + `","correlationId":"blank-1","body":"  \n\t\u00a0"}`, "blank-1"},
	} {
		alice.writeText(tc.raw)
		f := alice.next("the answer to "+tc.name, func(f frame) bool { return f.Type != "pong" })
		if f.Type != "error" || f.Code != "invalid" || f.CorrelationID != tc.corr || f.Message == "" {
			t.Errorf("%s: got %s, want an invalid error naming correlationId %q", tc.name, f, tc.corr)
		}
		alice.sync() // still open
	}
	pair := alice.sendOK(c, "k\U0001F600", "a surrogate pair is text")
	literal := alice.sendOK(c, `k\ud800`, "an escaped backslash is no escape")
	if got := ids(e.history("bob", c, "")); !slices.Equal(got, []string{pair.MessageID, literal.MessageID}) {
		t.Errorf("history %v, want only the two good sends", got)
	}
}
