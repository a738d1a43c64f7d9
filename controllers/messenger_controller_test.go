package controllers_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tetrav1 "github.com/tetra-messenger/tetra/api/v1alpha1"
	"github.com/tetra-messenger/tetra/controllers"
	"github.com/tetra-messenger/tetra/internal/operator/redistest"
	"github.com/tetra-messenger/tetra/internal/operator/render"
	"github.com/tetra-messenger/tetra/workload/config"
)

const jwtSecret = "0123456789abcdef-test-jwt-secret"

// waitFor polls cond until it holds or timeout passes; the failure shows
// cond's last explanation. (envtest has no event to wait on for "the
// controller wrote X"; polling the API server is the signal.)
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, why := cond()
		if ok {
			return
		}
		last = why
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s: %s", timeout, what, last)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

const wait = 30 * time.Second

func ctx() context.Context { return context.Background() }

func createSecret(t *testing.T, ns, name string, data map[string]string) *corev1.Secret {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, StringData: data}
	if err := k8s.Create(ctx(), s); err != nil {
		t.Fatal(err)
	}
	return s
}

func baseSecrets(t *testing.T, ns string) {
	t.Helper()
	createSecret(t, ns, "pg", map[string]string{"url": "postgres://tetra@db/tetra"})
	createSecret(t, ns, "jwt", map[string]string{"secret": jwtSecret})
}

func messenger(ns, name string, mutate ...func(*tetrav1.Messenger)) *tetrav1.Messenger {
	m := &tetrav1.Messenger{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: tetrav1.MessengerSpec{
			PostgreSQL: tetrav1.PostgreSQLSpec{SecretRef: tetrav1.URLSecretRef{Name: "pg"}},
			JWT:        tetrav1.JWTSpec{SecretRef: tetrav1.JWTSecretRef{Name: "jwt"}},
		},
	}
	for _, f := range mutate {
		f(m)
	}
	return m
}

func create(t *testing.T, m *tetrav1.Messenger) *tetrav1.Messenger {
	t.Helper()
	if err := k8s.Create(ctx(), m); err != nil {
		t.Fatal(err)
	}
	return m
}

func get[T client.Object](t *testing.T, obj T, ns, name string) (T, bool) {
	t.Helper()
	err := k8s.Get(ctx(), types.NamespacedName{Namespace: ns, Name: name}, obj)
	if apierrors.IsNotFound(err) {
		return obj, false
	}
	if err != nil {
		t.Fatal(err)
	}
	return obj, true
}

func deployment(t *testing.T, ns, name string) (*appsv1.Deployment, bool) {
	return get(t, &appsv1.Deployment{}, ns, name)
}

func configMap(t *testing.T, ns, name string) (*corev1.ConfigMap, bool) {
	return get(t, &corev1.ConfigMap{}, ns, name+"-tuning")
}

func msgr(t *testing.T, ns, name string) *tetrav1.Messenger {
	m, ok := get(t, &tetrav1.Messenger{}, ns, name)
	if !ok {
		t.Fatalf("messenger %s/%s gone", ns, name)
	}
	return m
}

// update re-reads the Messenger and applies mutate, retrying on conflicts.
func update(t *testing.T, ns, name string, mutate func(*tetrav1.Messenger)) {
	t.Helper()
	for i := 0; ; i++ {
		m := msgr(t, ns, name)
		mutate(m)
		err := k8s.Update(ctx(), m)
		if err == nil {
			return
		}
		if !apierrors.IsConflict(err) || i > 10 {
			t.Fatal(err)
		}
	}
}

func hashOf(d *appsv1.Deployment) string {
	return d.Spec.Template.Annotations[tetrav1.ConfigHashAnnotation]
}

// waitReady waits until the children exist and the status describes the
// current generation.
func waitSettled(t *testing.T, ns, name string) (*tetrav1.Messenger, *appsv1.Deployment) {
	t.Helper()
	var m *tetrav1.Messenger
	var d *appsv1.Deployment
	waitFor(t, wait, "children and status", func() (bool, string) {
		m = msgr(t, ns, name)
		var ok bool
		d, ok = deployment(t, ns, name)
		if !ok {
			return false, "no deployment"
		}
		if m.Status.ObservedGeneration != m.Generation || m.Status.ConfigHash != hashOf(d) {
			return false, fmt.Sprintf("status gen %d/%d hash %q/%q", m.Status.ObservedGeneration, m.Generation, m.Status.ConfigHash, hashOf(d))
		}
		return true, ""
	})
	return m, d
}

