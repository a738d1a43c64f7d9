package metrics

import (
	"context"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tetra-messenger/tetra/workload/delivery"
	"github.com/tetra-messenger/tetra/workload/outbox"
)

// Snapshot is what the scrape reads from the running server.
type Snapshot struct {
	Delivery      delivery.Stats
	Outbox        []outbox.Stats
	InboundQueued int
	TuningReloads int64
	// Relay is the Kafka outbox relay's counters; nil without the Kafka
	// backend (then no tetra_relay_* series are exposed).
	Relay *RelaySnapshot
	// Nudge is the offline nudge's counters; nil when --nudge-url is not
	// set (then no tetra_nudge_* series but the latency histogram).
	Nudge *NudgeSnapshot
	// Sessions is the PostgreSQL store's counts of sessions the database
	// ended under its pool; nil with SQLite (then no tetra_store_*
	// series are exposed).
	Sessions *SessionSnapshot
}

// SessionSnapshot is what the scrape reads from the PostgreSQL store
// (postgres.SessionStats, copied so this package does not depend on it).
type SessionSnapshot struct {
	// Ended: idle pooled connections whose socket showed their session
	// had ended as the pool handed them out; each was pinged first.
	Ended int64
	// CommitRetries: group commits tried a second time because the
	// session of their connection ended under the first.
	CommitRetries int64
	// ReadRetries: reads (and BEGINs) tried a second time for the same
	// reason.
	ReadRetries int64
}

// RelaySnapshot is what the scrape reads from the Kafka outbox relay
// (kafka.RelayStats, copied so this package does not depend on Kafka).
type RelaySnapshot struct {
	// Active: this process holds the transactional id and relays.
	Active bool
	// Cursor: the last history Seq relayed (committed or read as
	// committed); -1 before the first session.
	Cursor int64
	// Transactions and Records committed to the outbox topic.
	Transactions int64
	Records      int64
	// Failures: relay sessions that ended in an error (each is retried;
	// fenced ones included).
	Failures int64
	// Fenced: sessions ended because another process took the
	// transactional id.
	Fenced int64
}

// Metrics holds the collectors. The zero value is not usable; use New.
type Metrics struct {
	reg          *prometheus.Registry
	accepted     prometheus.Counter
	duplicates   prometheus.Counter
	shed         *prometheus.CounterVec
	acceptLat    prometheus.Histogram
	deliveryLat  *prometheus.HistogramVec
	batchSize    prometheus.Histogram
	commitDur    prometheus.Histogram
	commitFail   prometheus.Counter
	connections  prometheus.Counter
	reconnects   prometheus.Counter
	readReceipts prometheus.Counter
	typing       prometheus.Counter
	presence     prometheus.Counter
	readFailed   *prometheus.CounterVec
	nudgeLat     prometheus.Histogram
	degraded     *prometheus.GaugeVec // degraded.go
	x            extra                // http.go
}

// Reasons of tetra_read_receipts_failed_total.
const (
	// ReasonInvalid: the store refused the receipt (a rule it breaks); the
	// other receipts of its batch were saved.
	ReasonInvalid = "invalid"
	// ReasonUnavailable: the store failed; the receipt's batch was dropped.
	ReasonUnavailable = "unavailable"
	// ReasonOverloaded: the read-receipt queue was full; never queued.
	ReasonOverloaded = "overloaded"
	// ReasonForbidden: the reader is not a member of the chat.
	ReasonForbidden = "forbidden"
	// ReasonNotFound: no such chat, or the messageId is not a message of
	// the chat (PROTOCOL.md §3).
	ReasonNotFound = "not_found"
)

