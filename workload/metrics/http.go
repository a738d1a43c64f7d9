package metrics

import (
	"runtime/debug"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// The series added for issue 13, point 8: HTTP answers by route, WebSocket
// closes by code, and what is running.

// RouteUnmatched is the route label of a request no pattern matched (the
// 404 and 405 answers of the server's ServeMux).
const RouteUnmatched = "unmatched"

// CloseCodes are the WebSocket close codes exported from the start, at 0:
// PROTOCOL.md §3's 4001-4005 and 1001, the bad-frame and frame-size closes
// 1008 and 1009, 1000 (the client closed or the socket dropped), 1006 (a
// write failed: the socket was dropped without a close frame) and 1013
// (live delivery unavailable at registration: retry).
var CloseCodes = []int{1000, 1001, 1006, 1008, 1009, 1013, 4001, 4002, 4003, 4004, 4005}

type extra struct {
	httpResponses *prometheus.CounterVec
	wsCloses      *prometheus.CounterVec
	buildInfo     *prometheus.GaugeVec
}

func newExtra(reg *prometheus.Registry) extra {
	x := extra{
		httpResponses: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tetra_http_responses_total",
			Help: "HTTP responses by route (the ServeMux pattern, such as \"GET /api/chats/{chatId}/messages\", or \"unmatched\") and status code; a WebSocket upgrade counts as 101 when it is accepted."},
			[]string{"route", "code"}),
		wsCloses: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tetra_websocket_closes_total",
			Help: "WebSocket connections ended, by the close code the server sent (4001 superseded, 4002 attempts, 4003 pending, 4004 idle, 4005 token expired, 1001 shutdown, 1008 bad frames or a client that does not read, 1009 frame too big, 1013 retry, 1000 the client closed or dropped, 1006 a write failed)."},
			[]string{"code"}),
		buildInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tetra_build_info",
			Help: "Always 1: the running build's version and Go version, and the backends in use (store, outbox, index)."},
			[]string{"version", "goversion", "store", "outbox", "index"}),
	}
	reg.MustRegister(x.httpResponses, x.wsCloses, x.buildInfo)
	for _, c := range CloseCodes {
		x.wsCloses.WithLabelValues(strconv.Itoa(c))
	}
	return x
}

// HTTPResponse records one HTTP response: route is the ServeMux pattern
// that served it (RouteUnmatched when none did), status its status code.
// The label values are bounded by the server's own patterns, never a
// request's path.
func (m *Metrics) HTTPResponse(route string, status int) {
	m.x.httpResponses.WithLabelValues(route, strconv.Itoa(status)).Inc()
}

// WebSocketClosed records one connection ended with close code.
func (m *Metrics) WebSocketClosed(code int) {
	m.x.wsCloses.WithLabelValues(strconv.Itoa(code)).Inc()
}

// SetBuildInfo sets tetra_build_info to 1 for this build (Version) and
// the backends named: store ("sqlite", "postgres"), outbox ("sqlite",
// "postgres", "kafka") and index ("memory", "redis").
func (m *Metrics) SetBuildInfo(store, outbox, index string) {
	m.x.buildInfo.Reset()
	m.x.buildInfo.WithLabelValues(Version(), goVersion(), store, outbox, index).Set(1)
}

// Version is the running build's version: the main module's version as
// the Go toolchain stamped it (a tag, or a pseudo-version from the VCS
// commit, "+dirty" for uncommitted changes), else the VCS revision, else
// "(devel)".
func Version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "(devel)"
	}
	if v := bi.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	rev, dirty := "", false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "(devel)"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "+dirty"
	}
	return rev
}

func goVersion() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.GoVersion != "" {
		return bi.GoVersion
	}
	return "unknown"
}
