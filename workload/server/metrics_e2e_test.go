package server_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/server"
)

// /metrics serves the Prometheus exposition of the running server, and the
// counters move with real traffic.
func TestE2EMetrics(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, func(*server.Config) {})
		chat := e.createDirect("alice", "bob")
		alice := e.dial("alice", dialOpts{})
		bob := e.dial("bob", dialOpts{})
		acc := alice.sendOK(chat.ChatID, "m-1", "hello")
		bob.next("message", messageID(acc.MessageID))
		eventually(t, 10*time.Second, "metrics reflect the exchange", func() bool {
			resp, err := http.Get(e.srv.URL() + "/metrics")
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			raw, _ := io.ReadAll(resp.Body)
			body := string(raw)
			return resp.StatusCode == 200 &&
				strings.Contains(body, "tetra_messages_accepted_total 1") &&
				strings.Contains(body, "tetra_connected_clients 2") &&
				strings.Contains(body, "tetra_outbox_oldest_age_seconds") &&
				// the first delivery comes by the fast path, or by the
				// poller when it got there first (Kafka mode, a busy machine)
				(strings.Contains(body, `tetra_deliveries_total{path="fast"} 1`) ||
					strings.Contains(body, `tetra_deliveries_total{path="poll"} 1`))
		})
	})
}

// With Config.MetricsAddr, /metrics is served on its own listener and not
// on the API's address (404 there), so a NetworkPolicy can separate who
// scrapes from who chats (docs/operator.md, spec.networkPolicy).
func TestE2EMetricsOnOwnListener(t *testing.T) {
	t.Parallel()
	b := customBackend("embedded-metrics-addr", func(c *server.Config) { c.MetricsAddr = "127.0.0.1:0" })
	e := newEnv(t, b, func(*server.Config) {})
	if e.srv.MetricsAddr() == "" || e.srv.MetricsAddr() == e.srv.Addr() {
		t.Fatalf("MetricsAddr() = %q next to Addr() %q: want a listener of its own", e.srv.MetricsAddr(), e.srv.Addr())
	}
	get := func(url string) (int, string) {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		raw, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(raw)
	}
	if code, body := get("http://" + e.srv.MetricsAddr() + "/metrics"); code != 200 || !strings.Contains(body, "tetra_messages_accepted_total") {
		t.Fatalf("metrics listener /metrics: %d %.200q", code, body)
	}
	if code, _ := get(e.srv.URL() + "/metrics"); code != http.StatusNotFound {
		t.Fatalf("API listener /metrics: %d, want 404 (served on the metrics listener only)", code)
	}
	if code, _ := get("http://" + e.srv.MetricsAddr() + "/healthz"); code != http.StatusNotFound {
		t.Fatalf("metrics listener /healthz: %d, want 404 (only /metrics there)", code)
	}
	if code, _ := get(e.srv.URL() + "/healthz"); code != 200 {
		t.Fatalf("API listener /healthz: %d", code)
	}
}
