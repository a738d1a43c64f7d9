package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed static
var files embed.FS

// ContentSecurityPolicy is sent with every file: scripts, styles, images and
// connections (fetch and WebSocket) from the page's own origin only, no
// inline script or style attribute handlers, no framing.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// contentTypes is fixed here rather than taken from mime.TypeByExtension,
// which reads the host's mime.types and could serve modules with a type
// the browser refuses to execute.
var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
	".png":  "image/png",
}

// asset is one embedded file, read once at start.
type asset struct {
	body  []byte
	ctype string
	etag  string
}

// assets maps a URL path ("/", "/static/app.js") to its file.
var assets = load()

func load() map[string]asset {
	out := map[string]asset{}
	err := fs.WalkDir(files, "static", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := files.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		ctype, ok := contentTypes[path.Ext(p)]
		if !ok {
			ctype = "application/octet-stream"
		}
		a := asset{body: b, ctype: ctype, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
		out["/"+p] = a
		if p == "static/index.html" {
			out["/"] = a
		}
		return nil
	})
	if err != nil {
		panic("web: embedded files unreadable: " + err.Error()) // cannot happen: embed checked at build
	}
	return out
}

// Handler serves the client: GET / is index.html, GET /static/<file> the
// other files; any other path is 404. Responses carry the
// ContentSecurityPolicy, nosniff and no-referrer headers, a content-hash
// ETag (If-None-Match answers 304) and "Cache-Control: no-cache", so a
// browser revalidates and picks up a new build at once.
func Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := assets[r.URL.Path]
		if !ok || strings.HasSuffix(r.URL.Path, "/static/") {
			http.NotFound(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Type", a.ctype)
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", a.etag)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(a.body))
	})
}

// Files lists the URL paths Handler serves, for tests and documentation.
func Files() []string {
	out := make([]string, 0, len(assets))
	for p := range assets {
		out = append(out, p)
	}
	return out
}
