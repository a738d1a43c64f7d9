package render_test

import (
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	tetrav1 "github.com/tetra-messenger/tetra/api/v1alpha1"
	"github.com/tetra-messenger/tetra/internal/operator/render"
	"github.com/tetra-messenger/tetra/workload/config"
)

func base() *tetrav1.Messenger {
	return &tetrav1.Messenger{
		ObjectMeta: metav1.ObjectMeta{Name: "chat", Namespace: "ns", UID: "uid-1", Generation: 1},
		Spec: tetrav1.MessengerSpec{
			Backend:    tetrav1.BackendPostgres,
			Image:      "example/tetra:1",
			PostgreSQL: tetrav1.PostgreSQLSpec{SecretRef: tetrav1.URLSecretRef{Name: "pg", Key: "url"}},
			JWT:        tetrav1.JWTSpec{SecretRef: tetrav1.JWTSecretRef{Name: "jwt", Key: "secret"}},
		},
	}
}

func inputs() render.Inputs {
	return render.Inputs{DefaultImage: "default/tetra:0", SecretVersions: map[string]string{"pg": "10", "jwt": "11"}}
}

func mustRender(t *testing.T, m *tetrav1.Messenger, in render.Inputs) render.Objects {
	t.Helper()
	o, err := render.Render(m, in)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func env(d *appsv1.Deployment) map[string]corev1.EnvVar {
	out := map[string]corev1.EnvVar{}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		out[e.Name] = e
	}
	return out
}

func secretRef(t *testing.T, e corev1.EnvVar) string {
	t.Helper()
	if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
		t.Fatalf("%s is not from a Secret: %+v", e.Name, e)
	}
	return e.ValueFrom.SecretKeyRef.Name + "/" + e.ValueFrom.SecretKeyRef.Key
}

