package render

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	tetrav1 "github.com/tetra-messenger/tetra/api/v1alpha1"
	"github.com/tetra-messenger/tetra/workload/config"
)

// Fixed paths and ports of the workload container.
const (
	ContainerName = "tetra"
	HTTPPort      = 8080
	// MetricsPort serves the workload's /metrics only (TETRA_METRICS_ADDR),
	// apart from the client port, so a NetworkPolicy can admit scrapers
	// and clients separately.
	MetricsPort = 9090
	TuningDir   = "/etc/tetra/tuning"
	DataDir     = "/var/lib/tetra"
	// RunAsUser is the non-root user of the image (distroless "nonroot").
	RunAsUser = 65532

	// DefaultURLKey and DefaultJWTKey are the Secret keys used when a
	// reference names none (the schema defaults them too).
	DefaultURLKey = "url"
	DefaultJWTKey = "secret"
)

// How a workload pod stops. The kubelet first runs the preStop sleep,
// during which the pod, already terminating, leaves the Service's ready
// endpoints and kube-proxy stops sending it new connections; then SIGTERM:
// the workload fails /readyz and keeps serving for Drain (TETRA_DRAIN),
// then closes its sockets with 1001 and commits what is in flight within
// its shutdown grace (10 s). TerminationGracePeriodSeconds covers the
// three with a margin, so a graceful stop is never cut by SIGKILL.
const (
	PreStopSleepSeconds           = 5
	DrainSeconds                  = 3
	TerminationGracePeriodSeconds = PreStopSleepSeconds + DrainSeconds + 10 + 12
	// ProgressDeadlineSeconds: a rollout that makes no progress this long
	// is marked ProgressDeadlineExceeded by the Deployment controller,
	// which the operator reports as Degraded.
	ProgressDeadlineSeconds = 300
)

// Labels set on every rendered object.
const (
	LabelName      = "app.kubernetes.io/name"
	LabelInstance  = "app.kubernetes.io/instance"
	LabelComponent = "app.kubernetes.io/component"
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// ManagedBy is the value of LabelManagedBy; the operator's cache only
	// holds ConfigMaps, Deployments, Services and PDBs carrying it.
	ManagedBy = "tetra-operator"
)

// ErrNoImage is returned when neither the Messenger nor the operator names
// an image.
var ErrNoImage = errors.New("render: no image: set spec.image or the operator's --default-image")

// Inputs are what the controller resolved outside the Messenger.
type Inputs struct {
	// DefaultImage is used when spec.image is empty.
	DefaultImage string
	// SecretVersions maps the name of each referenced Secret to its
	// resourceVersion. It feeds the config hash, so a rotation rolls.
	SecretVersions map[string]string
	// RestartEpoch, when above 0, is written into the pod template as
	// RedisEpochAnnotation: the Redis epoch of the last failover that had
	// to be handled by restarting the pods.
	RestartEpoch int64
	// Recreate replaces the pods instead of rolling them, even with Redis:
	// the controller sets it while the running pods use another Redis key
	// prefix (pods of two prefixes may not share one database, and the
	// workload refuses to start next to one).
	Recreate bool
	// OperatorNamespace is the namespace the operator runs in; with
	// spec.networkPolicy its pods (label app.kubernetes.io/name=
	// tetra-operator there) are admitted to the client port for the
	// rebuild call. Empty (the operator runs out of cluster): no such rule.
	OperatorNamespace string
}

// Objects are the rendered children of a Messenger.
type Objects struct {
	ConfigMap  *corev1.ConfigMap
	Deployment *appsv1.Deployment
	Service    *corev1.Service
	// PDB is nil with one replica or none.
	PDB *policyv1.PodDisruptionBudget
	// NetworkPolicy is nil without spec.networkPolicy.
	NetworkPolicy *networkingv1.NetworkPolicy
	// ConfigHash is the hash written on the pod template.
	ConfigHash string
	// FleetHash is the hash of what makes the pods one fleet (FleetHash).
	FleetHash string
	// TuningHash is the hash of the ConfigMap's data (TuningHash).
	TuningHash string
}