func eventsWithReason(t *testing.T, ns, reason string) []eventsv1.Event {
	t.Helper()
	var list eventsv1.EventList
	if err := k8s.List(ctx(), &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var out []eventsv1.Event
	for _, e := range list.Items {
		if e.Reason == reason {
			out = append(out, e)
		}
	}
	return out
}

func waitEvent(t *testing.T, ns, reason string) eventsv1.Event {
	t.Helper()
	var ev eventsv1.Event
	waitFor(t, wait, "event "+reason, func() (bool, string) {
		evs := eventsWithReason(t, ns, reason)
		if len(evs) == 0 {
			return false, "none yet"
		}
		ev = evs[len(evs)-1]
		return true, ""
	})
	return ev
}

func TestCreateRendersChildren(t *testing.T) {
	needEnv(t)
	t.Parallel()
	ns := newNamespace(t)
	baseSecrets(t, ns)
	m := create(t, messenger(ns, "chat"))
	m, d := waitSettled(t, ns, "chat")

	// Defaults were filled in by the schema.
	if m.Spec.Backend != tetrav1.BackendPostgres || *m.Spec.Replicas != 1 || m.Spec.Delivery.MaxDeliveryAttempts != 3 ||
		m.Spec.Delivery.Lease.Duration != 10*time.Second || m.Spec.Retention.History.Duration != 90*24*time.Hour ||
		m.Spec.Retention.OutboxBackstop.Duration != 26*time.Hour || m.Spec.Delivery.GCGrace.Duration != 5*time.Second ||
		m.Spec.PostgreSQL.SecretRef.Key != "url" || m.Spec.JWT.SecretRef.Key != "secret" || m.Spec.Limits.InboundQueue != 8000 {
		t.Errorf("schema defaults not applied: %+v", m.Spec)
	}

	cm, ok := configMap(t, ns, "chat")
	if !ok {
		t.Fatal("no tuning ConfigMap")
	}
	if cm.Data["maxDeliveryAttempts"] != "3" || cm.Data["lease"] != "10s" || cm.Data["outboxRetention"] != "26h0m0s" || len(cm.Data) != len(config.Keys) {
		t.Errorf("tuning %v", cm.Data)
	}
	c := d.Spec.Template.Spec.Containers[0]
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if env["TETRA_STORE"].ValueFrom.SecretKeyRef.Name != "pg" || env["TETRA_JWT_SECRET"].ValueFrom.SecretKeyRef.Key != "secret" ||
		env["TETRA_TUNING_DIR"].Value != "/etc/tetra/tuning" || env["TETRA_ADDR"].Value != ":8080" {
		t.Errorf("env %+v", c.Env)
	}
	if c.Image != "example.test/tetra:default" || c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("container %+v", c)
	}
	svc, ok := get(t, &corev1.Service{}, ns, "chat")
	if !ok || svc.Spec.Ports[0].Port != 8080 {
		t.Fatalf("service %+v", svc)
	}
	if _, ok := get(t, &policyv1.PodDisruptionBudget{}, ns, "chat"); ok {
		t.Error("a PDB for one replica")
	}
	// envtest runs no garbage collector: the owner references are the proof.
	for _, o := range []client.Object{cm, d, svc} {
		refs := o.GetOwnerReferences()
		if len(refs) != 1 || refs[0].UID != m.UID || refs[0].Kind != "Messenger" || refs[0].APIVersion != "tetra.dev/v1alpha1" ||
			refs[0].Controller == nil || !*refs[0].Controller || refs[0].BlockOwnerDeletion == nil || !*refs[0].BlockOwnerDeletion {
			t.Errorf("%T %s owner references %+v", o, o.GetName(), refs)
		}
		mf := o.GetManagedFields()
		if len(mf) == 0 || mf[0].Manager != controllers.FieldOwner || mf[0].Operation != metav1.ManagedFieldsOperationApply {
			t.Errorf("%T not server-side applied by %s: %+v", o, controllers.FieldOwner, mf)
		}
	}

	// Status: conditions stamped with the generation. No pod runs in
	// envtest, so the workload is not ready and the rollout not complete.
	for typ, want := range map[string]metav1.ConditionStatus{
		tetrav1.ConditionReady: metav1.ConditionFalse, tetrav1.ConditionProgressing: metav1.ConditionTrue, tetrav1.ConditionDegraded: metav1.ConditionFalse,
	} {
		c := meta.FindStatusCondition(m.Status.Conditions, typ)
		if c == nil || c.Status != want || c.ObservedGeneration != m.Generation {
			t.Errorf("condition %s = %+v, want %s at generation %d", typ, c, want, m.Generation)
		}
	}
	if m.Status.Replicas != 1 || m.Status.ConfigHash == "" || m.Status.Redis != nil {
		t.Errorf("status %+v", m.Status)
	}
}

