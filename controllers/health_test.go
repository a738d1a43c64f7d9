package controllers_test

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tetrav1 "github.com/tetra-messenger/tetra/api/v1alpha1"
	"github.com/tetra-messenger/tetra/controllers"
)

// A pod that stays ready but says in its /readyz body that it is degraded
// ({"status":"degraded","reason":...}: serving, with live delivery
// impaired, for example while Redis is away) makes the Messenger
// Degraded=True WorkloadDegraded naming the pod and the reason; when the
// pod recovers, so does the condition.
func TestDegradedFromWorkloadReadyz(t *testing.T) {
	needEnv(t)
	t.Parallel()
	ns := newNamespace(t)
	var degraded atomic.Bool
	degraded.Store(true)
	rebuilds.handle(ns, func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/readyz") {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		if degraded.Load() {
			w.Write([]byte(`{"status":"degraded","reason":"index unreachable: dial tcp 10.0.0.9:6379: connection refused","store":"ok"}`))
			return
		}
		w.Write([]byte(`{"status":"ok","store":"ok","index":"ok","commits":"ok"}`))
	})
	baseSecrets(t, ns)
	create(t, messenger(ns, "chat"))
	readyPod(t, ns, "chat", "chat-0")
	waitFor(t, wait, "Degraded WorkloadDegraded", func() (bool, string) {
		c := meta.FindStatusCondition(msgr(t, ns, "chat").Status.Conditions, tetrav1.ConditionDegraded)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == controllers.ReasonWorkloadDegraded &&
			strings.Contains(c.Message, "pod chat-0") && strings.Contains(c.Message, "index unreachable"), fmt.Sprintf("%+v", c)
	})
	degraded.Store(false)
	waitFor(t, wait, "Degraded cleared", func() (bool, string) {
		c := meta.FindStatusCondition(msgr(t, ns, "chat").Status.Conditions, tetrav1.ConditionDegraded)
		return c != nil && c.Status == metav1.ConditionFalse, fmt.Sprintf("%+v", c)
	})
}
