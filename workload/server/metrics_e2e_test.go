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