// Names of the children.
func DeploymentName(m *tetrav1.Messenger) string { return m.Name }
func ServiceName(m *tetrav1.Messenger) string    { return m.Name }
func PDBName(m *tetrav1.Messenger) string        { return m.Name }
func ConfigMapName(m *tetrav1.Messenger) string  { return m.Name + "-tuning" }
func NetworkPolicyName(m *tetrav1.Messenger) string {
	return m.Name
}

// Default resources of the workload container when spec.resources is
// empty, sized from docs/benchmarks.md (2 cores AMD EPYC): the largest
// measured peak RSS of one server is 442 MiB (5,000 connected clients at
// 2,000 msg/s, embedded), PostgreSQL + Redis at 2,000 msg/s with 600
// clients 102 MiB; one server at 2,000 msg/s used 10.4 s of CPU in 20 s
// (about half a core). The request holds the 5,000-client peak; the limit
// leaves it twice that before the kernel kills the pod. No CPU limit:
// CFS throttling adds latency to every delivery, and a request already
// shares CPU fairly under contention. Ephemeral storage holds the
// container's logs (the kubelet keeps at most 5 files of 10 MiB by
// default) and the data directory, which with PostgreSQL holds only the
// instance lock and the JWT secret file: a request of 64Mi and a limit of
// 1Gi (the data emptyDir is capped at DataSizeLimit).
var (
	DefaultCPURequest              = resource.MustParse("500m")
	DefaultMemoryRequest           = resource.MustParse("512Mi")
	DefaultMemoryLimit             = resource.MustParse("1Gi")
	DefaultEphemeralStorageRequest = resource.MustParse("64Mi")
	DefaultEphemeralStorageLimit   = resource.MustParse("1Gi")
	// DataSizeLimit caps the data emptyDir (/var/lib/tetra).
	DataSizeLimit = resource.MustParse("256Mi")
)

// Resources is spec.resources, or the defaults above when it sets neither
// requests nor limits (nothing is mixed into a spec that sets either).
func Resources(m *tetrav1.Messenger) corev1.ResourceRequirements {
	r := m.Spec.Resources
	if len(r.Requests) > 0 || len(r.Limits) > 0 || len(r.Claims) > 0 {
		return *r.DeepCopy()
	}
	return corev1.ResourceRequirements{
		Requests: corev1.ResourceList{corev1.ResourceCPU: DefaultCPURequest, corev1.ResourceMemory: DefaultMemoryRequest,
			corev1.ResourceEphemeralStorage: DefaultEphemeralStorageRequest},
		Limits: corev1.ResourceList{corev1.ResourceMemory: DefaultMemoryLimit,
			corev1.ResourceEphemeralStorage: DefaultEphemeralStorageLimit},
	}
}

// TopologySpread spreads more than one replica across nodes and zones,
// softly (ScheduleAnyway: a single-node or single-zone cluster still
// schedules every pod); nil for one replica. matchLabelKeys
// pod-template-hash judges each ReplicaSet's pods alone, so a roll does
// not count the old pods.
func TopologySpread(m *tetrav1.Messenger) []corev1.TopologySpreadConstraint {
	if Replicas(m) <= 1 {
		return nil
	}
	c := func(key string) corev1.TopologySpreadConstraint {
		return corev1.TopologySpreadConstraint{
			MaxSkew:           1,
			TopologyKey:       key,
			WhenUnsatisfiable: corev1.ScheduleAnyway,
			LabelSelector:     &metav1.LabelSelector{MatchLabels: SelectorLabels(m)},
			MatchLabelKeys:    []string{"pod-template-hash"},
		}
	}
	return []corev1.TopologySpreadConstraint{c("kubernetes.io/hostname"), c("topology.kubernetes.io/zone")}
}

// OperatorPodLabel selects the operator's pods (the chart and config/manager
// both set it).
const OperatorPodLabel = "tetra-operator"

