package server_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestE2EPresenceRepeatedUsers: GET /api/presence takes users once as a
// comma-separated list (PROTOCOL.md §7.4) or repeated, one user id per
// value taken whole, so a user id holding a comma (§1 allows it: any sub
// of 1..128 bytes without control characters) can be asked for. Before,
// users repeated was 400 and a comma always split, so "a,b" could not be
// asked for at all.
func TestE2EPresenceRepeatedUsers(t *testing.T) {
	t.Parallel()
	coreBackends(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		e.createDirect("alice", "a,b")
		e.createDirect("alice", "carol")
		e.createDirect("alice", "a")
		alice := e.dial("alice", dialOpts{})
		e.dial("a,b", dialOpts{})
		alice.next("a,b online", isPresence("a,b", true))
		ask := func(q url.Values) presenceAnswer {
			t.Helper()
			status, raw := e.call("GET", "/api/presence?"+q.Encode(), e.token("alice"), nil)
			if status != http.StatusOK {
				t.Fatalf("GET /api/presence?%s: %d %s", q.Encode(), status, raw)
			}
			return decode[presenceAnswer](t, raw)
		}
		// Repeated: each value whole.
		p := ask(url.Values{"users": {"a,b", "carol"}})
		if len(p.Presence) != 2 || !p.Presence["a,b"].Online || p.Presence["carol"].Online {
			t.Errorf(`users=a,b&users=carol: %+v, want "a,b" online and carol offline`, p)
		}
		if p := ask(url.Values{"users": {"a,b", "a,b"}}); len(p.Presence) != 1 || !p.Presence["a,b"].Online {
			t.Errorf(`users=a,b&users=a,b (one id with a comma, alone): %+v, want "a,b" online`, p)
		}
		// Once: split at commas, as §7.4 says (encoded or not: the query
		// is decoded first, as every client library encodes a comma).
		for _, raw := range []string{"users=a,b,carol", "users=a%2Cb%2Ccarol"} {
			status, body := e.call("GET", "/api/presence?"+raw, e.token("alice"), nil)
			p := decode[presenceAnswer](t, body)
			if _, asked := p.Presence["a,b"]; status != http.StatusOK || asked || len(p.Presence) != 2 || p.Presence["a"].Online || p.Presence["carol"].Online {
				t.Errorf("%s: %d %s, want a and carol offline, no \"a,b\" (split at the commas)", raw, status, body)
			}
		}
		// Refused: an empty value in either form, another parameter, too many.
		for _, q := range []string{"users=a,b&users=", "users=&users=carol", "users=carol&user=a,b",
			"users=" + strings.Repeat("u&users=", 500) + "u"} {
			status, raw := e.call("GET", "/api/presence?"+q, e.token("alice"), nil)
			expectInvalid(t, "GET /api/presence?"+q[:min(len(q), 40)], status, raw)
		}
	})
}
