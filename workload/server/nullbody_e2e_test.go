package server_test

import (
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestE2ENullInBodies: a JSON null where a request body expects a string
// or an array is 400 invalid naming the key, for every call of the HTTP
// API that takes a body, and changes nothing (PROTOCOL.md §7.7: bodies
// are decoded as strictly as frames). encoding/json alone decodes a null
// as the key's absence: "members":null created a group of the caller
// alone, "title":null a group without a title.
func TestE2ENullInBodies(t *testing.T) {
	t.Parallel()
	coreBackends(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		g := e.createGroup("alice", "T", "bob")
		path := "/api/chats/" + g.ChatID
		before := e.list7("alice", "")
		for _, tc := range []struct {
			what, method, path, body, want string
		}{
			{"create: members null", "POST", "/api/chats", `{"kind":"group","title":"N","members":null}`, `key "members" is null`},
			{"create: a member null", "POST", "/api/chats", `{"kind":"group","title":"N","members":["bob",null]}`, `members holds a null`},
			{"create: title null", "POST", "/api/chats", `{"kind":"group","title":null,"members":["bob"]}`, `key "title" is null`},
			{"create: kind null", "POST", "/api/chats", `{"kind":null,"members":["bob"]}`, `key "kind" is null`},
			{"create: history null", "POST", "/api/chats", `{"kind":"group","members":["bob"],"history":null}`, `key "history" is null`},
			{"create direct: members null", "POST", "/api/chats", `{"kind":"direct","members":null}`, `key "members" is null`},
			{"add member: userId null", "POST", path + "/members", `{"userId":null}`, `key "userId" is null`},
			{"rename: title null", "PATCH", path, `{"title":null}`, `key "title" is null`},
			{"rename: title null, spaced", "PATCH", path, `{ "title" :  null }`, `key "title" is null`},
			{"add admin: userId null", "POST", path + "/admins", `{"userId":null}`, `key "userId" is null`},
		} {
			status, raw := e.call(tc.method, tc.path, e.token("alice"), tc.body)
			expectInvalid(t, tc.what+": "+tc.body, status, raw)
			if !strings.Contains(string(raw), strings.ReplaceAll(tc.want, `"`, `\"`)) {
				t.Errorf("%s: %s does not say %s", tc.what, raw, tc.want)
			}
		}
		after := e.list7("alice", "")
		if !slices.Equal(chat7IDs(after.Chats), chat7IDs(before.Chats)) {
			t.Errorf("bodies with null created chats: %v -> %v", chat7IDs(before.Chats), chat7IDs(after.Chats))
		}
		if c := e.chat7("alice", g.ChatID); c.Title != "T" || !slices.Equal(c.Members, []string{"alice", "bob"}) || !slices.Equal(c.Admins, []string{"alice"}) {
			t.Errorf("bodies with null changed the group: %+v", c)
		}
		// The string "null" is a value like any other.
		if status, raw := e.call("PATCH", path, e.token("alice"), `{"title":"null"}`); status != http.StatusOK {
			t.Errorf(`rename to "null": %d %s`, status, raw)
		}
	})
}
