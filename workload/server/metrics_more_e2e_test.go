package server_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// /metrics counts HTTP responses by route pattern and status (bounded: two
// chats' histories are one series), WebSocket closes by code, and says
// what runs: tetra_build_info{version,goversion,store,outbox,index} 1
// (issue 13, point 8). Before, none of these series existed.
func TestE2EMetricsRoutesClosesBuild(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		reg := e.srv.Metrics().Registry()
		counter := func(metric, labels string) float64 { return seriesValue(t, reg, metric, labels) }
		chat := e.createDirect("alice", "bob")
		other := e.createDirect("alice", "carol")
		tok := e.token("alice")
		for _, id := range []string{chat.ChatID, other.ChatID} {
			e.page("alice", id, "")
		}
		e.call("GET", "/api/chats", "", nil)     // 401
		e.call("DELETE", "/api/chats", tok, nil) // 405
		e.call("GET", "/no/such/path", tok, nil) // 404
		e.call("GET", "/healthz", "", nil)       // 200
		if got := counter("tetra_http_responses_total", `code="200",route="GET /api/chats/{chatId}/messages"`); got != 2 {
			t.Errorf("history answers counted %v under the pattern, want 2", got)
		}
		for labels, want := range map[string]float64{
			`code="401",route="GET /api/chats"`:  1,
			`code="405",route="unmatched"`:       1,
			`code="404",route="unmatched"`:       1,
			`code="200",route="GET /healthz"`:    1,
			`code="201",route="POST /api/chats"`: 2,
		} {
			if got := counter("tetra_http_responses_total", labels); got != want {
				t.Errorf("tetra_http_responses_total{%s} = %v, want %v", labels, got, want)
			}
		}

		// Closes: superseded (4001), bad frames (1008), a frame too big
		// (1009), an expired token (4005), the client closing (1000).
		old := e.dial("alice", dialOpts{device: "d"})
		e.dial("alice", dialOpts{device: "d"})
		old.expectClose(4001)
		bad := e.dial("alice", dialOpts{device: "bad"})
		for i := range 25 {
			if bad.writeRawE(websocket.MessageText, []byte(fmt.Sprint("garbage ", i))) != nil {
				break
			}
		}
		bad.expectClose(websocket.StatusPolicyViolation)
		big := e.dial("alice", dialOpts{device: "big"})
		_ = big.writeRawE(websocket.MessageText, []byte(strings.Repeat("x", 100<<10)))
		big.expectClose(websocket.StatusMessageTooBig)
		short, err := e.srv.Signer().Issue("alice", 1500*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		e.dial("alice", dialOpts{device: "short", token: short}).expectClose(4005)
		leaving := e.dial("bob", dialOpts{})
		leaving.conn.Close(websocket.StatusNormalClosure, "bye")
		ws := e.dial("carol", dialOpts{})
		// Counted before the server's close frame goes out; 1009 and 1000
		// are counted once the reader sees the end, just after.
		for code, want := range map[int]float64{4001: 1, 1008: 1, 4005: 1} {
			if got := counter("tetra_websocket_closes_total", fmt.Sprintf("code=%q", fmt.Sprint(code))); got != want {
				t.Errorf("closes with %d: %v, want %v", code, got, want)
			}
		}
		eventually(t, waitLong, "the frame too big counted as 1009, the client's close as 1000", func() bool {
			return counter("tetra_websocket_closes_total", `code="1009"`) == 1 && counter("tetra_websocket_closes_total", `code="1000"`) >= 1
		})
		if got := counter("tetra_http_responses_total", `code="101",route="GET /ws"`); got < 6 {
			t.Errorf("upgrades counted %v, want at least 6", got)
		}

		want := map[string]string{"sqlite+memory": `store="sqlite",outbox="sqlite",index="memory"`,
			"postgres+redis":       `store="postgres",outbox="postgres",index="redis"`,
			"sqlite+kafka":         `store="sqlite",outbox="kafka",index="memory"`,
			"postgres+kafka+redis": `store="postgres",outbox="kafka",index="redis"`}[b.name]
		n, err := testutil.GatherAndCount(reg, "tetra_build_info")
		if err != nil || n != 1 {
			t.Fatalf("tetra_build_info: %d series, %v", n, err)
		}
		mfs, _ := reg.Gather()
		for _, mf := range mfs {
			if mf.GetName() != "tetra_build_info" {
				continue
			}
			m := mf.Metric[0]
			var ls []string
			for _, l := range m.Label {
				if l.GetName() == "version" || l.GetName() == "goversion" {
					if l.GetValue() == "" {
						t.Errorf("tetra_build_info: empty %s", l.GetName())
					}
					continue
				}
				ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			got := strings.Join(ls, ",")
			for _, w := range strings.Split(want, ",") {
				if !strings.Contains(got, w) {
					t.Errorf("tetra_build_info labels %s, want %s", got, want)
				}
			}
			if m.Gauge.GetValue() != 1 {
				t.Errorf("tetra_build_info = %v, want 1", m.Gauge.GetValue())
			}
		}

		// Shutdown closes the rest with 1001.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := e.srv.Shutdown(ctx); err != nil {
			t.Fatal(err)
		}
		ws.expectClose(websocket.StatusGoingAway)
		if got := counter("tetra_websocket_closes_total", `code="1001"`); got < 1 {
			t.Errorf("closes with 1001: %v, want at least 1", got)
		}
	})
}

// seriesValue is the value of the series of metric in reg whose labels,
// written name="value" in the order Gather sorts them (by name) and joined
// by commas, are labels; 0 when there is none (logged). It fails the test
// when the metric has no series at all.
func seriesValue(t testing.TB, reg prometheus.Gatherer, metric, labels string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var seen strings.Builder
	for _, mf := range mfs {
		if mf.GetName() != metric {
			continue
		}
		for _, m := range mf.Metric {
			var ls []string
			for _, l := range m.Label {
				ls = append(ls, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
			}
			if strings.Join(ls, ",") == labels {
				if m.Counter != nil {
					return m.Counter.GetValue()
				}
				return m.Gauge.GetValue()
			}
			fmt.Fprintf(&seen, "%v\n", ls)
		}
		t.Logf("%s{%s} absent; series:\n%s", metric, labels, seen.String())
		return 0
	}
	t.Fatalf("no series of %s", metric)
	return 0
}
