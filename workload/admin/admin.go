package admin

import (
	"embed"
	"net/http"
)

//go:embed static
var files embed.FS

// ContentSecurityPolicy is sent with every file of the page: script, style
// and fetch from the page's own origin only, no inline script or style, no
// framing, no forms.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Paths of the page and its assets.
const (
	PagePath   = "/admin"
	ScriptPath = "/admin/admin.js"
	StylePath  = "/admin/admin.css"
)

type asset struct {
	name, ctype string
}

var assets = map[string]asset{
	PagePath:   {"static/index.html", "text/html; charset=utf-8"},
	ScriptPath: {"static/admin.js", "text/javascript; charset=utf-8"},
	StylePath:  {"static/admin.css", "text/css; charset=utf-8"},
}

// Handler serves the page at PagePath and its assets. Register it for each
// of PagePath, ScriptPath and StylePath (GET).
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := assets[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		b, err := files.ReadFile(a.name)
		if err != nil {
			http.Error(w, "asset missing", http.StatusInternalServerError)
			return
		}
		h := w.Header()
		h.Set("Content-Type", a.ctype)
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Cache-Control", "no-cache")
		_, _ = w.Write(b)
	})
}

// File returns the embedded content of one asset path (for tests).
func File(p string) ([]byte, bool) {
	a, ok := assets[p]
	if !ok {
		return nil, false
	}
	b, err := files.ReadFile(a.name)
	return b, err == nil
}
