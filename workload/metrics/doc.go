// Package metrics exposes the workload's numbers in the Prometheus format
// (github.com/prometheus/client_golang), on its own registry.
//
// Two kinds of metric live here. Events observed as they happen go through
// small hook methods (Accepted, Shed, Committed, Connection, ...) that the
// server calls; counters and gauges the engine already keeps are read at
// scrape time from a Snapshot function, so the hot path pays nothing for
// them. Names follow Prometheus conventions: the tetra_ prefix, base units
// in the name (_seconds, _rows), _total on counters.
//
// The one to alarm on is tetra_outbox_oldest_age_seconds: depth 100k at
// 30 ms old is fine, depth 100 at 8 minutes is a fire (paper, "The clearest
// signal"). tetra_deliveries_total / tetra_messages_accepted_total is the
// deliveries-per-accepted ratio, a health signal near 1.0.
package metrics