func TestTuningChangeUpdatesConfigMapWithoutRestart(t *testing.T) {
	needEnv(t)
	t.Parallel()
	ns := newNamespace(t)
	baseSecrets(t, ns)
	create(t, messenger(ns, "chat"))
	_, d0 := waitSettled(t, ns, "chat")

	update(t, ns, "chat", func(m *tetrav1.Messenger) {
		m.Spec.Delivery.MaxDeliveryAttempts = 5
		m.Spec.Delivery.Lease = &metav1.Duration{Duration: 15 * time.Second}
	})
	waitFor(t, wait, "ConfigMap with maxDeliveryAttempts 5", func() (bool, string) {
		cm, _ := configMap(t, ns, "chat")
		return cm.Data["maxDeliveryAttempts"] == "5" && cm.Data["lease"] == "15s", fmt.Sprint(cm.Data)
	})
	_, d1 := waitSettled(t, ns, "chat")
	if hashOf(d1) != hashOf(d0) || d1.Generation != d0.Generation || d1.ResourceVersion != d0.ResourceVersion {
		t.Fatalf("a hot setting touched the Deployment: hash %s -> %s, generation %d -> %d", hashOf(d0), hashOf(d1), d0.Generation, d1.Generation)
	}
	if len(eventsWithReason(t, ns, controllers.ReasonRolloutTriggered)) != 0 {
		t.Fatal("RolloutTriggered for a hot setting")
	}
}

func TestBackendChangeRollsOut(t *testing.T) {
	needEnv(t)
	t.Parallel()
	ns := newNamespace(t)
	baseSecrets(t, ns)
	create(t, messenger(ns, "chat"))
	_, d0 := waitSettled(t, ns, "chat")

	update(t, ns, "chat", func(m *tetrav1.Messenger) {
		m.Spec.Backend = tetrav1.BackendKafka
		m.Spec.Kafka = &tetrav1.KafkaSpec{Brokers: []tetrav1.KafkaBroker{"kafka-0:9092", "kafka-1:9092"}, Topic: "outbox"}
	})
	var d1 *appsv1.Deployment
	waitFor(t, wait, "a new config hash", func() (bool, string) {
		d1, _ = deployment(t, ns, "chat")
		return hashOf(d1) != hashOf(d0), hashOf(d1)
	})
	found := false
	for _, e := range d1.Spec.Template.Spec.Containers[0].Env {
		found = found || (e.Name == "TETRA_OUTBOX" && e.Value == "kafka://kafka-0:9092,kafka-1:9092/outbox")
	}
	if !found {
		t.Errorf("no TETRA_OUTBOX in %+v", d1.Spec.Template.Spec.Containers[0].Env)
	}
	ev := waitEvent(t, ns, controllers.ReasonRolloutTriggered)
	if ev.Regarding.Name != "chat" || ev.Regarding.Kind != "Messenger" {
		t.Errorf("event regarding %+v", ev.Regarding)
	}
	m, _ := waitSettled(t, ns, "chat")
	if m.Status.ConfigHash != hashOf(d1) {
		t.Errorf("status hash %s, deployment %s", m.Status.ConfigHash, hashOf(d1))
	}
}

func TestNoOpReconcileWritesNothing(t *testing.T) {
	needEnv(t)
	t.Parallel()
	ns := newNamespace(t)
	baseSecrets(t, ns)
	create(t, messenger(ns, "chat", func(m *tetrav1.Messenger) {
		m.Spec.Delivery.MaxDeliveryAttempts = 4
	}))
	waitSettled(t, ns, "chat")

	versions := func() map[string]string {
		out := map[string]string{}
		for name, o := range map[string]client.Object{
			"messenger": &tetrav1.Messenger{}, "deployment": &appsv1.Deployment{}, "service": &corev1.Service{},
		} {
			get(t, o, ns, "chat")
			out[name] = o.GetResourceVersion()
		}
		cm, _ := configMap(t, ns, "chat")
		out["configmap"] = cm.ResourceVersion
		return out
	}
	before := versions()
	for i := 0; i < 3; i++ {
		if _, err := reconciler.Reconcile(ctx(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "chat"}}); err != nil {
			t.Fatal(err)
		}
	}
	after := versions()
	for k, v := range before {
		if after[k] != v {
			t.Errorf("a no-op reconcile changed the %s: resourceVersion %s -> %s", k, v, after[k])
		}
	}
}

func TestSecretRotationRolls(t *testing.T) {
	needEnv(t)
	t.Parallel()
	ns := newNamespace(t)
	baseSecrets(t, ns)
	create(t, messenger(ns, "chat"))
	_, d0 := waitSettled(t, ns, "chat")

	s, _ := get(t, &corev1.Secret{}, ns, "jwt")
	s.Data["secret"] = []byte("rotated-secret-of-sufficient-length")
	if err := k8s.Update(ctx(), s); err != nil {
		t.Fatal(err)
	}
	waitFor(t, wait, "a roll after the rotation", func() (bool, string) {
		d, _ := deployment(t, ns, "chat")
		return hashOf(d) != hashOf(d0), hashOf(d)
	})
	waitEvent(t, ns, controllers.ReasonRolloutTriggered)
}

