package metrics

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/tetra-messenger/tetra/workload/delivery"
	"github.com/tetra-messenger/tetra/workload/outbox"
)

func scrapeText(t *testing.T, m *Metrics) string {
	t.Helper()
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	b, _ := io.ReadAll(rec.Body)
	return string(b)
}

func TestExposition(t *testing.T) {
	m := New(func(context.Context) (Snapshot, error) {
		return Snapshot{
			Delivery: delivery.Stats{Connected: 3, FastDeliveries: 10, PollDeliveries: 2, Redeliveries: 1,
				Withdrawals: map[string]int64{"attempts": 4}, Rebuilds: map[string]int64{"cold-start": 1}, SafeLine: map[int32]int64{0: 77}},
			Outbox: []outbox.Stats{{Partition: 0, Depth: 5, OldestAt: time.Now().Add(-90 * time.Second)}},
		}, nil
	})
	m.Accepted(3*time.Millisecond, false)
	m.Accepted(time.Millisecond, true)
	m.Refused("overloaded")
	m.Committed(36, 2*time.Millisecond)
	m.Delivered("fast", 4*time.Millisecond)
	m.Connection(true)
	out := scrapeText(t, m)
	for _, want := range []string{
		"tetra_messages_accepted_total 1",
		"tetra_sends_duplicate_total 1",
		`tetra_sends_refused_total{code="overloaded"} 1`,
		"tetra_connected_clients 3",
		`tetra_deliveries_total{path="fast"} 10`,
		`tetra_deliveries_total{path="redelivery"} 1`,
		`tetra_withdrawals_total{reason="attempts"} 4`,
		`tetra_index_rebuilds_total{reason="cold-start"} 1`,
		`tetra_safe_delete_line{partition="0"} 77`,
		`tetra_outbox_depth_rows{partition="0"} 5`,
		"tetra_group_commit_batch_messages_count 1",
		`tetra_delivery_latency_seconds_count{path="fast"} 1`,
		"tetra_reconnects_total 1",
		"tetra_scrape_errors_total 0",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("exposition lacks %q", want)
		}
	}
	if !strings.Contains(out, "tetra_outbox_oldest_age_seconds 9") && !strings.Contains(out, "tetra_outbox_oldest_age_seconds 8") {
		t.Errorf("oldest age is not about 90 s:\n%s", grep(out, "oldest"))
	}
}

func TestScrapeSurvivesAnUnreachableOutbox(t *testing.T) {
	var down atomic.Bool
	down.Store(true)
	m := New(func(context.Context) (Snapshot, error) {
		if down.Load() {
			return Snapshot{}, errors.New("down")
		}
		return Snapshot{Outbox: []outbox.Stats{{Partition: 0, Depth: 2}}}, nil
	})
	out := scrapeText(t, m)
	if !strings.Contains(out, "tetra_scrape_errors_total 1") || strings.Contains(out, "tetra_outbox_depth_rows{") {
		t.Fatalf("an unreachable outbox must be flagged and its gauges left out:\n%s", grep(out, "tetra_"))
	}
	// A counter: it keeps counting failed scrapes and never goes back.
	out = scrapeText(t, m)
	if !strings.Contains(out, "tetra_scrape_errors_total 2") || !strings.Contains(out, "# TYPE tetra_scrape_errors_total counter") {
		t.Fatalf("second failed scrape:\n%s", grep(out, "scrape_errors"))
	}
	down.Store(false)
	out = scrapeText(t, m)
	if !strings.Contains(out, "tetra_scrape_errors_total 2") || !strings.Contains(out, `tetra_outbox_depth_rows{partition="0"} 2`) {
		t.Fatalf("after recovery the counter stays and the gauges return:\n%s", grep(out, "tetra_"))
	}
}

func TestRelayMetrics(t *testing.T) {
	var relay *RelaySnapshot
	m := New(func(context.Context) (Snapshot, error) { return Snapshot{Relay: relay}, nil })
	if out := scrapeText(t, m); strings.Contains(out, "tetra_relay_") {
		t.Fatalf("relay series without a relay (PostgreSQL outbox):\n%s", grep(out, "tetra_relay_"))
	}
	relay = &RelaySnapshot{Active: true, Cursor: 1234, Transactions: 17, Records: 51, Failures: 3, Fenced: 1}
	out := scrapeText(t, m)
	for _, want := range []string{
		"# TYPE tetra_relay_transactions_total counter",
		"tetra_relay_transactions_total 17",
		"# TYPE tetra_relay_records_total counter",
		"tetra_relay_records_total 51",
		"# TYPE tetra_relay_failures_total counter",
		"tetra_relay_failures_total 3",
		"# TYPE tetra_relay_fenced_total counter",
		"tetra_relay_fenced_total 1",
		"# TYPE tetra_relay_active gauge",
		"tetra_relay_active 1",
		"# TYPE tetra_relay_cursor gauge",
		"tetra_relay_cursor 1234",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("exposition lacks %q:\n%s", want, grep(out, "tetra_relay_"))
		}
	}
	relay = &RelaySnapshot{Cursor: -1}
	out = scrapeText(t, m)
	if !strings.Contains(out, "tetra_relay_active 0") || !strings.Contains(out, "tetra_relay_cursor -1") {
		t.Errorf("standby relay:\n%s", grep(out, "tetra_relay_"))
	}
}