func TestRenderPostgres(t *testing.T) {
	o := mustRender(t, base(), inputs())

	// ConfigMap: exactly the keys of config.Keys, with the paper's defaults.
	if got, want := sortedKeys(o.ConfigMap.Data), sorted(config.Keys); !reflect.DeepEqual(got, want) {
		t.Fatalf("ConfigMap keys %v, want %v", got, want)
	}
	if !reflect.DeepEqual(o.ConfigMap.Data, config.Default().Render()) {
		t.Fatalf("default tuning rendered as %v", o.ConfigMap.Data)
	}
	if o.ConfigMap.Name != "chat-tuning" || o.ConfigMap.Namespace != "ns" {
		t.Fatalf("ConfigMap %s/%s", o.ConfigMap.Namespace, o.ConfigMap.Name)
	}

	d := o.Deployment
	c := d.Spec.Template.Spec.Containers[0]
	e := env(d)
	for name, want := range map[string]string{
		"TETRA_ADDR": ":8080", "TETRA_TUNING_DIR": "/etc/tetra/tuning", "TETRA_DATA_DIR": "/var/lib/tetra",
		"TETRA_INBOUND_QUEUE": "8000",
	} {
		if e[name].Value != want {
			t.Errorf("%s=%q, want %q", name, e[name].Value, want)
		}
	}
	if got := secretRef(t, e["TETRA_STORE"]); got != "pg/url" {
		t.Errorf("TETRA_STORE from %s", got)
	}
	if got := secretRef(t, e["TETRA_JWT_SECRET"]); got != "jwt/secret" {
		t.Errorf("TETRA_JWT_SECRET from %s", got)
	}
	for _, absent := range []string{"TETRA_INDEX", "TETRA_OUTBOX", "TETRA_INDEX_SENTINEL_ADDRS"} {
		if _, ok := e[absent]; ok {
			t.Errorf("%s set without its backend", absent)
		}
	}
	if !sort.SliceIsSorted(c.Env, func(i, j int) bool { return c.Env[i].Name < c.Env[j].Name }) {
		t.Error("env not sorted")
	}
	if c.Image != "example/tetra:1" || c.Args[0] != "serve" {
		t.Errorf("image %q args %v", c.Image, c.Args)
	}
	if c.LivenessProbe.HTTPGet.Path != "/healthz" || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Error("probes")
	}
	if c.Ports[0].Name != "http" || c.Ports[0].ContainerPort != 8080 {
		t.Errorf("ports %+v", c.Ports)
	}
	// The tuning is a directory mount (subPath mounts never update).
	var tuningMount *corev1.VolumeMount
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].MountPath == render.TuningDir {
			tuningMount = &c.VolumeMounts[i]
		}
	}
	if tuningMount == nil || tuningMount.SubPath != "" || !tuningMount.ReadOnly {
		t.Fatalf("tuning mount %+v", tuningMount)
	}
	vols := map[string]corev1.Volume{}
	for _, v := range d.Spec.Template.Spec.Volumes {
		vols[v.Name] = v
	}
	if vols[tuningMount.Name].ConfigMap == nil || vols[tuningMount.Name].ConfigMap.Name != "chat-tuning" {
		t.Fatalf("tuning volume %+v", vols[tuningMount.Name])
	}
	if vols["data"].EmptyDir == nil {
		t.Fatal("data is not an emptyDir")
	}
	if sc := c.SecurityContext; !*sc.ReadOnlyRootFilesystem || *sc.AllowPrivilegeEscalation {
		t.Error("container security context")
	}
	if !*d.Spec.Template.Spec.SecurityContext.RunAsNonRoot || *d.Spec.Template.Spec.EnableServiceLinks {
		t.Error("pod security context or service links")
	}
	// Single replica without Redis: never two pods at once.
	if *d.Spec.Replicas != 1 || d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType {
		t.Errorf("replicas %d strategy %s", *d.Spec.Replicas, d.Spec.Strategy.Type)
	}
	if d.Spec.Template.Annotations[tetrav1.ConfigHashAnnotation] != o.ConfigHash || o.ConfigHash == "" {
		t.Error("config hash annotation")
	}
	if _, ok := d.Spec.Template.Annotations[tetrav1.RedisEpochAnnotation]; ok {
		t.Error("redis epoch annotation without a restart")
	}
	if !reflect.DeepEqual(d.Spec.Selector.MatchLabels, render.SelectorLabels(base())) {
		t.Error("selector")
	}
	for k, v := range d.Spec.Selector.MatchLabels {
		if d.Spec.Template.Labels[k] != v {
			t.Error("template labels do not match the selector")
		}
	}
	if o.Service.Spec.Ports[0].Port != 8080 || !reflect.DeepEqual(o.Service.Spec.Selector, d.Spec.Selector.MatchLabels) {
		t.Error("service")
	}
	if o.PDB != nil {
		t.Error("PDB with one replica")
	}
	// Every child is owned by the Messenger, as its controller.
	for _, obj := range []metav1.Object{o.ConfigMap, o.Deployment, o.Service} {
		refs := obj.GetOwnerReferences()
		if len(refs) != 1 || refs[0].UID != "uid-1" || refs[0].Kind != "Messenger" || !*refs[0].Controller || !*refs[0].BlockOwnerDeletion {
			t.Errorf("%s owner references %+v", obj.GetName(), refs)
		}
		if obj.GetLabels()[render.LabelManagedBy] != render.ManagedBy {
			t.Errorf("%s lacks the managed-by label the cache selects on", obj.GetName())
		}
	}
}

