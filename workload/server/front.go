package server

import (
	"net/http"
	"strings"

	"github.com/tetra-messenger/tetra/workload/metrics"
	"github.com/tetra-messenger/tetra/workload/protocol"
)

// codeMethodNotAllowed is the error code of a 405 (HTTP only, like
// unauthorized and unavailable): the path exists, the method does not.
const codeMethodNotAllowed = "method_not_allowed"

// front is the outermost HTTP handler: it serves mux (behind recoverer),
// gives the answers ServeMux makes itself, when no pattern matches, the
// contract's error shape {"error":{"code","message"}} (PROTOCOL.md §2):
// 404 not_found, or 405 method_not_allowed with the Allow header ServeMux
// computed from the patterns that match the path with another method; and
// counts every response by the pattern that served it and its status
// (tetra_http_responses_total: the pattern, not the path, so the label
// values are as few as the routes).
func (s *Server) front(mux *http.ServeMux) http.Handler {
	inner := recoverer(s, mux)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fw := &frontWriter{ResponseWriter: w, r: r, m: s.metrics}
		_, pattern := mux.Handler(r)
		fw.unmatched = pattern == ""
		inner.ServeHTTP(fw, r)
		if fw.status == 0 {
			fw.count(http.StatusOK) // the handler wrote nothing: net/http answers 200
		}
	})
}

// frontWriter is the ResponseWriter front hands on. When the request
// matched no pattern, it replaces ServeMux's plain-text 404 and 405 with
// JSON error bodies. It unwraps (http.ResponseController, the WebSocket
// upgrade's Hijack) and flushes.
type frontWriter struct {
	http.ResponseWriter
	r         *http.Request
	m         *metrics.Metrics
	unmatched bool
	status    int  // the status written; 0 before the header
	swallow   bool // ServeMux's own body, replaced by the JSON one
}

func (w *frontWriter) WriteHeader(code int) {
	if w.status != 0 {
		return
	}
	w.status = code
	w.count(code)
	if w.unmatched && (code == http.StatusNotFound || code == http.StatusMethodNotAllowed) {
		w.swallow = true
		h := w.ResponseWriter.Header()
		h.Del("Content-Type")
		h.Del("X-Content-Type-Options")
		where := w.r.Method + " " + w.r.URL.Path
		if code == http.StatusNotFound {
			writeError(w.ResponseWriter, protocol.CodeNotFound, "no such endpoint: "+where)
		} else {
			writeError(w.ResponseWriter, codeMethodNotAllowed, "method not allowed: "+where+"; allowed: "+strings.Join(h.Values("Allow"), ", "))
		}
		return
	}
	w.ResponseWriter.WriteHeader(code)
}

// count records the response under the pattern ServeMux set on the request
// before calling the handler (a WebSocket upgrade is counted at its 101,
// not when the connection ends).
func (w *frontWriter) count(status int) {
	route := w.r.Pattern
	if w.unmatched || route == "" {
		route = metrics.RouteUnmatched
	}
	w.m.HTTPResponse(route, status)
}

func (w *frontWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	if w.swallow {
		return len(p), nil
	}
	return w.ResponseWriter.Write(p)
}

// Flush implements http.Flusher for handlers that stream.
func (w *frontWriter) Flush() {
	if w.status == 0 {
		w.WriteHeader(http.StatusOK)
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap lets http.ResponseController and the WebSocket upgrade reach the
// connection.
func (w *frontWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
