package controllers_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tetrav1 "github.com/tetra-messenger/tetra/api/v1alpha1"
	"github.com/tetra-messenger/tetra/controllers"
	"github.com/tetra-messenger/tetra/internal/operator/redistest"
)

// okRebuilds answers every rebuild call (POST .../admin/rebuild) of ns and
// counts them.
func okRebuilds(ns string) *rebuildCalls {
	calls := &rebuildCalls{}
	rebuilds.handle(ns, func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/admin/rebuild") {
			http.NotFound(w, r) // the operator's /readyz reads, for one
			return
		}
		calls.mu.Lock()
		calls.tokens = append(calls.tokens, r.Header.Get("Authorization"))
		calls.paths = append(calls.paths, r.URL.Path)
		calls.mu.Unlock()
		w.Write([]byte(`{"rebuilt":true}`))
	})
	return calls
}

// setPodReady sets a pod's Ready condition, as a kubelet would.
func setPodReady(t *testing.T, ns, name string, ready bool) {
	t.Helper()
	var p corev1.Pod
	if err := k8s.Get(ctx(), types.NamespacedName{Namespace: ns, Name: name}, &p); err != nil {
		t.Fatal(err)
	}
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}
	if err := k8s.Status().Update(ctx(), &p); err != nil {
		t.Fatal(err)
	}
}

func waitInSync(t *testing.T, replica *redistest.Server) {
	t.Helper()
	waitFor(t, wait, "replica in sync", func() (bool, string) {
		v, err := replica.Info("master_link_status")
		return v == "up", fmt.Sprint(v, err)
	})
}

// A Sentinel failover promotes a replica, which is another process (a new
// run_id): the operator counts it as a promotion, not a restart, because
// the new master's master_replid2 is the old master's master_replid.
// Not parallel, so the process-wide counters move for this test alone.
func TestSentinelPromotionIsCountedAsPromotion(t *testing.T) {
	needEnv(t)
	redistest.Available(t)
	ns := newNamespace(t)
	calls := okRebuilds(ns)
	a := redistest.Start(t, 0)
	b := redistest.Start(t, 0, "--replicaof", "127.0.0.1", fmt.Sprint(a.Port))
	waitInSync(t, b)
	s := redistest.StartSentinel(t, "tetra", a.Addr())
	baseSecrets(t, ns)
	createSecret(t, ns, "redis", map[string]string{"url": "redis://ignored.invalid:1/0"})
	create(t, messenger(ns, "chat", func(m *tetrav1.Messenger) {
		m.Spec.Redis = &tetrav1.RedisSpec{SecretRef: tetrav1.URLSecretRef{Name: "redis"},
			Sentinel: &tetrav1.RedisSentinelSpec{MasterName: "tetra", Addresses: []tetrav1.SentinelAddress{tetrav1.SentinelAddress(s.Addr())}}}
	}))
	runA, _ := a.Info("run_id")
	waitRedisIdentity(t, ns, func(r *tetrav1.RedisIdentity) bool { return r.RunID == runA })
	readyPod(t, ns, "chat", "chat-0")
	waitSettled(t, ns, "chat")
	promotions := counter(controllers.RedisFailoversTotal, controllers.FailoverPromotion)
	restarts := counter(controllers.RedisFailoversTotal, controllers.FailoverRestart)

	// Sentinel learns of the replica from the master's INFO; until then
	// it answers NOGOODSLAVE.
	waitFor(t, wait, "SENTINEL FAILOVER accepted", func() (bool, string) {
		out, err := s.Do("SENTINEL", "FAILOVER", "tetra")
		return err == nil && strings.Contains(out, "OK"), fmt.Sprint(out, err)
	})
	runB, _ := b.Info("run_id")
	m := waitRedisIdentity(t, ns, func(r *tetrav1.RedisIdentity) bool { return r.RunID == runB && r.Epoch == 1 })
	waitFor(t, wait, "rebuild by the endpoint", func() (bool, string) {
		m = msgr(t, ns, "chat")
		return m.Status.LastRebuild != nil && m.Status.LastRebuild.Method == "Endpoint" && m.Status.LastRebuild.Epoch == 1, fmt.Sprintf("%+v", m.Status.LastRebuild)
	})
	ev := waitEvent(t, ns, controllers.ReasonRedisFailoverDetected)
	if !strings.Contains(ev.Note, "(promotion)") {
		t.Errorf("event %q does not say promotion", ev.Note)
	}
	if got := counter(controllers.RedisFailoversTotal, controllers.FailoverPromotion) - promotions; got != 1 {
		t.Errorf("promotions counted: %v, want 1", got)
	}
	if got := counter(controllers.RedisFailoversTotal, controllers.FailoverRestart) - restarts; got != 0 {
		t.Errorf("restarts counted: %v, want 0 (a Sentinel promotion is no restart)", got)
	}
	if calls.count() != 1 {
		t.Errorf("rebuild calls %v, want 1", calls.paths)
	}
}

