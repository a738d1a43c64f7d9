package controllers_test

import (
	"fmt"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tetrav1 "github.com/tetra-messenger/tetra/api/v1alpha1"
	"github.com/tetra-messenger/tetra/controllers"
	"github.com/tetra-messenger/tetra/internal/operator/render"
)

// pod creates a pod of the Messenger (as the ReplicaSet would) and gives
// it status (as the kubelet would); envtest runs neither.
func pod(t *testing.T, ns, messengerName, name string, status corev1.PodStatus) *corev1.Pod {
	t.Helper()
	m := msgr(t, ns, messengerName)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: render.Labels(m)},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "tetra", Image: "example.test/tetra"}}},
	}
	if err := k8s.Create(ctx(), p); err != nil {
		t.Fatal(err)
	}
	setPodStatus(t, p, status)
	return p
}

func setPodStatus(t *testing.T, p *corev1.Pod, status corev1.PodStatus) {
	t.Helper()
	for i := 0; ; i++ {
		cur, _ := get(t, &corev1.Pod{}, p.Namespace, p.Name)
		cur.Status = status
		err := k8s.Status().Update(ctx(), cur)
		if err == nil {
			return
		}
		if i > 10 {
			t.Fatal(err)
		}
	}
}

func waiting(image, reason, msg string) corev1.PodStatus {
	return corev1.PodStatus{Phase: corev1.PodPending, ContainerStatuses: []corev1.ContainerStatus{{
		Name: "tetra", Image: image, State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: reason, Message: msg}},
	}}}
}

func runningReady() corev1.PodStatus {
	return corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.1.2.3",
		Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		ContainerStatuses: []corev1.ContainerStatus{{Name: "tetra", Image: "example.test/tetra", Ready: true,
			State: corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: metav1.Now()}}}}}
}

func waitCondition(t *testing.T, ns, name, typ string, ok func(c *metav1.Condition) bool) *metav1.Condition {
	t.Helper()
	var c *metav1.Condition
	waitFor(t, wait, "condition "+typ, func() (bool, string) {
		c = meta.FindStatusCondition(msgr(t, ns, name).Status.Conditions, typ)
		return c != nil && ok(c), fmt.Sprintf("%+v", c)
	})
	return c
}

// A pod that cannot pull its image makes the Messenger Degraded with
// ImagePullFailed, naming the pod, the image and the kubelet's reason; the
// pod's recovery clears it. No Deployment field changes meanwhile, so this
// is the pod watch at work.
func TestDegradedImagePull(t *testing.T) {
	needEnv(t)
	t.Parallel()
	ns := newNamespace(t)
	baseSecrets(t, ns)
	create(t, messenger(ns, "chat"))
	waitSettled(t, ns, "chat")
	p := pod(t, ns, "chat", "chat-abc-1", waiting("example.test/tetra:nope", "ImagePullBackOff", `Back-off pulling image "example.test/tetra:nope"`))

	c := waitCondition(t, ns, "chat", tetrav1.ConditionDegraded, func(c *metav1.Condition) bool {
		return c.Status == metav1.ConditionTrue && c.Reason == controllers.ReasonImagePullFailed
	})
	for _, want := range []string{"pod chat-abc-1", "container tetra", `"example.test/tetra:nope"`, "ImagePullBackOff"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("Degraded message %q lacks %q", c.Message, want)
		}
	}
	if r := meta.FindStatusCondition(msgr(t, ns, "chat").Status.Conditions, tetrav1.ConditionReady); r.Status != metav1.ConditionFalse {
		t.Errorf("Ready %+v beside a pod that cannot pull", r)
	}
	setPodStatus(t, p, runningReady())
	waitCondition(t, ns, "chat", tetrav1.ConditionDegraded, func(c *metav1.Condition) bool {
		return c.Status == metav1.ConditionFalse && c.Reason == "AsExpected"
	})
}

