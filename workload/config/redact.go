package config

import (
	"net/url"
	"strings"
)

// RedactURL returns s, a store, index or outbox URL, fit for logs and error
// messages: the password of its userinfo replaced by "xxxxx" (the user
// name kept, as url.URL.Redacted does). A string that does not parse as a
// URL but still looks like scheme://userinfo@host loses its whole userinfo
// instead ("scheme://xxxxx@host..."); anything else is returned unchanged.
// It is the one redaction rule of the workload, its tools and its tests.
func RedactURL(s string) string {
	if u, err := url.Parse(s); err == nil {
		return u.Redacted()
	}
	j := strings.Index(s, "://")
	if j < 0 {
		return s
	}
	rest := s[j+3:]
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	if i := strings.LastIndex(rest[:end], "@"); i >= 0 {
		return s[:j+3] + "xxxxx" + rest[i:]
	}
	return s
}