// When the operator sees the new Redis before the pods are ready again
// (after an outage they fail /readyz until they reach Redis, and become
// ready a probe period later), it waits for them and rebuilds by the
// endpoint instead of restarting them.
func TestRebuildWaitsForPodsToBeReady(t *testing.T) {
	needEnv(t)
	redistest.Available(t)
	t.Parallel()
	ns := newNamespace(t)
	calls := okRebuilds(ns)
	srv := redistest.Start(t, 0)
	redisMessenger(t, ns, srv.URL())
	runID, _ := srv.Info("run_id")
	waitRedisIdentity(t, ns, func(r *tetrav1.RedisIdentity) bool { return r.RunID == runID })
	readyPod(t, ns, "chat", "chat-0")
	_, d0 := waitSettled(t, ns, "chat")

	// Redis goes away: the pod fails its readiness probe.
	port := srv.Port
	srv.Stop()
	setPodReady(t, ns, "chat-0", false)
	srv2 := redistest.Start(t, port)
	runID2, _ := srv2.Info("run_id")
	waitRedisIdentity(t, ns, func(r *tetrav1.RedisIdentity) bool { return r.RunID == runID2 && r.Epoch == 1 })
	// Some passes see the pod unready: nothing is restarted meanwhile.
	time.Sleep(3 * pollInterval)
	if d, _ := deployment(t, ns, "chat"); d.Spec.Template.Annotations[tetrav1.RedisEpochAnnotation] != "" {
		t.Fatalf("restarted while the pod was not ready yet: %v", d.Spec.Template.Annotations)
	}
	if m := msgr(t, ns, "chat"); m.Status.LastRebuild != nil {
		t.Fatalf("rebuild recorded before the pod was ready: %+v", m.Status.LastRebuild)
	}
	setPodReady(t, ns, "chat-0", true)
	waitFor(t, wait, "rebuild by the endpoint", func() (bool, string) {
		m := msgr(t, ns, "chat")
		return m.Status.LastRebuild != nil && m.Status.LastRebuild.Epoch == 1, fmt.Sprintf("%+v", m.Status.LastRebuild)
	})
	m := msgr(t, ns, "chat")
	if m.Status.LastRebuild.Method != "Endpoint" || m.Status.Redis.RestartEpoch != 0 || calls.count() != 1 {
		t.Fatalf("rebuild %+v restart epoch %d calls %v: want one endpoint rebuild, no restart", m.Status.LastRebuild, m.Status.Redis.RestartEpoch, calls.paths)
	}
	if d, _ := deployment(t, ns, "chat"); hashOf(d) != hashOf(d0) || d.Spec.Template.Annotations[tetrav1.RedisEpochAnnotation] != "" {
		t.Fatalf("the pods were restarted: %v", d.Spec.Template.Annotations)
	}
}

// staleClient serves one Messenger from a snapshot, as a cache that has not
// seen the operator's last status patch yet does.
type staleClient struct {
	client.Client
	stale *tetrav1.Messenger
}

func (c staleClient) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	if m, ok := obj.(*tetrav1.Messenger); ok && key == client.ObjectKeyFromObject(c.stale) {
		c.stale.DeepCopyInto(m)
		return nil
	}
	return c.Client.Get(ctx, key, obj, opts...)
}

// A pass that reads a Messenger from before the failover was handled (a
// lagging cache) must not handle it again: one RedisFailoverDetected, one
// rebuild call.
func TestFailoverHandledOnceDespiteStaleCache(t *testing.T) {
	needEnv(t)
	redistest.Available(t)
	t.Parallel()
	ns := newNamespace(t)
	calls := okRebuilds(ns)
	srv := redistest.Start(t, 0)
	redisMessenger(t, ns, srv.URL())
	runID, _ := srv.Info("run_id")
	waitRedisIdentity(t, ns, func(r *tetrav1.RedisIdentity) bool { return r.RunID == runID })
	readyPod(t, ns, "chat", "chat-0")
	waitSettled(t, ns, "chat")
	stale := msgr(t, ns, "chat")

	port := srv.Port
	srv.Stop()
	srv2 := redistest.Start(t, port)
	runID2, _ := srv2.Info("run_id")
	waitFor(t, wait, "failover handled", func() (bool, string) {
		m := msgr(t, ns, "chat")
		return m.Status.Redis.RunID == runID2 && m.Status.LastRebuild != nil, fmt.Sprintf("%+v", m.Status)
	})
	if calls.count() != 1 {
		t.Fatalf("rebuild calls %v", calls.paths)
	}
	// A second reconciler whose reads of the Messenger are stale, run
	// twice (a change is acted on when seen twice).
	lagging := &controllers.MessengerReconciler{
		Client: staleClient{Client: reconciler.Client, stale: stale}, APIReader: reconciler.APIReader,
		Scheme: reconciler.Scheme, Recorder: reconciler.Recorder, DefaultImage: reconciler.DefaultImage,
		RedisPollInterval: pollInterval, Prober: reconciler.Prober, Rebuilder: reconciler.Rebuilder,
		OperatorNamespace: operatorNamespace, RebuildGrace: rebuildGrace,
	}
	req := ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "chat"}}
	for range 2 {
		if _, err := lagging.Reconcile(ctx(), req); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(time.Second) // events are recorded asynchronously
	if n := len(eventsWithReason(t, ns, controllers.ReasonRedisFailoverDetected)); n != 1 || calls.count() != 1 {
		t.Fatalf("%d RedisFailoverDetected events and rebuild calls %v: the failover was handled again from a stale Messenger", n, calls.paths)
	}
	if m := msgr(t, ns, "chat"); m.Status.Redis.Epoch != 1 {
		t.Fatalf("epoch %d, want 1", m.Status.Redis.Epoch)
	}
}