// New builds the metrics with a scrape-time snapshot source.
func New(snapshot func(ctx context.Context) (Snapshot, error)) *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{reg: reg}
	f := func(c prometheus.Collector) { reg.MustRegister(c) }
	m.accepted = prometheus.NewCounter(prometheus.CounterOpts{Name: "tetra_messages_accepted_total", Help: "Messages committed to history and answered accepted (duplicates excluded)."})
	m.duplicates = prometheus.NewCounter(prometheus.CounterOpts{Name: "tetra_sends_duplicate_total", Help: "Sends answered with the original messageId (idempotent resend)."})
	m.shed = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tetra_sends_refused_total", Help: "Sends answered with an error and not stored, by error code (overloaded = shed)."}, []string{"code"})
	m.acceptLat = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tetra_accept_latency_seconds", Help: "From a send frame read to its accepted frame queued (includes the group commit).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16)})
	m.deliveryLat = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "tetra_delivery_latency_seconds", Help: "From acceptance to the first message frame queued on a recipient's socket, by path (fast, poll).",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 18)}, []string{"path"})
	m.batchSize = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tetra_group_commit_batch_messages", Help: "Messages per group-commit transaction.",
		Buckets: []float64{1, 2, 4, 8, 16, 24, 32, 36, 48, 64, 128}})
	m.commitDur = prometheus.NewHistogram(prometheus.HistogramOpts{Name: "tetra_group_commit_duration_seconds", Help: "Duration of one group-commit transaction.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 2, 14)})
	m.commitFail = prometheus.NewCounter(prometheus.CounterOpts{Name: "tetra_group_commit_failures_total", Help: "Group commits that failed (their sends were answered overloaded)."})
	m.connections = prometheus.NewCounter(prometheus.CounterOpts{Name: "tetra_connections_opened_total", Help: "WebSocket connections that completed hello."})
	m.reconnects = prometheus.NewCounter(prometheus.CounterOpts{Name: "tetra_reconnects_total", Help: "Connections of a (user, device) this process had seen connected before."})
	m.readReceipts = prometheus.NewCounter(prometheus.CounterOpts{Name: "tetra_read_receipts_total", Help: "Read receipts saved."})
	m.typing = prometheus.NewCounter(prometheus.CounterOpts{Name: "tetra_typing_forwarded_total", Help: "Typing frames forwarded to a chat's other members (PROTOCOL.md §7.4); dropped ones are not counted."})
	m.presence = prometheus.NewCounter(prometheus.CounterOpts{Name: "tetra_presence_changes_total", Help: "Presence changes (online or offline) this process announced (PROTOCOL.md §7.4)."})
	m.readFailed = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "tetra_read_receipts_failed_total", Help: "Read receipts refused or dropped (their sender got an error frame), by reason: invalid (refused by the decoder or the store; the rest of the batch was saved), unavailable (the store failed), overloaded (the queue was full), forbidden (not a member), not_found (no such chat, or the messageId is no message of it)."}, []string{"reason"})
	for _, c := range []prometheus.Collector{m.accepted, m.duplicates, m.shed, m.acceptLat, m.deliveryLat, m.batchSize, m.commitDur,
		m.commitFail, m.connections, m.reconnects, m.readReceipts, m.readFailed, m.typing, m.presence} {
		f(c)
	}
	// Every label value the docs list exists from the start, at 0, so a
	// rate() has a baseline and absent() in an alert means a scrape problem,
	// not a quiet server. The codes are PROTOCOL.md §3's send errors.
	for _, code := range []string{"invalid", "forbidden", "not_found", "too_large", "rate_limited", "credit_exhausted", "overloaded"} {
		m.shed.WithLabelValues(code)
	}
	for _, r := range []string{ReasonInvalid, ReasonUnavailable, ReasonOverloaded, ReasonForbidden, ReasonNotFound} {
		m.readFailed.WithLabelValues(r)
	}
	for _, path := range []string{"fast", "poll"} {
		m.deliveryLat.WithLabelValues(path)
	}
	m.x = newExtra(reg)
	m.nudgeLat = newNudgeLatency(reg)
	m.degraded = newDegraded(reg)
	f(collectors.NewGoCollector())
	f(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	f(&scrape{snapshot: snapshot})
	return m
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Registry is the underlying registry (for tests and extra collectors).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Accepted records one accepted send and its accept latency.
func (m *Metrics) Accepted(d time.Duration, duplicate bool) {
	if duplicate {
		m.duplicates.Inc()
		return
	}
	m.accepted.Inc()
	m.acceptLat.Observe(d.Seconds())
}

// Refused records a send answered with an error code.
func (m *Metrics) Refused(code string) { m.shed.WithLabelValues(code).Inc() }

// Committed records one group-commit transaction.
func (m *Metrics) Committed(n int, took time.Duration) {
	m.batchSize.Observe(float64(n))
	m.commitDur.Observe(took.Seconds())
}

// CommitFailed records a failed group commit.
func (m *Metrics) CommitFailed() { m.commitFail.Inc() }

// Delivered records first deliveries on path ("fast" or "poll"), d after
// acceptance.
func (m *Metrics) Delivered(path string, d time.Duration) {
	m.deliveryLat.WithLabelValues(path).Observe(d.Seconds())
}

// Connection records a connection that completed hello.
func (m *Metrics) Connection(reconnect bool) {
	m.connections.Inc()
	if reconnect {
		m.reconnects.Inc()
	}
}

// ReadReceipts records n saved read receipts.
func (m *Metrics) ReadReceipts(n int) { m.readReceipts.Add(float64(n)) }

// TypingForwarded records one forwarded typing frame (PROTOCOL.md §7.4).
func (m *Metrics) TypingForwarded() { m.typing.Inc() }

// PresenceChanged records one presence change this process announced.
func (m *Metrics) PresenceChanged() { m.presence.Inc() }

// ReadReceiptFailed records one dropped read receipt; reason is
// ReasonInvalid, ReasonUnavailable or ReasonOverloaded.
func (m *Metrics) ReadReceiptFailed(reason string) { m.readFailed.WithLabelValues(reason).Inc() }

var (
	dConnected    = prometheus.NewDesc("tetra_connected_clients", "WebSocket connections registered for live delivery.", nil, nil)
	dDeliveries   = prometheus.NewDesc("tetra_deliveries_total", "Message frames queued on sockets, by path: fast, poll (first sends) and redelivery (after a lease expired).", []string{"path"}, nil)
	dShedFast     = prometheus.NewDesc("tetra_fast_path_shed_total", "Fast-path deliveries dropped to the poller because the queue was full.", nil, nil)
	dAcks         = prometheus.NewDesc("tetra_acks_total", "Message ids acknowledged by clients that were waiting for an ack on that connection (acks of ids that were not are ignored, not counted).", nil, nil)
	dWithdrawals  = prometheus.NewDesc("tetra_withdrawals_total", "Connections withdrawn from live delivery, by reason (idle, overload, attempts, superseded, shutdown, owner-lapsed).", []string{"reason"}, nil)
	dReaped       = prometheus.NewDesc("tetra_owners_reaped_total", "Processes sharing the Redis index whose heartbeat lapsed and whose index state this process reaped.", nil, nil)
	dGCDeleted    = prometheus.NewDesc("tetra_gc_deleted_rows_total", "Outbox rows deleted by the waterline GC.", nil, nil)
	dGCPasses     = prometheus.NewDesc("tetra_gc_passes_total", "Waterline GC passes.", nil, nil)
	dRebuilds     = prometheus.NewDesc("tetra_index_rebuilds_total", "Waterline index rebuilds (from each connection's push window), by reason (cold-start, identity-changed, requested).", []string{"reason"}, nil)
	dSafeLine     = prometheus.NewDesc("tetra_safe_delete_line", "Last safe-delete line (outbox position) per partition.", []string{"partition"}, nil)
	dDepth        = prometheus.NewDesc("tetra_outbox_depth_rows", "Rows in the outbox, per partition.", []string{"partition"}, nil)
	dOldest       = prometheus.NewDesc("tetra_outbox_oldest_age_seconds", "Age of the oldest outbox row (0 when empty): the one to alarm on.", nil, nil)
	dInbound      = prometheus.NewDesc("tetra_inbound_queue_messages", "Sends waiting for the group commit.", nil, nil)
	dDeferred     = prometheus.NewDesc("tetra_push_window_deferred_total", "Sends left waiting in the outbox because the connection's push window (max-pending unacknowledged frames) was full; they go as acknowledgements free it.", nil, nil)
	dBehind       = prometheus.NewDesc("tetra_connections_behind", "Connections with messages waiting behind a full push window.", nil, nil)
	dEnqFail      = prometheus.NewDesc("tetra_socket_queue_full_total", "Frames not queued because a connection's outbound queue was full (re-delivered after the lease).", nil, nil)
	dReloads      = prometheus.NewDesc("tetra_tuning_reloads_total", "Live tuning changes applied from the tuning directory.", nil, nil)
	dScrapeErrors = prometheus.NewDesc("tetra_scrape_errors_total", "Scrapes that could not read the outbox (their outbox gauges are missing).", nil, nil)

	dRelayTxns    = prometheus.NewDesc("tetra_relay_transactions_total", "Kafka transactions the outbox relay committed (Kafka backend only).", nil, nil)
	dRelayRecords = prometheus.NewDesc("tetra_relay_records_total", "Records the outbox relay committed to the outbox topic (one per member per message).", nil, nil)
	dRelayFails   = prometheus.NewDesc("tetra_relay_failures_total", "Relay sessions that ended in an error and were retried (fenced ones included).", nil, nil)
	dRelayFenced  = prometheus.NewDesc("tetra_relay_fenced_total", "Relay sessions ended because another process took the transactional id.", nil, nil)
	dRelayActive  = prometheus.NewDesc("tetra_relay_active", "1 while this process holds the transactional id and relays, else 0 (connecting, retrying or standing by).", nil, nil)
	dRelayCursor  = prometheus.NewDesc("tetra_relay_cursor", "Last history Seq the relay committed or read as committed (-1 before the first session).", nil, nil)

	dSessionsEnded = prometheus.NewDesc("tetra_store_sessions_ended_total", "Idle pooled PostgreSQL connections whose socket showed, as the pool handed them out, that the database had ended their session (a restart, a failover, pg_terminate_backend): bytes waiting or a closed peer; each was pinged and, dead, replaced (PostgreSQL only).", nil, nil)
	dStoreRetries  = prometheus.NewDesc("tetra_store_retries_total", "Store operations tried a second time because the database ended the session of their connection under the first, by op: commit (a group commit), read (a read, or the BEGIN of a transaction) (PostgreSQL only).", []string{"op"}, nil)
)

type scrape struct {
	snapshot func(ctx context.Context) (Snapshot, error)
	errors   atomic.Int64
}

func (s *scrape) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{dConnected, dDeliveries, dShedFast, dAcks, dWithdrawals, dReaped, dGCDeleted, dGCPasses,
		dRebuilds, dSafeLine, dDepth, dOldest, dInbound, dDeferred, dBehind, dEnqFail, dReloads, dScrapeErrors,
		dRelayTxns, dRelayRecords, dRelayFails, dRelayFenced, dRelayActive, dRelayCursor, dSessionsEnded, dStoreRetries} {
		ch <- d
	}
	for _, d := range nudgeDescs {
		ch <- d
	}
}