func TestRenderKafkaRedisSentinelReplicas(t *testing.T) {
	m := base()
	m.Spec.Backend = tetrav1.BackendKafka
	m.Spec.Kafka = &tetrav1.KafkaSpec{Brokers: []tetrav1.KafkaBroker{"k1:9092", "k2:9092"}, Topic: "tetra-outbox"}
	m.Spec.Redis = &tetrav1.RedisSpec{
		SecretRef: tetrav1.URLSecretRef{Name: "redis", Key: "uri"},
		Sentinel:  &tetrav1.RedisSentinelSpec{MasterName: "mymaster", Addresses: []tetrav1.SentinelAddress{"s1:26379", "s2:26379"}},
	}
	m.Spec.Replicas = ptr.To(int32(3))
	o := mustRender(t, m, inputs())
	e := env(o.Deployment)
	if e["TETRA_OUTBOX"].Value != "kafka://k1:9092,k2:9092/tetra-outbox" {
		t.Errorf("TETRA_OUTBOX=%q", e["TETRA_OUTBOX"].Value)
	}
	if e["TETRA_INDEX"].Value != "sentinel" || e["TETRA_INDEX"].ValueFrom != nil {
		t.Errorf("TETRA_INDEX with Sentinel: %+v", e["TETRA_INDEX"])
	}
	if e["TETRA_INDEX_SENTINEL_ADDRS"].Value != "s1:26379,s2:26379" || e["TETRA_INDEX_SENTINEL_MASTER"].Value != "mymaster" {
		t.Errorf("sentinel env %v %v", e["TETRA_INDEX_SENTINEL_ADDRS"], e["TETRA_INDEX_SENTINEL_MASTER"])
	}
	// The master's credentials come from the Secret's URL, never inline.
	if got := secretRef(t, e["TETRA_INDEX_SENTINEL_MASTER_URL"]); got != "redis/uri" {
		t.Errorf("TETRA_INDEX_SENTINEL_MASTER_URL from %s, want redis/uri", got)
	}
	if *o.Deployment.Spec.Replicas != 3 || o.Deployment.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType {
		t.Error("replicas or strategy")
	}
	if o.PDB == nil || o.PDB.Spec.MaxUnavailable.IntValue() != 1 || !reflect.DeepEqual(o.PDB.Spec.Selector.MatchLabels, render.SelectorLabels(m)) {
		t.Fatalf("PDB %+v", o.PDB)
	}
	if got := render.SecretNames(m); !reflect.DeepEqual(got, []string{"jwt", "pg", "redis"}) {
		t.Errorf("SecretNames %v", got)
	}
	// Without Sentinel the index URL comes from the Secret.
	m.Spec.Redis.Sentinel = nil
	e = env(mustRender(t, m, inputs()).Deployment)
	if got := secretRef(t, e["TETRA_INDEX"]); got != "redis/uri" {
		t.Errorf("TETRA_INDEX from %s", got)
	}
	if _, ok := e["TETRA_INDEX_SENTINEL_MASTER_URL"]; ok {
		t.Error("TETRA_INDEX_SENTINEL_MASTER_URL without Sentinel")
	}
}

func TestTuningFromSpec(t *testing.T) {
	m := base()
	m.Spec.Delivery = tetrav1.DeliverySpec{
		Lease: &metav1.Duration{Duration: 20 * time.Second}, MaxDeliveryAttempts: 5, MaxPending: 7,
		ReconnectGrace: &metav1.Duration{Duration: 0}, IdleTimeout: &metav1.Duration{Duration: 30 * time.Second},
		GCGrace: &metav1.Duration{Duration: 0},
	}
	m.Spec.Retention = tetrav1.RetentionSpec{History: &metav1.Duration{Duration: 48 * time.Hour}, OutboxBackstop: &metav1.Duration{Duration: 2 * time.Hour}}
	m.Spec.Limits = tetrav1.LimitsSpec{MaxBodyBytes: 1000, SendsPerSecond: 9, FanoutPerSecond: 300, InboundQueue: 100}
	o := mustRender(t, m, inputs())
	want := map[string]string{
		"lease": "20s", "maxDeliveryAttempts": "5", "maxPending": "7", "pingTimeout": "30s", "gcGrace": "0s",
		"historyRetention": "48h0m0s", "outboxRetention": "2h0m0s", "maxBodyBytes": "1000", "sendsPerSecond": "9",
		"maxInFlightSends": "64", "fanoutPerSecond": "300",
	}
	for k, v := range want {
		if o.ConfigMap.Data[k] != v {
			t.Errorf("%s=%q, want %q", k, o.ConfigMap.Data[k], v)
		}
	}
	if env(o.Deployment)["TETRA_INBOUND_QUEUE"].Value != "100" {
		t.Error("inbound queue is a cold env setting")
	}
	// The workload would refuse it; so does the renderer, naming the key.
	m.Spec.Retention.History = &metav1.Duration{Duration: time.Hour}
	m.Spec.Retention.OutboxBackstop = &metav1.Duration{Duration: 2 * time.Hour}
	if _, err := render.Render(m, inputs()); err == nil || !strings.Contains(err.Error(), "historyRetention") {
		t.Fatalf("history <= outbox accepted: %v", err)
	}
}

