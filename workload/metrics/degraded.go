package metrics

import "github.com/prometheus/client_golang/prometheus"

// DegradedReasons are the label values of tetra_degraded, exported from the
// start at 0.
//
//   - index_unavailable: the waterline index (Redis) does not answer. The
//     HTTP API and history keep working and /readyz stays 200; new
//     WebSocket connections are refused with 1013 before hello
//     (PROTOCOL.md §7.8); open ones keep what they have (issue 24,
//     point 2).
var DegradedReasons = []string{ReasonIndexUnavailable}

// ReasonIndexUnavailable is tetra_degraded's reason while the index does not
// answer.
const ReasonIndexUnavailable = "index_unavailable"

func newDegraded(reg *prometheus.Registry) *prometheus.GaugeVec {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "tetra_degraded",
		Help: "1 while the server runs degraded for the reason given (index_unavailable: Redis does not answer; HTTP and history work, new sockets get 1013), else 0. /readyz says the same in its body (\"status\":\"degraded\")."},
		[]string{"reason"})
	reg.MustRegister(g)
	for _, r := range DegradedReasons {
		g.WithLabelValues(r)
	}
	return g
}

// SetDegraded sets tetra_degraded{reason} to 1 (on) or 0.
func (m *Metrics) SetDegraded(reason string, on bool) {
	v := 0.0
	if on {
		v = 1
	}
	m.degraded.WithLabelValues(reason).Set(v)
}