func TestMissingSecret(t *testing.T) {
	needEnv(t)
	t.Parallel()
	ns := newNamespace(t)
	createSecret(t, ns, "pg", map[string]string{"url": "postgres://db/tetra"})
	createSecret(t, ns, "jwt", map[string]string{"wrong-key": jwtSecret})
	degradedBefore := counter(controllers.ReconcilesTotal, controllers.OutcomeDegraded)
	create(t, messenger(ns, "chat"))

	waitFor(t, wait, "Degraded SecretMissing", func() (bool, string) {
		c := meta.FindStatusCondition(msgr(t, ns, "chat").Status.Conditions, tetrav1.ConditionDegraded)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == controllers.ReasonSecretMissing &&
			strings.Contains(c.Message, `key "secret" of Secret "jwt" (spec.jwt.secretRef)`), fmt.Sprintf("%+v", c)
	})
	ev := waitEvent(t, ns, controllers.ReasonSecretMissing)
	if ev.Type != corev1.EventTypeWarning {
		t.Errorf("event %+v", ev)
	}
	waitCounterAbove(t, controllers.ReconcilesTotal, "tetra_operator_reconciles_total", controllers.OutcomeDegraded, degradedBefore)
	if _, ok := deployment(t, ns, "chat"); ok {
		t.Fatal("a Deployment whose pods could not start")
	}
	// The fix is noticed through the Secret watch, not by polling.
	s, _ := get(t, &corev1.Secret{}, ns, "jwt")
	s.Data["secret"] = []byte(jwtSecret)
	if err := k8s.Update(ctx(), s); err != nil {
		t.Fatal(err)
	}
	m, _ := waitSettled(t, ns, "chat")
	if c := meta.FindStatusCondition(m.Status.Conditions, tetrav1.ConditionDegraded); c.Status != metav1.ConditionFalse {
		t.Fatalf("still degraded: %+v", c)
	}
}

// TestShortJWTSecretRefused: a JWT secret the workload would refuse at
// start (shorter than auth.MinSecretLen) is refused by the operator, naming
// the field, before any pod crash-loops on it; fixing the Secret is
// noticed through the watch.
func TestShortJWTSecretRefused(t *testing.T) {
	needEnv(t)
	t.Parallel()
	ns := newNamespace(t)
	createSecret(t, ns, "pg", map[string]string{"url": "postgres://db/tetra"})
	createSecret(t, ns, "jwt", map[string]string{"secret": "short"})
	create(t, messenger(ns, "chat"))
	waitFor(t, wait, "Degraded InvalidSpec naming spec.jwt.secretRef", func() (bool, string) {
		c := meta.FindStatusCondition(msgr(t, ns, "chat").Status.Conditions, tetrav1.ConditionDegraded)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == "InvalidSpec" &&
			strings.Contains(c.Message, `spec.jwt.secretRef: key "secret" of Secret "jwt" holds 5 bytes`), fmt.Sprintf("%+v", c)
	})
	if _, ok := deployment(t, ns, "chat"); ok {
		t.Fatal("a Deployment whose pods would refuse the JWT secret")
	}
	s, _ := get(t, &corev1.Secret{}, ns, "jwt")
	s.Data["secret"] = []byte(jwtSecret)
	if err := k8s.Update(ctx(), s); err != nil {
		t.Fatal(err)
	}
	waitSettled(t, ns, "chat")
}

func TestStatusFollowsDeployment(t *testing.T) {
	needEnv(t)
	t.Parallel()
	ns := newNamespace(t)
	baseSecrets(t, ns)
	readyBefore := counter(controllers.ReconcilesTotal, controllers.OutcomeReady)
	progressingBefore := counter(controllers.ReconcilesTotal, controllers.OutcomeProgressing)
	create(t, messenger(ns, "chat"))
	_, d := waitSettled(t, ns, "chat")

	// Play the Deployment controller, which envtest does not run.
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
	if err := k8s.Status().Update(ctx(), d); err != nil {
		t.Fatal(err)
	}
	waitFor(t, wait, "Ready", func() (bool, string) {
		m := msgr(t, ns, "chat")
		r := meta.FindStatusCondition(m.Status.Conditions, tetrav1.ConditionReady)
		p := meta.FindStatusCondition(m.Status.Conditions, tetrav1.ConditionProgressing)
		return r != nil && r.Status == metav1.ConditionTrue && p.Status == metav1.ConditionFalse && m.Status.ReadyReplicas == 1,
			fmt.Sprintf("ready=%+v progressing=%+v", r, p)
	})
	waitCounterAbove(t, controllers.ReconcilesTotal, "tetra_operator_reconciles_total", controllers.OutcomeProgressing, progressingBefore)
	waitCounterAbove(t, controllers.ReconcilesTotal, "tetra_operator_reconciles_total", controllers.OutcomeReady, readyBefore)
	// A new generation: observedGeneration follows.
	update(t, ns, "chat", func(m *tetrav1.Messenger) { m.Spec.Delivery.MaxPending = 30 })
	m, _ := waitSettled(t, ns, "chat")
	if m.Generation < 2 {
		t.Fatalf("generation %d", m.Generation)
	}
	for _, c := range m.Status.Conditions {
		if c.ObservedGeneration != m.Generation {
			t.Errorf("condition %s at generation %d, want %d", c.Type, c.ObservedGeneration, m.Generation)
		}
	}
}