// TestSessionMetrics: the PostgreSQL store's counts of ended sessions are
// exposed as counters, and not at all without PostgreSQL.
func TestSessionMetrics(t *testing.T) {
	var sessions *SessionSnapshot
	m := New(func(context.Context) (Snapshot, error) { return Snapshot{Sessions: sessions}, nil })
	if out := scrapeText(t, m); strings.Contains(out, "tetra_store_") {
		t.Fatalf("store session series without PostgreSQL:\n%s", grep(out, "tetra_store_"))
	}
	sessions = &SessionSnapshot{Ended: 7, CommitRetries: 2, ReadRetries: 5}
	out := scrapeText(t, m)
	for _, want := range []string{
		"# TYPE tetra_store_sessions_ended_total counter",
		"tetra_store_sessions_ended_total 7",
		"# TYPE tetra_store_retries_total counter",
		`tetra_store_retries_total{op="commit"} 2`,
		`tetra_store_retries_total{op="read"} 5`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("exposition lacks %q:\n%s", want, grep(out, "tetra_store_"))
		}
	}
}

// TestLint: every exposed metric follows the Prometheus naming
// conventions (units, _total on counters and only on counters).
func TestLint(t *testing.T) {
	m := New(func(context.Context) (Snapshot, error) {
		return Snapshot{Relay: &RelaySnapshot{Active: true}, Sessions: &SessionSnapshot{}, Outbox: []outbox.Stats{{Partition: 0, Depth: 1}}}, nil
	})
	lintTetra(t, m)
}

// lintTetra fails t for every Prometheus lint problem of a tetra_ metric
// m exposes.
func lintTetra(t *testing.T, m *Metrics) {
	t.Helper()
	problems, err := testutil.GatherAndLint(m.Registry())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "tetra_") {
			t.Errorf("%s: %s", p.Metric, p.Text)
		}
	}
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// The labelled series the docs list are there before the first event, at
// 0 (a fresh tester found them missing until first used).
func TestLabelledSeriesExistFromTheStart(t *testing.T) {
	m := New(func(context.Context) (Snapshot, error) { return Snapshot{}, nil })
	text := scrapeText(t, m)
	for _, want := range []string{
		`tetra_sends_refused_total{code="overloaded"} 0`,
		`tetra_sends_refused_total{code="rate_limited"} 0`,
		`tetra_delivery_latency_seconds_count{path="fast"} 0`,
		`tetra_delivery_latency_seconds_count{path="poll"} 0`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("missing at start: %s", want)
		}
	}
}

// The series of issue 13, point 8: HTTP responses by route and code,
// WebSocket closes by code (every listed code at 0 from the start), the
// build; all lint clean.
func TestRoutesClosesAndBuild(t *testing.T) {
	m := New(func(context.Context) (Snapshot, error) { return Snapshot{}, nil })
	before := scrapeText(t, m)
	for _, c := range CloseCodes {
		if want := fmt.Sprintf(`tetra_websocket_closes_total{code="%d"} 0`, c); !strings.Contains(before, want) {
			t.Errorf("missing at start: %s", want)
		}
	}
	m.HTTPResponse("GET /api/chats", 200)
	m.HTTPResponse("GET /api/chats", 200)
	m.HTTPResponse(RouteUnmatched, 405)
	m.WebSocketClosed(4001)
	m.SetBuildInfo("postgres", "kafka", "redis")
	m.SetBuildInfo("sqlite", "sqlite", "memory") // replaces, never two series
	out := scrapeText(t, m)
	for _, want := range []string{
		`tetra_http_responses_total{code="200",route="GET /api/chats"} 2`,
		`tetra_http_responses_total{code="405",route="unmatched"} 1`,
		`tetra_websocket_closes_total{code="4001"} 1`,
		`index="memory",outbox="sqlite",store="sqlite",version="`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("exposition lacks %s:\n%s", want, grep(out, "tetra_build_info"))
		}
	}
	if n := strings.Count(out, "\ntetra_build_info{"); n != 1 {
		t.Errorf("%d tetra_build_info series, want 1", n)
	}
	lintTetra(t, m)
}