func TestConfigHash(t *testing.T) {
	h0 := render.ConfigHash(base(), inputs())
	for i := 0; i < 20; i++ { // map iteration order must not leak into it
		if h := render.ConfigHash(base(), inputs()); h != h0 {
			t.Fatal("hash is not deterministic")
		}
	}
	cases := []struct {
		name    string
		mutate  func(*tetrav1.Messenger, *render.Inputs)
		changes bool
	}{
		{"max-delivery-attempts is hot", func(m *tetrav1.Messenger, _ *render.Inputs) { m.Spec.Delivery.MaxDeliveryAttempts = 9 }, false},
		{"lease is hot", func(m *tetrav1.Messenger, _ *render.Inputs) {
			m.Spec.Delivery.Lease = &metav1.Duration{Duration: time.Minute}
		}, false},
		{"retention is hot", func(m *tetrav1.Messenger, _ *render.Inputs) {
			m.Spec.Retention.History = &metav1.Duration{Duration: 1000 * time.Hour}
		}, false},
		{"replicas do not roll", func(m *tetrav1.Messenger, _ *render.Inputs) { m.Spec.Replicas = ptr.To(int32(3)) }, false},
		{"status is not an input", func(m *tetrav1.Messenger, _ *render.Inputs) {
			m.Status.ConfigHash, m.Status.ReadyReplicas, m.ResourceVersion = "x", 3, "999"
		}, false},
		{"restart epoch is its own annotation", func(_ *tetrav1.Messenger, in *render.Inputs) { in.RestartEpoch = 4 }, false},
		{"backend", func(m *tetrav1.Messenger, _ *render.Inputs) {
			m.Spec.Backend = tetrav1.BackendKafka
			m.Spec.Kafka = &tetrav1.KafkaSpec{Brokers: []tetrav1.KafkaBroker{"k:9092"}, Topic: "t"}
		}, true},
		{"image", func(m *tetrav1.Messenger, _ *render.Inputs) { m.Spec.Image = "example/tetra:2" }, true},
		{"default image when spec has none", func(m *tetrav1.Messenger, in *render.Inputs) {
			m.Spec.Image = ""
			in.DefaultImage = "example/tetra:1"
		}, false},
		{"store secret", func(m *tetrav1.Messenger, _ *render.Inputs) { m.Spec.PostgreSQL.SecretRef.Name = "pg2" }, true},
		{"secret rotation", func(_ *tetrav1.Messenger, in *render.Inputs) {
			in.SecretVersions = map[string]string{"pg": "10", "jwt": "12"}
		}, true},
		{"redis", func(m *tetrav1.Messenger, _ *render.Inputs) {
			m.Spec.Redis = &tetrav1.RedisSpec{SecretRef: tetrav1.URLSecretRef{Name: "r", Key: "url"}}
		}, true},
		{"inbound queue", func(m *tetrav1.Messenger, _ *render.Inputs) { m.Spec.Limits.InboundQueue = 10 }, true},
	}
	for _, c := range cases {
		m, in := base(), inputs()
		in.SecretVersions = map[string]string{"pg": "10", "jwt": "11"}
		c.mutate(m, &in)
		if changed := render.ConfigHash(m, in) != h0; changed != c.changes {
			t.Errorf("%s: hash changed=%v, want %v", c.name, changed, c.changes)
		}
	}
}

func TestRestartEpochAnnotation(t *testing.T) {
	in := inputs()
	in.RestartEpoch = 3
	o := mustRender(t, base(), in)
	if o.Deployment.Spec.Template.Annotations[tetrav1.RedisEpochAnnotation] != "3" {
		t.Fatalf("annotations %v", o.Deployment.Spec.Template.Annotations)
	}
}

func TestRenderIsPure(t *testing.T) {
	a, b := mustRender(t, base(), inputs()), mustRender(t, base(), inputs())
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two renders of the same inputs differ")
	}
	m := base()
	m.Spec.Image = ""
	if _, err := render.Render(m, render.Inputs{}); err != render.ErrNoImage {
		t.Fatalf("no image: %v", err)
	}
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	sort.Strings(out)
	return out
}