func TestPauseAnnotation(t *testing.T) {
	needEnv(t)
	t.Parallel()
	ns := newNamespace(t)
	baseSecrets(t, ns)
	create(t, messenger(ns, "chat"))
	waitSettled(t, ns, "chat")

	pausedBefore := counter(controllers.ReconcilesTotal, controllers.OutcomePaused)
	update(t, ns, "chat", func(m *tetrav1.Messenger) {
		m.Annotations = map[string]string{tetrav1.PausedAnnotation: "true"}
	})
	waitFor(t, wait, "Paused", func() (bool, string) {
		c := meta.FindStatusCondition(msgr(t, ns, "chat").Status.Conditions, tetrav1.ConditionProgressing)
		return c != nil && c.Reason == "Paused", fmt.Sprintf("%+v", c)
	})
	waitCounterAbove(t, controllers.ReconcilesTotal, "tetra_operator_reconciles_total", controllers.OutcomePaused, pausedBefore)
	update(t, ns, "chat", func(m *tetrav1.Messenger) { m.Spec.Delivery.MaxDeliveryAttempts = 7 })
	// Reconcile by hand as well, so "nothing happened" is not a race.
	if _, err := reconciler.Reconcile(ctx(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "chat"}}); err != nil {
		t.Fatal(err)
	}
	if cm, _ := configMap(t, ns, "chat"); cm.Data["maxDeliveryAttempts"] != "3" {
		t.Fatalf("paused Messenger reconciled: %v", cm.Data["maxDeliveryAttempts"])
	}
	update(t, ns, "chat", func(m *tetrav1.Messenger) { delete(m.Annotations, tetrav1.PausedAnnotation) })
	waitFor(t, wait, "the change after unpausing", func() (bool, string) {
		cm, _ := configMap(t, ns, "chat")
		return cm.Data["maxDeliveryAttempts"] == "7", cm.Data["maxDeliveryAttempts"]
	})
}

func TestReplicasNeedRedisAndGetAPDB(t *testing.T) {
	needEnv(t)
	t.Parallel()
	ns := newNamespace(t)
	baseSecrets(t, ns)
	// Nothing listens there: Degraded RedisUnreachable, but rendering goes on.
	createSecret(t, ns, "redis", map[string]string{"url": fmt.Sprintf("redis://127.0.0.1:%d/0", redistest.FreePort(t))})
	create(t, messenger(ns, "chat", func(m *tetrav1.Messenger) {
		m.Spec.Replicas = ptrTo(int32(3))
		m.Spec.Redis = &tetrav1.RedisSpec{SecretRef: tetrav1.URLSecretRef{Name: "redis"}}
	}))
	waitFor(t, wait, "PDB", func() (bool, string) {
		_, ok := get(t, &policyv1.PodDisruptionBudget{}, ns, "chat")
		return ok, "none"
	})
	pdb, _ := get(t, &policyv1.PodDisruptionBudget{}, ns, "chat")
	if pdb.Spec.MaxUnavailable.IntValue() != 1 || len(pdb.OwnerReferences) != 1 || pdb.OwnerReferences[0].Name != "chat" {
		t.Errorf("PDB %+v", pdb)
	}
	d, _ := deployment(t, ns, "chat")
	if *d.Spec.Replicas != 3 || d.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType {
		t.Errorf("deployment replicas %d strategy %s", *d.Spec.Replicas, d.Spec.Strategy.Type)
	}
	waitFor(t, wait, "Degraded RedisUnreachable", func() (bool, string) {
		c := meta.FindStatusCondition(msgr(t, ns, "chat").Status.Conditions, tetrav1.ConditionDegraded)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == "RedisUnreachable", fmt.Sprintf("%+v", c)
	})

	update(t, ns, "chat", func(m *tetrav1.Messenger) { m.Spec.Replicas = ptrTo(int32(1)) })
	waitFor(t, wait, "PDB removed", func() (bool, string) {
		_, ok := get(t, &policyv1.PodDisruptionBudget{}, ns, "chat")
		return !ok, "still there"
	})
}