func (s *scrape) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	snap, err := s.snapshot(ctx)
	g := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	c := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, l...)
	}
	st := snap.Delivery
	g(dConnected, float64(st.Connected))
	c(dDeliveries, float64(st.FastDeliveries), "fast")
	c(dDeliveries, float64(st.PollDeliveries), "poll")
	c(dDeliveries, float64(st.Redeliveries), "redelivery")
	c(dShedFast, float64(st.FastShed))
	c(dAcks, float64(st.Acks))
	for _, r := range []string{"idle", "overload", "attempts", "superseded", "shutdown", "owner-lapsed"} {
		c(dWithdrawals, float64(st.Withdrawals[r]), r)
	}
	c(dReaped, float64(st.OwnersReaped))
	c(dGCDeleted, float64(st.GCDeleted))
	c(dGCPasses, float64(st.GCPasses))
	for _, r := range []string{"cold-start", "identity-changed", "requested"} {
		c(dRebuilds, float64(st.Rebuilds[r]), r)
	}
	for p, line := range st.SafeLine {
		g(dSafeLine, float64(line), strconv.Itoa(int(p)))
	}
	g(dInbound, float64(snap.InboundQueued))
	c(dDeferred, float64(st.Deferred))
	g(dBehind, float64(st.Behind))
	c(dEnqFail, float64(st.EnqueueFailures))
	c(dReloads, float64(snap.TuningReloads))
	if ss := snap.Sessions; ss != nil {
		c(dSessionsEnded, float64(ss.Ended))
		c(dStoreRetries, float64(ss.CommitRetries), "commit")
		c(dStoreRetries, float64(ss.ReadRetries), "read")
	}
	if rs := snap.Relay; rs != nil {
		c(dRelayTxns, float64(rs.Transactions))
		c(dRelayRecords, float64(rs.Records))
		c(dRelayFails, float64(rs.Failures))
		c(dRelayFenced, float64(rs.Fenced))
		active := 0.0
		if rs.Active {
			active = 1
		}
		g(dRelayActive, active)
		g(dRelayCursor, float64(rs.Cursor))
	}
	collectNudge(ch, snap.Nudge)
	if err != nil {
		c(dScrapeErrors, float64(s.errors.Add(1)))
		return
	}
	c(dScrapeErrors, float64(s.errors.Load()))
	var oldest time.Time
	for _, o := range snap.Outbox {
		g(dDepth, float64(o.Depth), strconv.Itoa(int(o.Partition)))
		if !o.OldestAt.IsZero() && (oldest.IsZero() || o.OldestAt.Before(oldest)) {
			oldest = o.OldestAt
		}
	}
	age := 0.0
	if !oldest.IsZero() {
		age = time.Since(oldest).Seconds()
	}
	g(dOldest, age)
}
