package controllers_test

import (
	"fmt"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/tetra-messenger/tetra/controllers"
)

// counter reads one series of an operator counter.
func counter(c *prometheus.CounterVec, label string) float64 {
	return testutil.ToFloat64(c.WithLabelValues(label))
}

// waitCounterAbove waits until the series has grown past before. The
// counters are process-wide and the tests run in parallel, so only growth
// is asserted; the increment follows the status patch the test saw, hence
// the wait.
func waitCounterAbove(t *testing.T, c *prometheus.CounterVec, name, label string, before float64) {
	t.Helper()
	waitFor(t, wait, fmt.Sprintf("%s{%s} above %v", name, label, before), func() (bool, string) {
		v := counter(c, label)
		return v > before, fmt.Sprint(v)
	})
}

// TestOperatorMetricsRegistered: the counters are on controller-runtime's
// registry (what the manager serves), with every label value present from
// the start, and pass the Prometheus naming lint.
func TestOperatorMetricsRegistered(t *testing.T) {
	want := map[string]int{
		"tetra_operator_reconciles_total":      len(controllers.Outcomes),
		"tetra_operator_redis_failovers_total": 2,
		"tetra_operator_rebuilds_total":        2,
	}
	for name, n := range want {
		got, err := testutil.GatherAndCount(ctrlmetrics.Registry, name)
		if err != nil {
			t.Fatal(err)
		}
		if got != n {
			t.Errorf("%s: %d series on the controller-runtime registry, want %d", name, got, n)
		}
		problems, err := testutil.GatherAndLint(ctrlmetrics.Registry, name)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range problems {
			t.Errorf("%s: %s", p.Metric, p.Text)
		}
	}
}