// TestNetworkPolicyFollowsSpec: spec.networkPolicy renders a NetworkPolicy
// owned by the Messenger, which the API server accepts, with the operator
// admitted to the client port; removing the field deletes it.
func TestNetworkPolicyFollowsSpec(t *testing.T) {
	needEnv(t)
	t.Parallel()
	ns := newNamespace(t)
	baseSecrets(t, ns)
	create(t, messenger(ns, "chat", func(m *tetrav1.Messenger) {
		m.Spec.NetworkPolicy = &tetrav1.NetworkPolicySpec{
			ClientsFrom: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": "ingress"}}}},
			MetricsFrom: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.9.0.0/16"}}},
		}
	}))
	waitFor(t, wait, "NetworkPolicy", func() (bool, string) {
		_, ok := get(t, &networkingv1.NetworkPolicy{}, ns, "chat")
		return ok, "none"
	})
	np, _ := get(t, &networkingv1.NetworkPolicy{}, ns, "chat")
	if len(np.OwnerReferences) != 1 || np.OwnerReferences[0].Name != "chat" || len(np.Spec.Ingress) != 2 {
		t.Fatalf("NetworkPolicy %+v", np)
	}
	if from := np.Spec.Ingress[0].From; len(from) != 2 || from[1].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != operatorNamespace {
		t.Errorf("client rule %+v: want the ingress namespace and the operator's (%s)", np.Spec.Ingress[0], operatorNamespace)
	}
	update(t, ns, "chat", func(m *tetrav1.Messenger) { m.Spec.NetworkPolicy = nil })
	waitFor(t, wait, "NetworkPolicy removed", func() (bool, string) {
		_, ok := get(t, &networkingv1.NetworkPolicy{}, ns, "chat")
		return !ok, "still there"
	})
}

// --- Redis failover -------------------------------------------------------

// readyPod creates a pod of the Messenger's Deployment and marks it ready
// with an IP, as a kubelet would.
func readyPod(t *testing.T, ns, messengerName, name string) {
	t.Helper()
	m := msgr(t, ns, messengerName)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: render.Labels(m)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "tetra", Image: "example.test/tetra"}}},
	}
	if err := k8s.Create(ctx(), p); err != nil {
		t.Fatal(err)
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.1.2.3", PodIPs: []corev1.PodIP{{IP: "10.1.2.3"}},
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}}
	if err := k8s.Status().Update(ctx(), p); err != nil {
		t.Fatal(err)
	}
}

// rebuildCalls records the rebuild requests of one namespace.
type rebuildCalls struct {
	mu     sync.Mutex
	tokens []string
	paths  []string
}

func (c *rebuildCalls) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.tokens)
}

func redisMessenger(t *testing.T, ns string, url string) {
	t.Helper()
	baseSecrets(t, ns)
	createSecret(t, ns, "redis", map[string]string{"url": url})
	create(t, messenger(ns, "chat", func(m *tetrav1.Messenger) {
		m.Spec.Redis = &tetrav1.RedisSpec{SecretRef: tetrav1.URLSecretRef{Name: "redis"}}
	}))
}

func waitRedisIdentity(t *testing.T, ns string, accept func(*tetrav1.RedisIdentity) bool) *tetrav1.Messenger {
	t.Helper()
	var m *tetrav1.Messenger
	waitFor(t, wait, "status.redis", func() (bool, string) {
		m = msgr(t, ns, "chat")
		return m.Status.Redis != nil && accept(m.Status.Redis), fmt.Sprintf("%+v", m.Status.Redis)
	})
	return m
}

