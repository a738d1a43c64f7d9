package web_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/tetra-messenger/tetra/workload/web"
)

func get(t *testing.T, path string, header ...string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(http.MethodGet, path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	web.Handler().ServeHTTP(rec, req)
	return rec.Result()
}

func body(t *testing.T, r *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(r.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestServesFiles(t *testing.T) {
	for _, tc := range []struct{ path, ctype, contains string }{
		{"/", "text/html; charset=utf-8", `<script type="module" src="/static/app.js">`},
		{"/static/index.html", "text/html; charset=utf-8", "<!doctype html>"},
		{"/static/app.js", "text/javascript; charset=utf-8", "from './client.js'"},
		{"/static/client.js", "text/javascript; charset=utf-8", "export class Client"},
		{"/static/style.css", "text/css; charset=utf-8", "overflow-wrap: anywhere"},
	} {
		r := get(t, tc.path)
		if r.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d", tc.path, r.StatusCode)
		}
		if got := r.Header.Get("Content-Type"); got != tc.ctype {
			t.Errorf("GET %s: Content-Type %q, want %q", tc.path, got, tc.ctype)
		}
		if got := r.Header.Get("Content-Security-Policy"); got != web.ContentSecurityPolicy {
			t.Errorf("GET %s: CSP %q", tc.path, got)
		}
		if r.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("GET %s: no nosniff", tc.path)
		}
		if b := body(t, r); !strings.Contains(b, tc.contains) {
			t.Errorf("GET %s: body lacks %q", tc.path, tc.contains)
		}
	}
}

func TestNotFound(t *testing.T) {
	for _, p := range []string{"/static/", "/static/nope.js", "/index.html", "/static/../web.go", "/x"} {
		if r := get(t, p); r.StatusCode != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", p, r.StatusCode)
		}
	}
}

func TestETagRevalidates(t *testing.T) {
	r := get(t, "/static/app.js")
	etag := r.Header.Get("ETag")
	if etag == "" || r.Header.Get("Cache-Control") != "no-cache" {
		t.Fatalf("ETag %q, Cache-Control %q", etag, r.Header.Get("Cache-Control"))
	}
	if r := get(t, "/static/app.js", "If-None-Match", etag); r.StatusCode != http.StatusNotModified {
		t.Fatalf("If-None-Match: %d, want 304", r.StatusCode)
	}
}

// TestNoHTMLSinks keeps user data out of HTML parsing: the client builds its
// DOM with createElement, textContent and setAttribute only.
func TestNoHTMLSinks(t *testing.T) {
	sinks := regexp.MustCompile(`\.(innerHTML|outerHTML)\b|insertAdjacentHTML|document\.write|\beval\(|new Function\(`)
	for _, p := range []string{"/static/app.js", "/static/client.js"} {
		if m := sinks.FindString(body(t, get(t, p))); m != "" {
			t.Errorf("%s uses %s", p, m)
		}
	}
}

// TestSelfContained: no CDN, no other origin, no build step (every file the
// page loads is served here).
func TestSelfContained(t *testing.T) {
	files := web.Files()
	ref := regexp.MustCompile(`(?:src|href)="([^"]+)"|from '([^']+)'`)
	for _, p := range files {
		b := body(t, get(t, p))
		if strings.Contains(b, "http://") || strings.Contains(b, "https://") || strings.Contains(b, "//cdn") {
			t.Errorf("%s refers to another origin", p)
		}
		for _, m := range ref.FindAllStringSubmatch(b, -1) {
			target := m[1] + m[2]
			if strings.HasPrefix(target, "./") {
				target = "/static/" + strings.TrimPrefix(target, "./")
			}
			if !slices.Contains(files, target) {
				t.Errorf("%s loads %q, which is not served", p, target)
			}
		}
	}
}
