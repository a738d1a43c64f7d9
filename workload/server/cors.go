package server

import (
	"net/http"
	"net/url"
	"path"
	"strings"

	"github.com/rs/cors"
)

// withCORS lets the browser origins of Config.AllowedOrigins (the host
// patterns that may open sockets, path.Match syntax against the Origin's
// host, as coder/websocket matches them) call the HTTP API, /api/..., too:
// preflights answered, Access-Control-Allow-Origin on the answers, the
// Authorization and Content-Type request headers allowed, and
// WWW-Authenticate and Retry-After readable by the page (PROTOCOL.md §1,
// §7.8). No cookies are involved (tokens are bearer headers), so
// credentials are not allowed. Other paths and other origins get no CORS
// headers; without AllowedOrigins, next is returned as it is.
func (s *Server) withCORS(next http.Handler) http.Handler {
	patterns := s.cfg.AllowedOrigins
	if len(patterns) == 0 {
		return next
	}
	c := cors.New(cors.Options{
		AllowOriginFunc: func(origin string) bool { return originAllowed(origin, patterns) },
		AllowedMethods:  []string{http.MethodGet, http.MethodPost, http.MethodPatch, http.MethodDelete},
		AllowedHeaders:  []string{"Authorization", "Content-Type"},
		ExposedHeaders:  []string{"WWW-Authenticate", "Retry-After"},
		MaxAge:          600,
	})
	api := c.Handler(next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/api/") {
			api.ServeHTTP(w, r)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// originAllowed reports whether the host of origin matches one of patterns
// (path.Match, case-insensitive, as coder/websocket's OriginPatterns).
func originAllowed(origin string, patterns []string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" {
		return false
	}
	host := strings.ToLower(u.Host)
	for _, p := range patterns {
		if ok, _ := path.Match(strings.ToLower(p), host); ok {
			return true
		}
	}
	return false
}