// A crash loop: Degraded CrashLooping with the restart count, the last exit
// code and the last line of the termination message (the end of the log).
func TestDegradedCrashLoop(t *testing.T) {
	needEnv(t)
	t.Parallel()
	ns := newNamespace(t)
	baseSecrets(t, ns)
	create(t, messenger(ns, "chat"))
	waitSettled(t, ns, "chat")
	st := waiting("example.test/tetra", "CrashLoopBackOff", "back-off 40s restarting failed container")
	st.ContainerStatuses[0].RestartCount = 3
	st.ContainerStatuses[0].LastTerminationState.Terminated = &corev1.ContainerStateTerminated{ExitCode: 1, Reason: "Error",
		Message: "{\"level\":\"INFO\",\"msg\":\"starting\"}\ntetra serve: server: PostgreSQL store unreachable or unusable at postgres://***@db/tetra\n"}
	pod(t, ns, "chat", "chat-abc-2", st)

	c := waitCondition(t, ns, "chat", tetrav1.ConditionDegraded, func(c *metav1.Condition) bool {
		return c.Status == metav1.ConditionTrue && c.Reason == controllers.ReasonCrashLooping
	})
	for _, want := range []string{"pod chat-abc-2", "restarts: 3", "last exit code 1 (Error)", "PostgreSQL store unreachable"} {
		if !strings.Contains(c.Message, want) {
			t.Errorf("Degraded message %q lacks %q", c.Message, want)
		}
	}
	if strings.Contains(c.Message, "starting") {
		t.Errorf("message quotes more than the last log line: %q", c.Message)
	}
}

// A rollout past its deadline: Progressing=False ProgressDeadlineExceeded
// (not True forever) and Degraded with the Deployment's message.
func TestProgressDeadlineExceeded(t *testing.T) {
	needEnv(t)
	t.Parallel()
	ns := newNamespace(t)
	baseSecrets(t, ns)
	createSecret(t, ns, "redis", map[string]string{"url": "redis://127.0.0.1:1/0"}) // unreachable: a second problem
	create(t, messenger(ns, "chat", func(m *tetrav1.Messenger) {
		m.Spec.Redis = &tetrav1.RedisSpec{SecretRef: tetrav1.URLSecretRef{Name: "redis"}}
		m.Spec.Replicas = ptrTo(int32(2))
	}))
	_, d := waitSettled(t, ns, "chat")
	if *d.Spec.ProgressDeadlineSeconds != render.ProgressDeadlineSeconds {
		t.Fatalf("progressDeadlineSeconds %d", *d.Spec.ProgressDeadlineSeconds)
	}
	d.Status = appsv1.DeploymentStatus{ObservedGeneration: d.Generation, Replicas: 3, UpdatedReplicas: 1, ReadyReplicas: 2, AvailableReplicas: 2,
		Conditions: []appsv1.DeploymentCondition{{Type: appsv1.DeploymentProgressing, Status: corev1.ConditionFalse,
			Reason: "ProgressDeadlineExceeded", Message: `ReplicaSet "chat-7c9" has timed out progressing.`,
			LastUpdateTime: metav1.Now(), LastTransitionTime: metav1.Now()}}}
	if err := k8s.Status().Update(ctx(), d); err != nil {
		t.Fatal(err)
	}
	p := waitCondition(t, ns, "chat", tetrav1.ConditionProgressing, func(c *metav1.Condition) bool {
		return c.Status == metav1.ConditionFalse && c.Reason == controllers.ReasonProgressDeadlineExceeded
	})
	if !strings.Contains(p.Message, "has timed out progressing") || !strings.Contains(p.Message, "1 of 2 replicas updated") {
		t.Errorf("Progressing message %q", p.Message)
	}
	c := waitCondition(t, ns, "chat", tetrav1.ConditionDegraded, func(c *metav1.Condition) bool { return c.Status == metav1.ConditionTrue })
	if c.Reason != controllers.ReasonProgressDeadlineExceeded || !strings.Contains(c.Message, "Deployment chat: rollout stalled") ||
		!strings.Contains(c.Message, "; ") || !strings.Contains(c.Message, "no action taken until one master is seen") {
		t.Errorf("Degraded %+v: want the deadline first, the Redis problem after it", c)
	}
	// Two old replicas are ready, but only one of the two runs the current
	// config: Ready must not say True, and its message says why.
	r := waitCondition(t, ns, "chat", tetrav1.ConditionReady, func(c *metav1.Condition) bool { return true })
	if r.Status != metav1.ConditionFalse || r.Reason != "RollingOut" || !strings.Contains(r.Message, "2 of 2 replicas ready, but only 1 of 2 run config") {
		t.Errorf("Ready %+v", r)
	}
}

