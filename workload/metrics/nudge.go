package metrics

import "github.com/prometheus/client_golang/prometheus"

// NudgeSnapshot is what the scrape reads from the offline nudge's webhook
// sender (nudge.Stats, copied so this package does not depend on it).
type NudgeSnapshot struct {
	Queued, Sent, Failed, Online, Requests int64
	Dropped                                map[string]int64
	Depth                                  int
}

// NudgeDropReasons are the reasons of tetra_nudge_dropped_total, exported
// from the start at 0.
var NudgeDropReasons = []string{"queue_full", "rejected", "shutdown"}

var (
	dNudgeQueued   = prometheus.NewDesc("tetra_nudge_queued_total", "Offline nudges (message, recipient) queued for the webhook.", nil, nil)
	dNudgeSent     = prometheus.NewDesc("tetra_nudge_sent_total", "Nudges in batches the webhook answered 2xx.", nil, nil)
	dNudgeFailed   = prometheus.NewDesc("tetra_nudge_failed_total", "Nudges in webhook attempts that failed (5xx, 429, network error, timeout) and were retried with backoff.", nil, nil)
	dNudgeDropped  = prometheus.NewDesc("tetra_nudge_dropped_total", "Nudges given up, by reason: queue_full (the oldest queued nudge made room for a new one), rejected (the webhook answered 4xx other than 429), shutdown (still queued or retrying when the process stopped).", []string{"reason"}, nil)
	dNudgeOnline   = prometheus.NewDesc("tetra_nudge_skipped_online_total", "Offline candidates not nudged because the recipient was connected to another process of the fleet.", nil, nil)
	dNudgeRequests = prometheus.NewDesc("tetra_nudge_requests_total", "Webhook requests made (first attempts and retries).", nil, nil)
	dNudgeDepth    = prometheus.NewDesc("tetra_nudge_queue_depth", "Nudges waiting in the bounded queue.", nil, nil)
)

var nudgeDescs = []*prometheus.Desc{dNudgeQueued, dNudgeSent, dNudgeFailed, dNudgeDropped, dNudgeOnline, dNudgeRequests, dNudgeDepth}

func newNudgeLatency(reg *prometheus.Registry) prometheus.Histogram {
	h := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tetra_nudge_batch_latency_seconds",
		Help:    "From a batch's oldest nudge being queued to the webhook's 2xx answer (batching delay and retries included).",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 16)})
	reg.MustRegister(h)
	return h
}

// NudgeBatch records one batch the webhook accepted, latency after its
// oldest nudge was queued.
func (m *Metrics) NudgeBatch(latencySeconds float64) { m.nudgeLat.Observe(latencySeconds) }

func collectNudge(ch chan<- prometheus.Metric, n *NudgeSnapshot) {
	if n == nil {
		return
	}
	c := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
	}
	c(dNudgeQueued, float64(n.Queued))
	c(dNudgeSent, float64(n.Sent))
	c(dNudgeFailed, float64(n.Failed))
	for _, r := range NudgeDropReasons {
		c(dNudgeDropped, float64(n.Dropped[r]), r)
	}
	c(dNudgeOnline, float64(n.Online))
	c(dNudgeRequests, float64(n.Requests))
	ch <- prometheus.MustNewConstMetric(dNudgeDepth, prometheus.GaugeValue, float64(n.Depth))
}