func TestRedisRestartTriggersRebuild(t *testing.T) {
	needEnv(t)
	redistest.Available(t)
	t.Parallel()
	ns := newNamespace(t)
	calls := &rebuildCalls{}
	rebuilds.handle(ns, func(w http.ResponseWriter, r *http.Request) {
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		claims := jwt.MapClaims{}
		_, err := jwt.ParseWithClaims(tok, claims, func(*jwt.Token) (any, error) { return []byte(jwtSecret), nil },
			jwt.WithValidMethods([]string{"HS256"}), jwt.WithExpirationRequired())
		if r.Method != http.MethodPost || err != nil || claims["scope"] != "admin" || claims["sub"] != "admin" {
			http.Error(w, fmt.Sprintf("unauthorized: %v %v", err, claims), http.StatusUnauthorized)
			return
		}
		calls.mu.Lock()
		calls.tokens = append(calls.tokens, tok)
		calls.paths = append(calls.paths, r.URL.Path)
		calls.mu.Unlock()
		w.Write([]byte(`{"rebuilt":true}`))
	})
	srv := redistest.Start(t, 0)
	redisMessenger(t, ns, srv.URL())
	runID, _ := srv.Info("run_id")
	m := waitRedisIdentity(t, ns, func(r *tetrav1.RedisIdentity) bool { return r.RunID == runID })
	if m.Status.Redis.Epoch != 0 || m.Status.LastRebuild != nil {
		t.Fatalf("the first identity is a baseline, not a failover: %+v", m.Status)
	}
	readyPod(t, ns, "chat", "chat-0")
	_, d0 := waitSettled(t, ns, "chat")
	restartsBefore := counter(controllers.RedisFailoversTotal, controllers.FailoverRestart)
	endpointBefore := counter(controllers.RebuildsTotal, controllers.RebuildEndpoint)

	// Replace the server on the same address: a new run_id.
	port := srv.Port
	srv.Stop()
	srv2 := redistest.Start(t, port)
	runID2, _ := srv2.Info("run_id")
	m = waitRedisIdentity(t, ns, func(r *tetrav1.RedisIdentity) bool { return r.RunID == runID2 })
	// The epoch is claimed first, the rebuild recorded by the next patch.
	waitFor(t, wait, "the rebuild recorded", func() (bool, string) {
		m = msgr(t, ns, "chat")
		return m.Status.LastRebuild != nil, "none yet"
	})
	if m.Status.Redis.Epoch != 1 || m.Status.LastRebuild == nil || m.Status.LastRebuild.Method != "Endpoint" ||
		m.Status.LastRebuild.Reason != "RedisFailover" || m.Status.LastRebuild.Epoch != 1 || m.Status.LastRebuild.Pods != 1 {
		t.Fatalf("status after failover: redis %+v rebuild %+v", m.Status.Redis, m.Status.LastRebuild)
	}
	if calls.count() != 1 || calls.paths[0] != "/"+ns+"/chat-0/admin/rebuild" {
		t.Fatalf("rebuild calls %v", calls.paths)
	}
	waitEvent(t, ns, controllers.ReasonRedisFailoverDetected)
	waitEvent(t, ns, controllers.ReasonWatermarkRebuildRequested)
	waitCounterAbove(t, controllers.RedisFailoversTotal, "tetra_operator_redis_failovers_total", controllers.FailoverRestart, restartsBefore)
	waitCounterAbove(t, controllers.RebuildsTotal, "tetra_operator_rebuilds_total", controllers.RebuildEndpoint, endpointBefore)
	// Rebuilt in place: no restart.
	d1, _ := deployment(t, ns, "chat")
	if hashOf(d1) != hashOf(d0) || d1.Spec.Template.Annotations[tetrav1.RedisEpochAnnotation] != "" {
		t.Fatalf("the pods were restarted although the rebuild succeeded: %v", d1.Spec.Template.Annotations)
	}
}

func TestRedisPromotionFallsBackToRestart(t *testing.T) {
	needEnv(t)
	redistest.Available(t)
	t.Parallel()
	ns := newNamespace(t)
	rebuilds.handle(ns, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "index unavailable", http.StatusServiceUnavailable)
	})
	a := redistest.Start(t, 0)
	b := redistest.Start(t, 0)
	redisMessenger(t, ns, a.URL())
	replID, _ := a.Info("master_replid")
	waitRedisIdentity(t, ns, func(r *tetrav1.RedisIdentity) bool { return r.MasterReplID == replID })
	readyPod(t, ns, "chat", "chat-0")
	_, d0 := waitSettled(t, ns, "chat")

	// a becomes a replica of b: no master at the address. Degraded, and
	// nothing destructive.
	if _, err := a.Do("REPLICAOF", "127.0.0.1", fmt.Sprint(b.Port)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, wait, "Degraded RedisNoMaster", func() (bool, string) {
		c := meta.FindStatusCondition(msgr(t, ns, "chat").Status.Conditions, tetrav1.ConditionDegraded)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == "RedisNoMaster", fmt.Sprintf("%+v", c)
	})
	if d, _ := deployment(t, ns, "chat"); d.Spec.Template.Annotations[tetrav1.RedisEpochAnnotation] != "" {
		t.Fatal("restarted on an ambiguous Redis")
	}
	if m := msgr(t, ns, "chat"); m.Status.Redis.Epoch != 0 {
		t.Fatalf("epoch moved without a master: %+v", m.Status.Redis)
	}
	// Promoted back: same run_id, new master_replid. The rebuild endpoint
	// fails, so the epoch goes into the pod template.
	promotionsBefore := counter(controllers.RedisFailoversTotal, controllers.FailoverPromotion)
	restartRebuildsBefore := counter(controllers.RebuildsTotal, controllers.RebuildRestart)
	if _, err := a.Do("REPLICAOF", "NO", "ONE"); err != nil {
		t.Fatal(err)
	}
	// The operator keeps asking for RebuildGrace, then restarts.
	m := waitRedisIdentity(t, ns, func(r *tetrav1.RedisIdentity) bool { return r.MasterReplID != replID && r.Epoch == 1 })
	failedOver := time.Now()
	m = waitRedisIdentity(t, ns, func(r *tetrav1.RedisIdentity) bool { return r.RestartEpoch == 1 })
	if waited := time.Since(failedOver); waited < rebuildGrace-2*time.Second {
		t.Errorf("restarted %v after the failover, before the rebuild grace (%v) ran out", waited, rebuildGrace)
	}
	if m.Status.Redis.RestartEpoch != 1 || m.Status.LastRebuild == nil || m.Status.LastRebuild.Method != "Restart" {
		t.Fatalf("status %+v %+v", m.Status.Redis, m.Status.LastRebuild)
	}
	waitFor(t, wait, "redis epoch in the pod template", func() (bool, string) {
		d, _ := deployment(t, ns, "chat")
		return d.Spec.Template.Annotations[tetrav1.RedisEpochAnnotation] == "1", fmt.Sprint(d.Spec.Template.Annotations)
	})
	waitEvent(t, ns, controllers.ReasonRedisFailoverDetected)
	waitCounterAbove(t, controllers.RedisFailoversTotal, "tetra_operator_redis_failovers_total", controllers.FailoverPromotion, promotionsBefore)
	waitCounterAbove(t, controllers.RebuildsTotal, "tetra_operator_rebuilds_total", controllers.RebuildRestart, restartRebuildsBefore)
	ev := waitEvent(t, ns, controllers.ReasonRolloutTriggered)
	if !strings.Contains(ev.Note, "epoch 1") {
		t.Errorf("rollout event %q", ev.Note)
	}
	d1, _ := deployment(t, ns, "chat")
	if hashOf(d1) != hashOf(d0) {
		t.Error("the restart changed the config hash; it must only add the epoch")
	}
	// Deterministic: further reconciles keep the same template.
	rv := d1.ResourceVersion
	if _, err := reconciler.Reconcile(ctx(), ctrl.Request{NamespacedName: types.NamespacedName{Namespace: ns, Name: "chat"}}); err != nil {
		t.Fatal(err)
	}
	if d2, _ := deployment(t, ns, "chat"); d2.ResourceVersion != rv {
		t.Fatal("a reconcile after the restart wrote the Deployment again")
	}
}