// ValidateNetworkPolicy checks spec.networkPolicy as the API server would
// check the NetworkPolicy (the schema's CEL rules check most of it; this
// also checks selectors and ipBlock exceptions), naming the field.
func ValidateNetworkPolicy(m *tetrav1.Messenger) error {
	np := m.Spec.NetworkPolicy
	if np == nil {
		return nil
	}
	if np.AllowAllClients && len(np.ClientsFrom) > 0 {
		return errors.New("spec.networkPolicy.clientsFrom must be omitted when spec.networkPolicy.allowAllClients is true")
	}
	if !np.AllowAllClients && len(np.ClientsFrom) == 0 && len(np.MetricsFrom) == 0 {
		return errors.New("spec.networkPolicy must name clientsFrom, metricsFrom or allowAllClients: an empty policy would admit only the operator")
	}
	check := func(field string, peers []networkingv1.NetworkPolicyPeer) error {
		if len(peers) > 16 {
			return fmt.Errorf("%s: at most 16 peers, got %d", field, len(peers))
		}
		for i, p := range peers {
			f := fmt.Sprintf("%s[%d]", field, i)
			if p.IPBlock != nil {
				if p.PodSelector != nil || p.NamespaceSelector != nil {
					return fmt.Errorf("%s: an ipBlock cannot be combined with a podSelector or namespaceSelector", f)
				}
				_, cidr, err := net.ParseCIDR(p.IPBlock.CIDR)
				if err != nil {
					return fmt.Errorf("%s.ipBlock.cidr: %q is not a CIDR such as 10.0.0.0/8", f, p.IPBlock.CIDR)
				}
				for j, ex := range p.IPBlock.Except {
					ip, exNet, err := net.ParseCIDR(ex)
					if err != nil {
						return fmt.Errorf("%s.ipBlock.except[%d]: %q is not a CIDR", f, j, ex)
					}
					exOnes, _ := exNet.Mask.Size()
					ones, _ := cidr.Mask.Size()
					if !cidr.Contains(ip) || exOnes <= ones {
						return fmt.Errorf("%s.ipBlock.except[%d]: %s must lie strictly within %s", f, j, ex, p.IPBlock.CIDR)
					}
				}
				continue
			}
			if p.PodSelector == nil && p.NamespaceSelector == nil {
				return fmt.Errorf("%s: name an ipBlock, a podSelector or a namespaceSelector", f)
			}
			for name, sel := range map[string]*metav1.LabelSelector{"podSelector": p.PodSelector, "namespaceSelector": p.NamespaceSelector} {
				if sel == nil {
					continue
				}
				if _, err := metav1.LabelSelectorAsSelector(sel); err != nil {
					return fmt.Errorf("%s.%s: %v", f, name, err)
				}
			}
		}
		return nil
	}
	if err := check("spec.networkPolicy.clientsFrom", np.ClientsFrom); err != nil {
		return err
	}
	return check("spec.networkPolicy.metricsFrom", np.MetricsFrom)
}

// NetworkPolicy renders spec.networkPolicy: ingress to m's pods only on
// the client port from clientsFrom (every source with allowAllClients)
// and the operator, and on the metrics port from metricsFrom; nil without
// spec.networkPolicy.
func NetworkPolicy(m *tetrav1.Messenger, in Inputs, meta metav1.ObjectMeta) *networkingv1.NetworkPolicy {
	np := m.Spec.NetworkPolicy
	if np == nil {
		return nil
	}
	port := func(name string) []networkingv1.NetworkPolicyPort {
		p := intstr.FromString(name)
		return []networkingv1.NetworkPolicyPort{{Protocol: ptr.To(corev1.ProtocolTCP), Port: &p}}
	}
	var rules []networkingv1.NetworkPolicyIngressRule
	switch {
	case np.AllowAllClients:
		rules = append(rules, networkingv1.NetworkPolicyIngressRule{Ports: port("http")})
	default:
		from := make([]networkingv1.NetworkPolicyPeer, 0, len(np.ClientsFrom)+1)
		for _, p := range np.ClientsFrom {
			from = append(from, *p.DeepCopy())
		}
		if in.OperatorNamespace != "" {
			from = append(from, networkingv1.NetworkPolicyPeer{
				NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": in.OperatorNamespace}},
				PodSelector:       &metav1.LabelSelector{MatchLabels: map[string]string{LabelName: OperatorPodLabel}},
			})
		}
		if len(from) > 0 {
			rules = append(rules, networkingv1.NetworkPolicyIngressRule{Ports: port("http"), From: from})
		}
	}
	if len(np.MetricsFrom) > 0 {
		from := make([]networkingv1.NetworkPolicyPeer, len(np.MetricsFrom))
		for i, p := range np.MetricsFrom {
			from[i] = *p.DeepCopy()
		}
		rules = append(rules, networkingv1.NetworkPolicyIngressRule{Ports: port("metrics"), From: from})
	}
	return &networkingv1.NetworkPolicy{
		TypeMeta:   metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicy"},
		ObjectMeta: meta,
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: SelectorLabels(m)},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress:     rules,
		},
	}
}

