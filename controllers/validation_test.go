package controllers_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	tetrav1 "github.com/tetra-messenger/tetra/api/v1alpha1"
)

// TestRefusedSpecs: the API server refuses bad specs (the CRD's schema and
// CEL rules), with a message that names the field. One case per rule.
func TestRefusedSpecs(t *testing.T) {
	needEnv(t)
	t.Parallel()
	ns := newNamespace(t)
	d := func(s string) *metav1.Duration {
		v, err := time.ParseDuration(s)
		if err != nil {
			t.Fatal(err)
		}
		return &metav1.Duration{Duration: v}
	}
	kafka := &tetrav1.KafkaSpec{Brokers: []tetrav1.KafkaBroker{"kafka:9092"}, Topic: "outbox"}
	redis := &tetrav1.RedisSpec{SecretRef: tetrav1.URLSecretRef{Name: "redis"}}
	cases := []struct {
		name   string
		mutate func(*tetrav1.Messenger)
		field  string // must appear in the error
		also   string // and so must this
	}{
		// CEL rules
		{"kafka backend without kafka", func(m *tetrav1.Messenger) { m.Spec.Backend = tetrav1.BackendKafka }, "spec.kafka", "required when spec.backend is kafka"},
		{"kafka settings with postgres backend", func(m *tetrav1.Messenger) { m.Spec.Kafka = kafka }, "spec.kafka", "must be omitted"},
		{"replicas > 1 without redis", func(m *tetrav1.Messenger) { m.Spec.Replicas = ptrTo(int32(2)) }, "spec.replicas", "requires spec.redis"},
		{"history not above outbox backstop", func(m *tetrav1.Messenger) {
			m.Spec.Retention.History, m.Spec.Retention.OutboxBackstop = d("24h"), d("26h")
		}, "spec.retention.history", "invariant I4"},
		{"history equal to outbox backstop", func(m *tetrav1.Messenger) { m.Spec.Retention.History = d("26h") }, "spec.retention.history", "must exceed spec.retention.outboxBackstop"},
		{"history range", func(m *tetrav1.Messenger) { m.Spec.Retention.History = d("30m") }, "spec.retention.history", "between 1h"},
		{"outbox backstop range", func(m *tetrav1.Messenger) { m.Spec.Retention.OutboxBackstop = d("10s") }, "spec.retention.outboxBackstop", "between 1m"},
		{"lease range", func(m *tetrav1.Messenger) { m.Spec.Delivery.Lease = d("10ms") }, "spec.delivery.lease", "between 100ms and 1h"},
		{"reconnect grace range", func(m *tetrav1.Messenger) { m.Spec.Delivery.ReconnectGrace = d("2h") }, "spec.delivery.reconnectGrace", "between 0s and 1h"},
		{"ping interval range", func(m *tetrav1.Messenger) { m.Spec.Delivery.PingInterval = d("11m") }, "spec.delivery.pingInterval", "between 100ms and 10m"},
		{"idle timeout range", func(m *tetrav1.Messenger) { m.Spec.Delivery.IdleTimeout = d("1ms") }, "spec.delivery.idleTimeout", "between 100ms and 10m"},
		{"gc grace range", func(m *tetrav1.Messenger) { m.Spec.Delivery.GCGrace = d("90m") }, "spec.delivery.gcGrace", "between 0s and 1h"},
		{"gc interval range", func(m *tetrav1.Messenger) { m.Spec.Delivery.GCInterval = d("1ms") }, "spec.delivery.gcInterval", "between 10ms and 1h"},
		{"poll interval range", func(m *tetrav1.Messenger) { m.Spec.Delivery.PollInterval = d("2m") }, "spec.delivery.pollInterval", "between 1ms and 1m"},
		// OpenAPI enums and ranges
		{"unknown backend", func(m *tetrav1.Messenger) { m.Spec.Backend = "mysql" }, "spec.backend", "Unsupported value"},
		{"max delivery attempts too low", func(m *tetrav1.Messenger) { m.Spec.Delivery.MaxDeliveryAttempts = -1 }, "spec.delivery.maxDeliveryAttempts", "greater than or equal to 1"},
		{"max delivery attempts too high", func(m *tetrav1.Messenger) { m.Spec.Delivery.MaxDeliveryAttempts = 101 }, "spec.delivery.maxDeliveryAttempts", "less than or equal to 100"},
		{"max pending", func(m *tetrav1.Messenger) { m.Spec.Delivery.MaxPending = 100001 }, "spec.delivery.maxPending", "less than or equal to 100000"},
		{"max body", func(m *tetrav1.Messenger) { m.Spec.Limits.MaxBodyBytes = 70000 }, "spec.limits.maxBodyBytes", "less than or equal to 60000"},
		{"replicas range", func(m *tetrav1.Messenger) { m.Spec.Replicas = ptrTo(int32(-1)) }, "spec.replicas", "greater than or equal to 0"},
		{"kafka without brokers", func(m *tetrav1.Messenger) {
			m.Spec.Backend, m.Spec.Kafka = tetrav1.BackendKafka, &tetrav1.KafkaSpec{Topic: "outbox"}
		}, "spec.kafka.brokers", ""},
		{"kafka broker without port", func(m *tetrav1.Messenger) {
			m.Spec.Backend, m.Spec.Kafka = tetrav1.BackendKafka, &tetrav1.KafkaSpec{Brokers: []tetrav1.KafkaBroker{"kafka"}, Topic: "outbox"}
		}, "spec.kafka.brokers[0]", ""},
		{"sentinel without addresses", func(m *tetrav1.Messenger) {
			m.Spec.Redis = &tetrav1.RedisSpec{SecretRef: redis.SecretRef, Sentinel: &tetrav1.RedisSentinelSpec{MasterName: "m"}}
		}, "spec.redis.sentinel.addresses", ""},
		{"image pull policy", func(m *tetrav1.Messenger) { m.Spec.ImagePullPolicy = "Sometimes" }, "spec.imagePullPolicy", "Unsupported value"},
		{"postgresql secret name", func(m *tetrav1.Messenger) { m.Spec.PostgreSQL.SecretRef.Name = "" }, "spec.postgresql.secretRef.name", ""},
		{"postgresql secret name not a DNS subdomain", func(m *tetrav1.Messenger) { m.Spec.PostgreSQL.SecretRef.Name = "Bad_Name" }, "spec.postgresql.secretRef.name", "should match"},
		{"jwt secret name trailing dot", func(m *tetrav1.Messenger) { m.Spec.JWT.SecretRef.Name = "jwt." }, "spec.jwt.secretRef.name", "should match"},
		{"redis secret name too long", func(m *tetrav1.Messenger) {
			m.Spec.Redis = &tetrav1.RedisSpec{SecretRef: tetrav1.URLSecretRef{Name: strings.Repeat("a", 254)}}
		}, "spec.redis.secretRef.name", ""},
		{"postgresql secret key with a slash", func(m *tetrav1.Messenger) { m.Spec.PostgreSQL.SecretRef.Key = "a/b" }, "spec.postgresql.secretRef.key", "should match"},
		{"jwt secret key with a space", func(m *tetrav1.Messenger) { m.Spec.JWT.SecretRef.Key = "my key" }, "spec.jwt.secretRef.key", "should match"},
		{"redis secret key too long", func(m *tetrav1.Messenger) {
			m.Spec.Redis = &tetrav1.RedisSpec{SecretRef: tetrav1.URLSecretRef{Name: "redis", Key: strings.Repeat("k", 254)}}
		}, "spec.redis.secretRef.key", ""},
		{"redis key prefix with a glob character", func(m *tetrav1.Messenger) {
			m.Spec.Redis = &tetrav1.RedisSpec{SecretRef: redis.SecretRef, KeyPrefix: "tetra*:"}
		}, "spec.redis.keyPrefix", "may contain only letters, digits"},
		{"redis key prefix with a space", func(m *tetrav1.Messenger) {
			m.Spec.Redis = &tetrav1.RedisSpec{SecretRef: redis.SecretRef, KeyPrefix: "my app:"}
		}, "spec.redis.keyPrefix", "must end with ':'"},
		{"redis key prefix with a NUL byte", func(m *tetrav1.Messenger) {
			m.Spec.Redis = &tetrav1.RedisSpec{SecretRef: redis.SecretRef, KeyPrefix: "a\x00b:"}
		}, "spec.redis.keyPrefix", "no spaces, glob characters or NUL bytes"},
		{"redis key prefix not ending with a colon", func(m *tetrav1.Messenger) {
			m.Spec.Redis = &tetrav1.RedisSpec{SecretRef: redis.SecretRef, KeyPrefix: "shop"}
		}, "spec.redis.keyPrefix", "must end with ':'"},
		{"redis key prefix too long", func(m *tetrav1.Messenger) {
			m.Spec.Redis = &tetrav1.RedisSpec{SecretRef: redis.SecretRef, KeyPrefix: strings.Repeat("a", 200) + ":"}
		}, "spec.redis.keyPrefix", "200"},
		// The offline nudge (spec.nudge).
		{"nudge url scheme", func(m *tetrav1.Messenger) {
			m.Spec.Nudge = &tetrav1.NudgeSpec{URL: "ftp://push.example.com/hook", SecretRef: tetrav1.JWTSecretRef{Name: "nudge"}}
		}, "spec.nudge.url", "http:// or https://"},
		{"nudge url not a URL", func(m *tetrav1.Messenger) {
			m.Spec.Nudge = &tetrav1.NudgeSpec{URL: "push.example.com hook", SecretRef: tetrav1.JWTSecretRef{Name: "nudge"}}
		}, "spec.nudge.url", "with a host"},
		{"nudge url without host", func(m *tetrav1.Messenger) {
			m.Spec.Nudge = &tetrav1.NudgeSpec{URL: "https:///hook", SecretRef: tetrav1.JWTSecretRef{Name: "nudge"}}
		}, "spec.nudge.url", "with a host"},
		{"nudge without secret", func(m *tetrav1.Messenger) {
			m.Spec.Nudge = &tetrav1.NudgeSpec{URL: "https://push.example.com/hook"}
		}, "spec.nudge.secretRef.name", ""},
		{"nudge batch size", func(m *tetrav1.Messenger) {
			m.Spec.Nudge = &tetrav1.NudgeSpec{URL: "https://push.example.com/hook", SecretRef: tetrav1.JWTSecretRef{Name: "nudge"}, BatchSize: 20000}
		}, "spec.nudge.batchSize", "less than or equal to 10000"},
		{"nudge max delay", func(m *tetrav1.Messenger) {
			m.Spec.Nudge = &tetrav1.NudgeSpec{URL: "https://push.example.com/hook", SecretRef: tetrav1.JWTSecretRef{Name: "nudge"}, MaxDelay: d("2m")}
		}, "spec.nudge.maxDelay", "between 1ms and 1m"},
		{"nudge timeout", func(m *tetrav1.Messenger) {
			m.Spec.Nudge = &tetrav1.NudgeSpec{URL: "https://push.example.com/hook", SecretRef: tetrav1.JWTSecretRef{Name: "nudge"}, Timeout: d("10ms")}
		}, "spec.nudge.timeout", "between 100ms and 5m"},
		// spec.networkPolicy: the peers' shape and CIDRs, and a policy
		// that names someone.
		{"network policy naming no one", func(m *tetrav1.Messenger) { m.Spec.NetworkPolicy = &tetrav1.NetworkPolicySpec{} }, "spec.networkPolicy", "must name clientsFrom, metricsFrom or allowAllClients"},
		{"network policy all clients and clientsFrom", func(m *tetrav1.Messenger) {
			m.Spec.NetworkPolicy = &tetrav1.NetworkPolicySpec{AllowAllClients: true, ClientsFrom: []networkingv1.NetworkPolicyPeer{nsPeer("x")}}
		}, "spec.networkPolicy.clientsFrom", "must be omitted when spec.networkPolicy.allowAllClients is true"},
		{"network policy empty peer", func(m *tetrav1.Messenger) {
			m.Spec.NetworkPolicy = &tetrav1.NetworkPolicySpec{ClientsFrom: []networkingv1.NetworkPolicyPeer{{}}}
		}, "spec.networkPolicy.clientsFrom", "either an ipBlock alone"},
		{"network policy ipBlock with a selector", func(m *tetrav1.Messenger) {
			p := nsPeer("x")
			p.IPBlock = &networkingv1.IPBlock{CIDR: "10.0.0.0/8"}
			m.Spec.NetworkPolicy = &tetrav1.NetworkPolicySpec{MetricsFrom: []networkingv1.NetworkPolicyPeer{p}}
		}, "spec.networkPolicy.metricsFrom", "either an ipBlock alone"},
		{"network policy bad CIDR", func(m *tetrav1.Messenger) {
			m.Spec.NetworkPolicy = &tetrav1.NetworkPolicySpec{ClientsFrom: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.300/8"}}}}
		}, "spec.networkPolicy.clientsFrom", "must be a CIDR"},
		// The name is the children's instance label and the Service's name.
		{"name too long", func(m *tetrav1.Messenger) { m.Name = strings.Repeat("a", 64) }, "metadata.name", "at most 63 characters"},
		{"name with a dot", func(m *tetrav1.Messenger) { m.Name = "chat.v2" }, "metadata.name", "DNS-1035 label"},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			// A name per case, so one wrongly accepted spec does not make
			// the next case fail for the wrong reason.
			m := messenger(ns, fmt.Sprintf("bad-%d", i), c.mutate)
			err := k8s.Create(ctx(), m)
			if err == nil {
				t.Fatalf("accepted: %+v", m.Spec)
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("not an Invalid error: %v", err)
			}
			if !strings.Contains(err.Error(), c.field) || !strings.Contains(err.Error(), c.also) {
				t.Fatalf("error does not name %q (%q): %v", c.field, c.also, err)
			}
		})
	}

	// The valid neighbours of those rules are accepted.
	ok := []func(*tetrav1.Messenger){
		func(m *tetrav1.Messenger) { m.Spec.Backend, m.Spec.Kafka = tetrav1.BackendKafka, kafka },
		func(m *tetrav1.Messenger) { m.Spec.Replicas, m.Spec.Redis = ptrTo(int32(3)), redis },
		func(m *tetrav1.Messenger) {
			m.Spec.Retention.History, m.Spec.Retention.OutboxBackstop = d("27h"), d("26h")
		},
		func(m *tetrav1.Messenger) { m.Spec.Delivery.ReconnectGrace, m.Spec.Delivery.GCGrace = d("0s"), d("0s") },
		func(m *tetrav1.Messenger) { m.Spec.Replicas = ptrTo(int32(0)) },
		func(m *tetrav1.Messenger) {
			m.Spec.Nudge = &tetrav1.NudgeSpec{URL: "http://push.default.svc:8080/hooks/nudge?x=1", SecretRef: tetrav1.JWTSecretRef{Name: "nudge"}}
		},
		func(m *tetrav1.Messenger) {
			m.Spec.NetworkPolicy = &tetrav1.NetworkPolicySpec{AllowAllClients: true,
				MetricsFrom: []networkingv1.NetworkPolicyPeer{nsPeer("monitoring"), {IPBlock: &networkingv1.IPBlock{CIDR: "10.1.0.0/16", Except: []string{"10.1.2.0/24"}}}}}
		},
		func(m *tetrav1.Messenger) {
			m.Spec.PostgreSQL.SecretRef = tetrav1.URLSecretRef{Name: "pg.v2", Key: "DB_url-2.x"}
			m.Spec.JWT.SecretRef = tetrav1.JWTSecretRef{Name: strings.Repeat("j", 253), Key: "_jwt"}
		},
	}
	for i, f := range ok {
		m := messenger(ns, "good", f)
		m.Name = m.Name + string(rune('a'+i))
		if err := k8s.Create(ctx(), m); err != nil {
			t.Errorf("valid spec %d refused: %v", i, err)
		}
	}
}

func nsPeer(name string) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": name}}}
}

// TestSamplesAreAccepted: the samples in config/samples pass the API
// server's validation (server-side dry run).
func TestSamplesAreAccepted(t *testing.T) {
	needEnv(t)
	t.Parallel()
	ns := newNamespace(t)
	files, err := filepath.Glob(filepath.Join("..", "config", "samples", "tetra_v1alpha1_messenger_*.yaml"))
	if err != nil || len(files) < 2 {
		t.Fatalf("samples %v %v", files, err)
	}
	backends := map[tetrav1.Backend]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var m tetrav1.Messenger
		if err := yaml.UnmarshalStrict(b, &m); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		m.Namespace = ns
		if err := k8s.Create(ctx(), &m, client.DryRunAll); err != nil {
			t.Errorf("%s refused: %v", filepath.Base(f), err)
		}
		backends[m.Spec.Backend] = true
	}
	if !backends[tetrav1.BackendPostgres] || !backends[tetrav1.BackendKafka] {
		t.Errorf("samples cover %v, want both backends", backends)
	}
}