// TestForeignObjectsAreNotAdopted: children whose names are taken by
// objects the Messenger did not create are left alone (no forced apply,
// no ownerReference), and the Messenger says so.
func TestForeignObjectsAreNotAdopted(t *testing.T) {
	needEnv(t)
	t.Parallel()
	ns := newNamespace(t)
	baseSecrets(t, ns)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "victim-tuning"}, Data: map[string]string{"user": "data"}}
	if err := k8s.Create(ctx(), cm); err != nil {
		t.Fatal(err)
	}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "victim"}, Spec: corev1.ServiceSpec{
		Selector: map[string]string{"app": "other"}, Ports: []corev1.ServicePort{{Name: "http", Port: 80}},
	}}
	if err := k8s.Create(ctx(), svc); err != nil {
		t.Fatal(err)
	}
	refusedBefore := counter(controllers.ReconcilesTotal, controllers.OutcomeRefused)
	create(t, messenger(ns, "victim"))

	waitFor(t, wait, "Degraded NameConflict", func() (bool, string) {
		m := msgr(t, ns, "victim")
		c := meta.FindStatusCondition(m.Status.Conditions, tetrav1.ConditionDegraded)
		r := meta.FindStatusCondition(m.Status.Conditions, tetrav1.ConditionReady)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == controllers.ReasonNameConflict &&
			strings.Contains(c.Message, `ConfigMap "victim-tuning"`) && strings.Contains(c.Message, `Service "victim"`) &&
			r != nil && r.Status == metav1.ConditionFalse && m.Status.ObservedGeneration == m.Generation, fmt.Sprintf("%+v", m.Status)
	})
	if ev := waitEvent(t, ns, controllers.ReasonNameConflict); ev.Type != corev1.EventTypeWarning {
		t.Errorf("event %+v", ev)
	}
	waitCounterAbove(t, controllers.ReconcilesTotal, "tetra_operator_reconciles_total", controllers.OutcomeRefused, refusedBefore)
	// Give a wrongly adopting reconcile time to run, then look.
	time.Sleep(time.Second)
	gotCM, _ := get(t, &corev1.ConfigMap{}, ns, "victim-tuning")
	if len(gotCM.Data) != 1 || gotCM.Data["user"] != "data" || len(gotCM.OwnerReferences) != 0 || len(gotCM.Labels) != 0 {
		t.Fatalf("user ConfigMap touched: data %v owners %v labels %v", gotCM.Data, gotCM.OwnerReferences, gotCM.Labels)
	}
	gotSvc, _ := get(t, &corev1.Service{}, ns, "victim")
	if len(gotSvc.Spec.Selector) != 1 || gotSvc.Spec.Selector["app"] != "other" || len(gotSvc.OwnerReferences) != 0 || len(gotSvc.Labels) != 0 {
		t.Fatalf("user Service touched: selector %v owners %v labels %v", gotSvc.Spec.Selector, gotSvc.OwnerReferences, gotSvc.Labels)
	}
	for _, mf := range gotSvc.ManagedFields {
		if mf.Manager == controllers.FieldOwner {
			t.Fatalf("operator owns fields of the user Service: %+v", mf)
		}
	}
	if _, ok := deployment(t, ns, "victim"); ok {
		t.Fatal("a Deployment rendered beside a name conflict")
	}
}
