package metrics

import (
	"context"
	"errors"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

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
	m := New(func(context.Context) (Snapshot, error) { return Snapshot{}, errors.New("down") })
	out := scrapeText(t, m)
	if !strings.Contains(out, "tetra_scrape_errors_total 1") || strings.Contains(out, "tetra_outbox_depth_rows{") {
		t.Fatalf("an unreachable outbox must be flagged and its gauges left out:\n%s", grep(out, "tetra_"))
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