// The pod stops gracefully: a preStop sleep, the workload's drain and its
// shutdown fit in the grace period; it mounts no ServiceAccount token; the
// image is pulled only when absent; a failed run's log becomes the
// termination message.
func TestRenderPodLifecycle(t *testing.T) {
	d := mustRender(t, base(), inputs()).Deployment
	ps := d.Spec.Template.Spec
	c := ps.Containers[0]
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Sleep == nil ||
		c.Lifecycle.PreStop.Sleep.Seconds != render.PreStopSleepSeconds || render.PreStopSleepSeconds < 3 {
		t.Fatalf("preStop %+v", c.Lifecycle)
	}
	if got := env(d)["TETRA_DRAIN"].Value; got != "3s" {
		t.Errorf("TETRA_DRAIN %q, want 3s", got)
	}
	const shutdownGrace = 10 // server.DefaultConfig().ShutdownGrace
	if g := *ps.TerminationGracePeriodSeconds; g < render.PreStopSleepSeconds+render.DrainSeconds+shutdownGrace {
		t.Errorf("terminationGracePeriodSeconds %d < preStop %d + drain %d + shutdown %d", g, render.PreStopSleepSeconds, render.DrainSeconds, shutdownGrace)
	}
	if ps.AutomountServiceAccountToken == nil || *ps.AutomountServiceAccountToken {
		t.Error("the workload pod mounts a ServiceAccount token it never uses")
	}
	if c.ImagePullPolicy != corev1.PullIfNotPresent {
		t.Errorf("pull policy %q, want IfNotPresent by default", c.ImagePullPolicy)
	}
	if c.TerminationMessagePolicy != corev1.TerminationMessageFallbackToLogsOnError {
		t.Errorf("termination message policy %q", c.TerminationMessagePolicy)
	}
	if d.Spec.ProgressDeadlineSeconds == nil || *d.Spec.ProgressDeadlineSeconds != render.ProgressDeadlineSeconds {
		t.Errorf("progressDeadlineSeconds %v", d.Spec.ProgressDeadlineSeconds)
	}
	m := base()
	m.Spec.ImagePullPolicy = corev1.PullAlways
	if got := mustRender(t, m, inputs()).Deployment.Spec.Template.Spec.Containers[0].ImagePullPolicy; got != corev1.PullAlways {
		t.Errorf("spec.imagePullPolicy Always rendered as %q", got)
	}
}

// The Redis key prefix: derived from namespace and name unless set, in the
// environment (so a change rolls), and never shared by two Messengers.
func TestRenderKeyPrefix(t *testing.T) {
	m := base()
	if _, ok := env(mustRender(t, m, inputs()).Deployment)["TETRA_INDEX_PREFIX"]; ok || render.KeyPrefix(m) != "" {
		t.Error("a key prefix without Redis")
	}
	m.Spec.Redis = &tetrav1.RedisSpec{SecretRef: tetrav1.URLSecretRef{Name: "redis"}}
	o := mustRender(t, m, inputs())
	if got := env(o.Deployment)["TETRA_INDEX_PREFIX"].Value; got != "tetra:ns/chat:" {
		t.Errorf("default prefix %q, want tetra:ns/chat:", got)
	}
	other := base()
	other.Namespace, other.Name = "ns-chat", "x" // "tetra:ns-chat/x:" vs "tetra:ns/chat:"
	other.Spec.Redis = m.Spec.Redis
	a, b := render.KeyPrefix(m), render.KeyPrefix(other)
	if strings.HasPrefix(a, b) || strings.HasPrefix(b, a) {
		t.Errorf("prefixes %q and %q overlap", a, b)
	}
	m2 := m.DeepCopy()
	m2.Spec.Redis.KeyPrefix = "shop:chat:"
	o2 := mustRender(t, m2, inputs())
	if got := env(o2.Deployment)["TETRA_INDEX_PREFIX"].Value; got != "shop:chat:" {
		t.Errorf("spec.redis.keyPrefix rendered as %q", got)
	}
	if o2.ConfigHash == o.ConfigHash {
		t.Error("a key prefix change does not change the config hash (would not roll)")
	}
	if o.Deployment.Spec.Strategy.Type != appsv1.RollingUpdateDeploymentStrategyType {
		t.Errorf("strategy %s with Redis", o.Deployment.Spec.Strategy.Type)
	}
	in := inputs()
	in.Recreate = true
	if d := mustRender(t, m2, in).Deployment; d.Spec.Strategy.Type != appsv1.RecreateDeploymentStrategyType || d.Spec.Strategy.RollingUpdate != nil {
		t.Errorf("Recreate input rendered %+v", d.Spec.Strategy)
	}
}

func TestTuningHash(t *testing.T) {
	a := render.TuningHash(map[string]string{"lease": "10s", "maxPending": "20"})
	if a != render.TuningHash(map[string]string{"maxPending": "20", "lease": "10s"}) || len(a) != 32 {
		t.Fatalf("hash %q not deterministic", a)
	}
	if a == render.TuningHash(map[string]string{"lease": "10s", "maxPending": "21"}) {
		t.Fatal("a value change keeps the hash")
	}
	if render.TuningHash(map[string]string{"a": "b=c"}) == render.TuningHash(map[string]string{"a=b": "c"}) {
		t.Fatal("ambiguous encoding")
	}
}
