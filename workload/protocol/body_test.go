package protocol

import (
	"strings"
	"testing"
)

// TestCheckBody: the strict HTTP body rules of PROTOCOL.md §7.7, each
// refusal naming the key.
func TestCheckBody(t *testing.T) {
	keys := []string{"kind", "title", "members"}
	for _, tc := range []struct {
		body, want string // want: "" for accepted, else a part of the message
	}{
		{`{"kind":"group","title":"T","members":["bob"]}`, ""},
		{` { } `, ""},
		{`{"kind":"group","kind":"direct"}`, `"kind" appears twice`},
		{`{"kind":"group","k\u0069nd":"direct"}`, `"kind" appears twice`},
		{`{"Kind":"group"}`, `"Kind": keys are case-sensitive, write "kind"`},
		{`{"user":"x"}`, `unknown key "user"`},
		{`{"title":"a\ud800"}`, `title holds an unpaired`},
		{`{"members":["ok","\udc00x"]}`, `members holds an unpaired`},
		{`{"title":"\ud83d\ude00"}`, ""},
		{`{"t\ud800":"x"}`, `a key holds an unpaired`},
		{`[1]`, `must be a JSON object`},
		{`{"kind":`, `not valid JSON`},
		{`{"members":null}`, `key "members" is null`},
		{`{"title" : null , "kind":"group"}`, `key "title" is null`},
		{`{"kind":"group","members":["bob",null]}`, `members holds a null`},
		{`{"members":["null","bob"],"title":"null"}`, ""},
		{`{"members":[[null]]}`, `members holds a null`},
	} {
		err := CheckBody([]byte(tc.body), keys)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("CheckBody(%s) = %v, want nil", tc.body, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || CodeOf(err) != CodeInvalid):
			t.Errorf("CheckBody(%s) = %v, want invalid naming %s", tc.body, err, tc.want)
		}
	}
}