// SelectorLabels select the pods of a Messenger.
func SelectorLabels(m *tetrav1.Messenger) map[string]string {
	return map[string]string{LabelName: "tetra", LabelInstance: m.Name}
}

// Labels are set on every child and on the pods.
func Labels(m *tetrav1.Messenger) map[string]string {
	l := SelectorLabels(m)
	l[LabelComponent] = "messenger"
	l[LabelManagedBy] = ManagedBy
	return l
}

// Replicas is spec.replicas with its default.
func Replicas(m *tetrav1.Messenger) int32 {
	if m.Spec.Replicas == nil {
		return 1
	}
	return *m.Spec.Replicas
}

// SecretNames are the Secrets a Messenger references, sorted, without
// duplicates.
func SecretNames(m *tetrav1.Messenger) []string {
	set := map[string]bool{m.Spec.PostgreSQL.SecretRef.Name: true, m.Spec.JWT.SecretRef.Name: true}
	if m.Spec.Redis != nil {
		set[m.Spec.Redis.SecretRef.Name] = true
	}
	if m.Spec.Nudge != nil {
		set[m.Spec.Nudge.SecretRef.Name] = true
	}
	out := make([]string, 0, len(set))
	for n := range set {
		if n != "" {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// KeyPrefix is the Redis key prefix of m's pods: spec.redis.keyPrefix, or
// "tetra:<namespace>/<name>:" (unique per Messenger: neither part may hold
// '/' or ':'); "" without spec.redis.
func KeyPrefix(m *tetrav1.Messenger) string {
	if m.Spec.Redis == nil {
		return ""
	}
	if p := m.Spec.Redis.KeyPrefix; p != "" {
		return p
	}
	return "tetra:" + m.Namespace + "/" + m.Name + ":"
}

// PullPolicy is spec.imagePullPolicy, or IfNotPresent: the images are
// pinned to a version, so a node that has one (pre-loaded, air-gapped)
// runs it without asking a registry.
func PullPolicy(m *tetrav1.Messenger) corev1.PullPolicy {
	if m.Spec.ImagePullPolicy != "" {
		return m.Spec.ImagePullPolicy
	}
	return corev1.PullIfNotPresent
}

// TuningHash hashes tuning ConfigMap data (quoted key=value lines, sorted by key):
// 32 hex digits.
func TuningHash(data map[string]string) string {
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%q=%q\n", k, data[k])
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// SecretKey returns key, or def when key is empty.
func SecretKey(key, def string) string {
	if key == "" {
		return def
	}
	return key
}

// Tuning returns the hot settings of m: config.Default() overridden by every
// field the spec sets, validated by config.Tuning.Validate (whose error
// names the key). The fields are those of the knob table (config.Knobs,
// Knob.CRD), found by their JSON names (specField): a duration field set
// (non-nil) or a count field set (non-zero) overrides its knob.
func Tuning(m *tetrav1.Messenger) (config.Tuning, error) {
	t := config.Default()
	for _, k := range config.Knobs {
		if k.CRD == "" {
			continue
		}
		v, set, err := specField(&m.Spec, k.CRD)
		if err != nil {
			return t, fmt.Errorf("render: tuning: %s: %w", k.Key, err)
		}
		if set {
			k.SetValue(&t, v)
		}
	}
	if err := t.Validate(); err != nil {
		return t, fmt.Errorf("render: tuning: %w", err)
	}
	return t, nil
}

// specField reads the field of spec at path, JSON names joined by dots
// ("delivery.lease"): a *metav1.Duration as nanoseconds, set when not nil;
// an int32 as itself, set when not 0 (the CRD's "unset"). A path that names
// no such field is an error (TestRenderSetsEveryKnob holds the table to
// the types).
func specField(spec *tetrav1.MessengerSpec, path string) (int64, bool, error) {
	v := reflect.ValueOf(spec).Elem()
	for _, name := range strings.Split(path, ".") {
		f, ok := jsonField(v, name)
		if !ok {
			return 0, false, fmt.Errorf("spec.%s: no field %q", path, name)
		}
		v = f
	}
	switch x := v.Interface().(type) {
	case *metav1.Duration:
		if x == nil {
			return 0, false, nil
		}
		return int64(x.Duration), true, nil
	case int32:
		return int64(x), x != 0, nil
	}
	return 0, false, fmt.Errorf("spec.%s: a %s, not a duration or an int32", path, v.Type())
}

// jsonField returns the field of struct v whose JSON name is name.
func jsonField(v reflect.Value, name string) (reflect.Value, bool) {
	if v.Kind() != reflect.Struct {
		return reflect.Value{}, false
	}
	for i := range v.NumField() {
		tag, _, _ := strings.Cut(v.Type().Field(i).Tag.Get("json"), ",")
		if tag == name {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

// InboundQueue is spec.limits.inboundQueue with its default.
func InboundQueue(m *tetrav1.Messenger) int32 {
	if m.Spec.Limits.InboundQueue == 0 {
		return 8000
	}
	return m.Spec.Limits.InboundQueue
}

// Backend is spec.backend with its default.
func Backend(m *tetrav1.Messenger) tetrav1.Backend {
	if m.Spec.Backend == "" {
		return tetrav1.BackendPostgres
	}
	return m.Spec.Backend
}

// Env is the workload container's environment, sorted by name: the cold
// settings. Secret values are references, never copied.
func Env(m *tetrav1.Messenger) []corev1.EnvVar {
	fromSecret := func(name, key string) *corev1.EnvVarSource {
		return &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
			LocalObjectReference: corev1.LocalObjectReference{Name: name}, Key: key,
		}}
	}
	env := []corev1.EnvVar{
		{Name: "TETRA_ADDR", Value: ":" + strconv.Itoa(HTTPPort)},
		{Name: "TETRA_METRICS_ADDR", Value: ":" + strconv.Itoa(MetricsPort)},
		{Name: "TETRA_DATA_DIR", Value: DataDir},
		{Name: "TETRA_TUNING_DIR", Value: TuningDir},
		{Name: "TETRA_LOG_FORMAT", Value: "json"},
		{Name: "TETRA_DRAIN", Value: strconv.Itoa(DrainSeconds) + "s"},
		{Name: "TETRA_INBOUND_QUEUE", Value: strconv.Itoa(int(InboundQueue(m)))},
		{Name: "TETRA_STORE", ValueFrom: fromSecret(m.Spec.PostgreSQL.SecretRef.Name, SecretKey(m.Spec.PostgreSQL.SecretRef.Key, DefaultURLKey))},
		{Name: "TETRA_JWT_SECRET", ValueFrom: fromSecret(m.Spec.JWT.SecretRef.Name, SecretKey(m.Spec.JWT.SecretRef.Key, DefaultJWTKey))},
	}
	if r := m.Spec.Redis; r != nil {
		if s := r.Sentinel; s != nil {
			// The workload's Sentinel mode: --index sentinel with the
			// addresses and master name; the Secret's URL gives the
			// master's credentials, database and TLS (its host is not
			// used to connect), as it does to the operator's probe.
			addrs := make([]string, len(s.Addresses))
			for i, a := range s.Addresses {
				addrs[i] = string(a)
			}
			env = append(env,
				corev1.EnvVar{Name: "TETRA_INDEX", Value: "sentinel"},
				corev1.EnvVar{Name: "TETRA_INDEX_SENTINEL_ADDRS", Value: strings.Join(addrs, ",")},
				corev1.EnvVar{Name: "TETRA_INDEX_SENTINEL_MASTER", Value: s.MasterName},
				corev1.EnvVar{Name: "TETRA_INDEX_SENTINEL_MASTER_URL", ValueFrom: fromSecret(r.SecretRef.Name, SecretKey(r.SecretRef.Key, DefaultURLKey))})
		} else {
			env = append(env, corev1.EnvVar{Name: "TETRA_INDEX", ValueFrom: fromSecret(r.SecretRef.Name, SecretKey(r.SecretRef.Key, DefaultURLKey))})
		}
		env = append(env, corev1.EnvVar{Name: "TETRA_INDEX_PREFIX", Value: KeyPrefix(m)})
	}
	if Backend(m) == tetrav1.BackendKafka && m.Spec.Kafka != nil {
		brokers := make([]string, len(m.Spec.Kafka.Brokers))
		for i, b := range m.Spec.Kafka.Brokers {
			brokers[i] = string(b)
		}
		env = append(env, corev1.EnvVar{Name: "TETRA_OUTBOX", Value: "kafka://" + strings.Join(brokers, ",") + "/" + m.Spec.Kafka.Topic})
	}
	if n := m.Spec.Nudge; n != nil {
		env = append(env, NudgeEnv(n)...)
		env = append(env, corev1.EnvVar{Name: "TETRA_NUDGE_SECRET", ValueFrom: fromSecret(n.SecretRef.Name, SecretKey(n.SecretRef.Key, DefaultJWTKey))})
	}
	sort.Slice(env, func(i, j int) bool { return env[i].Name < env[j].Name })
	return env
}

// NudgeEnv is the offline nudge's plain settings as `tetra serve` reads
// them (--nudge-url and the batch knobs; the secret is a Secret
// reference, added by Env). A zero field keeps the workload's default.
func NudgeEnv(n *tetrav1.NudgeSpec) []corev1.EnvVar {
	env := []corev1.EnvVar{{Name: "TETRA_NUDGE_URL", Value: n.URL}}
	if n.BatchSize > 0 {
		env = append(env, corev1.EnvVar{Name: "TETRA_NUDGE_BATCH_SIZE", Value: strconv.Itoa(int(n.BatchSize))})
	}
	if n.MaxDelay != nil {
		env = append(env, corev1.EnvVar{Name: "TETRA_NUDGE_MAX_DELAY", Value: n.MaxDelay.Duration.String()})
	}
	if n.QueueSize > 0 {
		env = append(env, corev1.EnvVar{Name: "TETRA_NUDGE_QUEUE", Value: strconv.Itoa(int(n.QueueSize))})
	}
	if n.Timeout != nil {
		env = append(env, corev1.EnvVar{Name: "TETRA_NUDGE_TIMEOUT", Value: n.Timeout.Duration.String()})
	}
	return env
}

// ValidateNudge checks spec.nudge as the workload will (the schema's CEL
// rule checks the URL's scheme and host; this also refuses user info and
// a batch, delay, queue or timeout out of range), naming the field.
func ValidateNudge(m *tetrav1.Messenger) error {
	n := m.Spec.Nudge
	if n == nil {
		return nil
	}
	if err := config.ValidateWebhookURL(n.URL); err != nil {
		return fmt.Errorf("spec.nudge.url: %w", err)
	}
	if n.SecretRef.Name == "" {
		return errors.New("spec.nudge.secretRef.name: required")
	}
	if n.BatchSize < 0 || n.BatchSize > 10000 {
		return fmt.Errorf("spec.nudge.batchSize must be between 1 and 10000, got %d", n.BatchSize)
	}
	if n.QueueSize < 0 || n.QueueSize > 1000000 {
		return fmt.Errorf("spec.nudge.queueSize must be between 1 and 1000000, got %d", n.QueueSize)
	}
	if d := n.MaxDelay; d != nil && (d.Duration < time.Millisecond || d.Duration > time.Minute) {
		return fmt.Errorf("spec.nudge.maxDelay must be between 1ms and 1m, got %v", d.Duration)
	}
	if d := n.Timeout; d != nil && (d.Duration < 100*time.Millisecond || d.Duration > 5*time.Minute) {
		return fmt.Errorf("spec.nudge.timeout must be between 100ms and 5m, got %v", d.Duration)
	}
	return nil
}

// Image is spec.image, or def.
func Image(m *tetrav1.Messenger, def string) string {
	if m.Spec.Image != "" {
		return m.Spec.Image
	}
	return def
}

// ConfigHash hashes the cold settings: backend, image, pull policy, the
// environment (sorted) and the referenced Secrets' resourceVersions (sorted
// by name). Nothing else: not the live object, not the status, not the hot
// settings, so a tuning change never rolls and a no-op never does either.
func ConfigHash(m *tetrav1.Messenger, in Inputs) string {
	type secretVersion struct{ Name, ResourceVersion string }
	versions := make([]secretVersion, 0, len(in.SecretVersions))
	for n, v := range in.SecretVersions {
		versions = append(versions, secretVersion{n, v})
	}
	sort.Slice(versions, func(i, j int) bool { return versions[i].Name < versions[j].Name })
	b, err := json.Marshal(struct {
		Backend    tetrav1.Backend
		Image      string
		PullPolicy corev1.PullPolicy
		Env        []corev1.EnvVar
		Secrets    []secretVersion
	}{Backend(m), Image(m, in.DefaultImage), PullPolicy(m), Env(m), versions})
	if err != nil { // plain structs of strings: cannot happen
		panic(fmt.Sprintf("render: hash: %v", err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// FleetHash hashes what every pod of a fleet must agree on or be refused
// at start beside the others (the workload's fleet identity, issue 24):
// the referenced Secrets' resourceVersions (the token secret, the Redis
// and store addresses that live in them) and the index settings of the
// environment (TETRA_INDEX*). A change of it replaces the pods (Recreate)
// instead of rolling them; see the controller's replaceForFleet.
func FleetHash(m *tetrav1.Messenger, in Inputs) string {
	type secretVersion struct{ Name, ResourceVersion string }
	versions := make([]secretVersion, 0, len(in.SecretVersions))
	for n, v := range in.SecretVersions {
		versions = append(versions, secretVersion{n, v})
	}
	sort.Slice(versions, func(i, j int) bool { return versions[i].Name < versions[j].Name })
	var index []corev1.EnvVar
	for _, e := range Env(m) {
		if strings.HasPrefix(e.Name, "TETRA_INDEX") {
			index = append(index, e)
		}
	}
	b, err := json.Marshal(struct {
		Secrets []secretVersion
		Index   []corev1.EnvVar
	}{versions, index})
	if err != nil { // plain structs of strings: cannot happen
		panic(fmt.Sprintf("render: fleet hash: %v", err))
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// Render renders the children of m. m must have a name, namespace and UID
// (the owner reference needs them).
func Render(m *tetrav1.Messenger, in Inputs) (Objects, error) {
	if err := ValidateNudge(m); err != nil {
		return Objects{}, err
	}
	if err := ValidateNetworkPolicy(m); err != nil {
		return Objects{}, err
	}
	tuning, err := Tuning(m)
	if err != nil {
		return Objects{}, err
	}
	image := Image(m, in.DefaultImage)
	if image == "" {
		return Objects{}, ErrNoImage
	}
	owner := []metav1.OwnerReference{*metav1.NewControllerRef(m, tetrav1.GroupVersion.WithKind("Messenger"))}
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: m.Namespace, Labels: Labels(m), OwnerReferences: owner}
	}
	hash := ConfigHash(m, in)

	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: meta(ConfigMapName(m)),
		Data:       tuning.Render(),
	}
	tuningHash := TuningHash(cm.Data)

	fleetHash := FleetHash(m, in)
	podAnnotations := map[string]string{
		tetrav1.ConfigHashAnnotation: hash,
		tetrav1.FleetHashAnnotation:  fleetHash,
		"prometheus.io/scrape":       "true",
		"prometheus.io/port":         strconv.Itoa(MetricsPort),
		"prometheus.io/path":         "/metrics",
	}
	if in.RestartEpoch > 0 {
		podAnnotations[tetrav1.RedisEpochAnnotation] = strconv.FormatInt(in.RestartEpoch, 10)
	}
	// Without Redis each pod has its own in-process index: two pods must
	// never run at once, so replace instead of rolling.
	// Nor may pods of two Redis key prefixes share one database (in.Recreate).
	strategy := appsv1.DeploymentStrategy{Type: appsv1.RecreateDeploymentStrategyType}
	if m.Spec.Redis != nil && !in.Recreate {
		strategy = appsv1.DeploymentStrategy{
			Type: appsv1.RollingUpdateDeploymentStrategyType,
			RollingUpdate: &appsv1.RollingUpdateDeployment{
				MaxUnavailable: ptr.To(intstr.FromInt32(0)),
				MaxSurge:       ptr.To(intstr.FromInt32(1)),
			},
		}
	}
	probe := func(path string, failures int32) *corev1.Probe {
		return &corev1.Probe{
			ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
				Path: path, Port: intstr.FromString("http"), Scheme: corev1.URISchemeHTTP,
			}},
			PeriodSeconds: 10, TimeoutSeconds: 2, FailureThreshold: failures, SuccessThreshold: 1,
		}
	}
	resources := Resources(m)
	dep := &appsv1.Deployment{
		TypeMeta:   metav1.TypeMeta{APIVersion: "apps/v1", Kind: "Deployment"},
		ObjectMeta: meta(DeploymentName(m)),
		Spec: appsv1.DeploymentSpec{
			Replicas:                ptr.To(Replicas(m)),
			Selector:                &metav1.LabelSelector{MatchLabels: SelectorLabels(m)},
			Strategy:                strategy,
			ProgressDeadlineSeconds: ptr.To(int32(ProgressDeadlineSeconds)),
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: Labels(m), Annotations: podAnnotations},
				Spec: corev1.PodSpec{
					EnableServiceLinks: ptr.To(false),
					// The workload never calls the API server.
					AutomountServiceAccountToken:  ptr.To(false),
					TerminationGracePeriodSeconds: ptr.To(int64(TerminationGracePeriodSeconds)),
					TopologySpreadConstraints:     TopologySpread(m),
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   ptr.To(true),
						RunAsUser:      ptr.To(int64(RunAsUser)),
						RunAsGroup:     ptr.To(int64(RunAsUser)),
						FSGroup:        ptr.To(int64(RunAsUser)),
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{{
						Name:            ContainerName,
						Image:           image,
						ImagePullPolicy: PullPolicy(m),
						Args:            []string{"serve"},
						Env:             Env(m),
						Ports: []corev1.ContainerPort{
							{Name: "http", ContainerPort: HTTPPort, Protocol: corev1.ProtocolTCP},
							{Name: "metrics", ContainerPort: MetricsPort, Protocol: corev1.ProtocolTCP},
						},
						LivenessProbe:  probe("/healthz", 3),
						ReadinessProbe: probe("/readyz", 2),
						Lifecycle: &corev1.Lifecycle{PreStop: &corev1.LifecycleHandler{
							Sleep: &corev1.SleepAction{Seconds: PreStopSleepSeconds},
						}},
						// The last log lines of a failed run become the
						// termination message, which the operator quotes
						// in Degraded (CrashLooping).
						TerminationMessagePolicy: corev1.TerminationMessageFallbackToLogsOnError,
						Resources:                resources,
						VolumeMounts: []corev1.VolumeMount{
							{Name: "tuning", MountPath: TuningDir, ReadOnly: true},
							{Name: "data", MountPath: DataDir},
						},
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: ptr.To(false),
							ReadOnlyRootFilesystem:   ptr.To(true),
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
					}},
					Volumes: []corev1.Volume{
						{Name: "tuning", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: ConfigMapName(m)},
						}}},
						{Name: "data", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: ptr.To(DataSizeLimit)}}},
					},
				},
			},
		},
	}

	svc := &corev1.Service{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Service"},
		ObjectMeta: meta(ServiceName(m)),
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: SelectorLabels(m),
			Ports: []corev1.ServicePort{
				{Name: "http", Port: HTTPPort, TargetPort: intstr.FromString("http"), Protocol: corev1.ProtocolTCP},
				{Name: "metrics", Port: MetricsPort, TargetPort: intstr.FromString("metrics"), Protocol: corev1.ProtocolTCP},
			},
		},
	}

	out := Objects{ConfigMap: cm, Deployment: dep, Service: svc, ConfigHash: hash, FleetHash: fleetHash, TuningHash: tuningHash,
		NetworkPolicy: NetworkPolicy(m, in, meta(NetworkPolicyName(m)))}
	if Replicas(m) > 1 {
		out.PDB = &policyv1.PodDisruptionBudget{
			TypeMeta:   metav1.TypeMeta{APIVersion: "policy/v1", Kind: "PodDisruptionBudget"},
			ObjectMeta: meta(PDBName(m)),
			Spec: policyv1.PodDisruptionBudgetSpec{
				MaxUnavailable: ptr.To(intstr.FromInt32(1)),
				Selector:       &metav1.LabelSelector{MatchLabels: SelectorLabels(m)},
			},
		}
	}
	return out, nil
}