// Ready's message never contradicts its status, in every shape of rollout.
func TestReadyAgreesWithItsMessage(t *testing.T) {
	needEnv(t)
	t.Parallel()
	ns := newNamespace(t)
	baseSecrets(t, ns)
	create(t, messenger(ns, "chat"))
	_, d := waitSettled(t, ns, "chat")
	for _, c := range []struct {
		st     appsv1.DeploymentStatus
		status metav1.ConditionStatus
		reason string
		msg    string
	}{
		{appsv1.DeploymentStatus{Replicas: 2, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}, metav1.ConditionFalse, "RollingOut", "1 of 1 replicas ready, but only 1 of 1 run config"},
		{appsv1.DeploymentStatus{Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 0, AvailableReplicas: 0}, metav1.ConditionFalse, "Unavailable", "0 of 1 replicas ready"},
		{appsv1.DeploymentStatus{Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}, metav1.ConditionTrue, "Available", "1 of 1 replicas ready, all running config"},
	} {
		cur, _ := deployment(t, ns, "chat")
		cur.Status = c.st
		cur.Status.ObservedGeneration = d.Generation
		if err := k8s.Status().Update(ctx(), cur); err != nil {
			t.Fatal(err)
		}
		r := waitCondition(t, ns, "chat", tetrav1.ConditionReady, func(r *metav1.Condition) bool { return r.Reason == c.reason })
		if r.Status != c.status || !strings.Contains(r.Message, c.msg) {
			t.Errorf("deployment %+v: Ready %s %s %q, want %s %q", c.st, r.Status, r.Reason, r.Message, c.status, c.msg)
		}
	}
}

// Every running pod gets the tuning hash as an annotation, and a new one
// after a tuning change: the write that makes the kubelet refresh the
// mounted ConfigMap at once. The Deployment is not touched.
func TestTuningHashAnnouncedToPods(t *testing.T) {
	needEnv(t)
	t.Parallel()
	ns := newNamespace(t)
	baseSecrets(t, ns)
	create(t, messenger(ns, "chat"))
	_, d0 := waitSettled(t, ns, "chat")
	pod(t, ns, "chat", "chat-abc-3", runningReady())
	pending := pod(t, ns, "chat", "chat-abc-4", waiting("example.test/tetra", "ContainerCreating", ""))

	hashOn := func(name string) string {
		p, _ := get(t, &corev1.Pod{}, ns, name)
		return p.Annotations[tetrav1.TuningHashAnnotation]
	}
	var h0 string
	waitFor(t, wait, "the tuning hash on the running pod", func() (bool, string) {
		m := msgr(t, ns, "chat")
		h0 = hashOn("chat-abc-3")
		return h0 != "" && h0 == m.Status.TuningHash, fmt.Sprintf("pod %q status %q", h0, m.Status.TuningHash)
	})
	if got := hashOn(pending.Name); got != "" {
		t.Errorf("a pod that is not running was annotated (%s): its ConfigMap is mounted fresh when it starts", got)
	}
	update(t, ns, "chat", func(m *tetrav1.Messenger) { m.Spec.Delivery.MaxDeliveryAttempts = 9 })
	waitFor(t, wait, "a new tuning hash on the pod", func() (bool, string) {
		h := hashOn("chat-abc-3")
		return h != h0 && h == msgr(t, ns, "chat").Status.TuningHash, h
	})
	cm, _ := configMap(t, ns, "chat")
	if render.TuningHash(cm.Data) != hashOn("chat-abc-3") {
		t.Error("the annotation is not the hash of the ConfigMap's data")
	}
	if d1, _ := deployment(t, ns, "chat"); d1.ResourceVersion != d0.ResourceVersion {
		t.Error("a tuning change wrote the Deployment")
	}
}

// spec.redis.keyPrefix: defaulted from namespace and name, shown in the
// status; a change rolls the pods, by replacing them (Recreate) until the
// old prefix's pods are gone, then back to rolling updates.
func TestKeyPrefix(t *testing.T) {
	needEnv(t)
	t.Parallel()
	ns := newNamespace(t)
	baseSecrets(t, ns)
	createSecret(t, ns, "redis", map[string]string{"url": "redis://127.0.0.1:1/0"})
	create(t, messenger(ns, "chat", func(m *tetrav1.Messenger) {
		m.Spec.Redis = &tetrav1.RedisSpec{SecretRef: tetrav1.URLSecretRef{Name: "redis"}}
	}))
	m, d0 := waitSettled(t, ns, "chat")
	want := "tetra:" + ns + "/chat:"
	if got := env(d0)["TETRA_INDEX_PREFIX"]; got != want || m.Status.KeyPrefix != want {
		t.Fatalf("prefix: env %q status %q, want %q", got, m.Status.KeyPrefix, want)
	}
	if d0.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType {
		t.Fatalf("strategy %s", d0.Spec.Strategy.Type)
	}
	// The old pods run: the Deployment controller's status as it would be.
	d0.Status = appsv1.DeploymentStatus{ObservedGeneration: d0.Generation, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
	if err := k8s.Status().Update(ctx(), d0); err != nil {
		t.Fatal(err)
	}
	update(t, ns, "chat", func(m *tetrav1.Messenger) { m.Spec.Redis.KeyPrefix = "shop:chat:" })
	var d1 *appsv1.Deployment
	waitFor(t, wait, "the new prefix, by Recreate", func() (bool, string) {
		d1, _ = deployment(t, ns, "chat")
		return env(d1)["TETRA_INDEX_PREFIX"] == "shop:chat:", env(d1)["TETRA_INDEX_PREFIX"]
	})
	if d1.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType || hashOf(d1) == hashOf(d0) {
		t.Fatalf("prefix change: strategy %s, hash %s -> %s", d1.Spec.Strategy.Type, hashOf(d0), hashOf(d1))
	}
	waitEvent(t, ns, controllers.ReasonRolloutTriggered)
	// The replacement done: rolling updates again.
	d1.Status = appsv1.DeploymentStatus{ObservedGeneration: d1.Generation, Replicas: 1, UpdatedReplicas: 1, ReadyReplicas: 1, AvailableReplicas: 1}
	if err := k8s.Status().Update(ctx(), d1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, wait, "RollingUpdate after the replacement", func() (bool, string) {
		d, _ := deployment(t, ns, "chat")
		return d.Spec.Strategy.Type == appsv1.RollingUpdateDeploymentStrategyType, string(d.Spec.Strategy.Type)
	})
	if m := msgr(t, ns, "chat"); m.Status.KeyPrefix != "shop:chat:" {
		t.Errorf("status.keyPrefix %q", m.Status.KeyPrefix)
	}
}

// env is the workload container's plain environment values.
func env(d *appsv1.Deployment) map[string]string {
	out := map[string]string{}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		out[e.Name] = e.Value
	}
	return out
}
