package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Backend is where the outbox lives. History is always in PostgreSQL.
// +kubebuilder:validation:Enum=postgres;kafka
type Backend string

const (
	// BackendPostgres keeps the outbox in PostgreSQL, next to history.
	BackendPostgres Backend = "postgres"
	// BackendKafka keeps the outbox in a Kafka topic partitioned by recipient.
	BackendKafka Backend = "kafka"
)

// Annotations the operator reads or writes.
const (
	// PausedAnnotation set to "true" on a Messenger stops the controller
	// from touching it or its children until it is removed or set to
	// anything else.
	PausedAnnotation = "tetra.dev/paused"
	// ConfigHashAnnotation on the pod template holds the hash of the cold
	// settings (backend, image, environment, referenced Secrets' versions);
	// a change rolls the pods.
	ConfigHashAnnotation = "tetra.dev/config-hash"
	// FleetHashAnnotation on the pod template hashes what the pods of one
	// fleet must agree on (the referenced Secrets, the index settings); a
	// change of it replaces the pods instead of rolling them, since a new
	// pod is refused beside old ones that disagree.
	FleetHashAnnotation = "tetra.dev/fleet-hash"
	// RedisEpochAnnotation on the pod template holds the Redis epoch of the
	// last failover that had to be handled by a restart.
	RedisEpochAnnotation = "tetra.dev/redis-epoch"
	// TuningHashAnnotation on each running pod (not the template) holds the
	// hash of the tuning ConfigMap's data the operator last announced to
	// it. Writing it makes the kubelet sync the pod, and so refresh the
	// mounted ConfigMap, at once instead of at its next periodic sync (up
	// to a minute and more later).
	TuningHashAnnotation = "tetra.dev/tuning-hash"
)

// URLSecretRef names the key of a Secret, in the Messenger's namespace,
// that holds a connection URL.
type URLSecretRef struct {
	// Name of the Secret (a DNS-1123 subdomain).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
	// Key inside the Secret. Default "url".
	// +kubebuilder:default=url
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +optional
	Key string `json:"key,omitempty"`
}

// JWTSecretRef names the key of a Secret, in the Messenger's namespace,
// that holds the token-signing secret.
type JWTSecretRef struct {
	// Name of the Secret (a DNS-1123 subdomain).
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$`
	Name string `json:"name"`
	// Key inside the Secret. Default "secret".
	// +kubebuilder:default=secret
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[-._a-zA-Z0-9]+$`
	// +optional
	Key string `json:"key,omitempty"`
}

// PostgreSQLSpec is the history store (and, with backend postgres, the
// outbox).
type PostgreSQLSpec struct {
	// SecretRef points at the connection URL (postgres://user:pass@host/db).
	SecretRef URLSecretRef `json:"secretRef"`
}

// RedisSentinelSpec names the Sentinel-managed master.
type RedisSentinelSpec struct {
	// MasterName is the name the Sentinels know the master by.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	MasterName string `json:"masterName"`
	// Addresses of the Sentinels, host:port. The operator requires two of
	// them (or the only one) to agree on the master.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	Addresses []SentinelAddress `json:"addresses"`
}

// SentinelAddress is a host:port.
// +kubebuilder:validation:Pattern=`^[^:\s]+:[0-9]{1,5}$`
// +kubebuilder:validation:MaxLength=262
type SentinelAddress string

// RedisSpec is the waterline index.
type RedisSpec struct {
	// SecretRef points at the Redis URL (redis:// or rediss://, with
	// credentials and database), which the pods get as TETRA_INDEX. With
	// Sentinel the pods get TETRA_INDEX=sentinel and the addresses, and the
	// URL (as TETRA_INDEX_SENTINEL_MASTER_URL) supplies the master's
	// credentials, database and TLS to the pods and to the operator's
	// probe; its host is not used to connect. The Sentinels are reached
	// without credentials.
	SecretRef URLSecretRef `json:"secretRef"`
	// Sentinel, when set, finds the master through Redis Sentinel.
	// +optional
	Sentinel *RedisSentinelSpec `json:"sentinel,omitempty"`
	// KeyPrefix prefixes every Redis key of this Messenger's pods (the
	// workload's --index-prefix). Default "tetra:<namespace>/<name>:",
	// which no other Messenger can have, so several Messengers (or
	// installs) can share one Redis database. Letters, digits and
	// . _ : / - only, ending with ':', 2 to 200 bytes: no spaces, glob
	// characters or NUL bytes, so `redis-cli --scan --pattern
	// '<prefix>*'` selects exactly this Messenger's keys. Changing it
	// replaces the pods (Recreate): pods of two prefixes may not share one
	// database, and the new pods start on a fresh index; the
	// old prefix's keys are left for you to delete.
	// +kubebuilder:validation:MinLength=2
	// +kubebuilder:validation:MaxLength=200
	// +kubebuilder:validation:XValidation:rule="self.matches('^[A-Za-z0-9._:/-]+:$')",message="spec.redis.keyPrefix may contain only letters, digits and . _ : / - and must end with ':' (no spaces, glob characters or NUL bytes: redis-cli --scan --pattern '<prefix>*' must select exactly its keys)"
	// +optional
	KeyPrefix string `json:"keyPrefix,omitempty"`
}

// KafkaSpec is the outbox topic, used with backend kafka.
type KafkaSpec struct {
	// Brokers, host:port.
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	Brokers []KafkaBroker `json:"brokers"`
	// Topic of the outbox, partitioned by recipient.
	// +kubebuilder:validation:Pattern=`^[a-zA-Z0-9._-]{1,249}$`
	Topic string `json:"topic"`
}

// KafkaBroker is a host:port.
// +kubebuilder:validation:Pattern=`^[^:,/\s]+:[0-9]{1,5}$`
// +kubebuilder:validation:MaxLength=262
type KafkaBroker string

// JWTSpec is the secret that signs client and admin tokens.
type JWTSpec struct {
	// SecretRef points at the HS256 secret (at least 16 bytes). The
	// operator mints short-lived admin tokens with it to call the
	// workload's /admin/rebuild.
	SecretRef JWTSecretRef `json:"secretRef"`
}

// RetentionSpec bounds how long data is kept. History must outlive the
// outbox backstop (the paper's invariant I4): a message still in the outbox
// must still be in history.
// +kubebuilder:validation:XValidation:rule="!has(self.history) || !has(self.outboxBackstop) || duration(self.history) > duration(self.outboxBackstop)",message="spec.retention.history must exceed spec.retention.outboxBackstop (invariant I4: history outlives every outbox row)",fieldPath=".history"
type RetentionSpec struct {
	// History older than this is purged. Default 2160h (90 days).
	// +kubebuilder:default="2160h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1h') && duration(self) <= duration('876000h')",message="spec.retention.history must be between 1h and 876000h"
	// +optional
	History *metav1.Duration `json:"history,omitempty"`
	// OutboxBackstop: outbox rows older than this are deleted even when a
	// recipient still pins them. Default 26h.
	// +kubebuilder:default="26h"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1m') && duration(self) <= duration('8760h')",message="spec.retention.outboxBackstop must be between 1m and 8760h"
	// +optional
	OutboxBackstop *metav1.Duration `json:"outboxBackstop,omitempty"`
}

// DeliverySpec holds the delivery thresholds. All of them are hot: a change
// reaches running pods through the tuning ConfigMap without a restart.
type DeliverySpec struct {
	// Lease: a sent, unacknowledged message is re-delivered after this
	// long. Default 10s.
	// +kubebuilder:default="10s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('100ms') && duration(self) <= duration('1h')",message="spec.delivery.lease must be between 100ms and 1h"
	// +optional
	Lease *metav1.Duration `json:"lease,omitempty"`
	// MaxDeliveryAttempts: a message sent this many times without an ack
	// withdraws its recipient from live delivery. Default 3.
	// +kubebuilder:default=3
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100
	// +optional
	MaxDeliveryAttempts int32 `json:"maxDeliveryAttempts,omitempty"`
	// MaxPending is the push window: the most message frames the server
	// keeps unacknowledged on one connection; more wait in the outbox and
	// are sent as acknowledgements free the window. Default 20.
	// +kubebuilder:default=20
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	// +optional
	MaxPending int32 `json:"maxPending,omitempty"`
	// PendingTimeout: a connection whose full window made no progress (no
	// acknowledgement) for this long while messages wait is withdrawn
	// (close 4003). Default 5s.
	// +kubebuilder:default="5s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('100ms') && duration(self) <= duration('1h')",message="spec.delivery.pendingTimeout must be between 100ms and 1h"
	// +optional
	PendingTimeout *metav1.Duration `json:"pendingTimeout,omitempty"`
	// ReconnectGrace: the reapers spare connections younger than this.
	// Default 0s.
	// +kubebuilder:default="0s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('1h')",message="spec.delivery.reconnectGrace must be between 0s and 1h"
	// +optional
	ReconnectGrace *metav1.Duration `json:"reconnectGrace,omitempty"`
	// PingInterval is the server's ping cadence. Default 15s.
	// +kubebuilder:default="15s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('100ms') && duration(self) <= duration('10m')",message="spec.delivery.pingInterval must be between 100ms and 10m"
	// +optional
	PingInterval *metav1.Duration `json:"pingInterval,omitempty"`
	// IdleTimeout: a connection silent for pingInterval+idleTimeout is
	// closed as idle (the workload's ping timeout). Default 10s.
	// +kubebuilder:default="10s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('100ms') && duration(self) <= duration('10m')",message="spec.delivery.idleTimeout must be between 100ms and 10m"
	// +optional
	IdleTimeout *metav1.Duration `json:"idleTimeout,omitempty"`
	// GCGrace: an outbox row younger than this is never deleted. Default 5s.
	// +kubebuilder:default="5s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="duration(self) <= duration('1h')",message="spec.delivery.gcGrace must be between 0s and 1h"
	// +optional
	GCGrace *metav1.Duration `json:"gcGrace,omitempty"`
	// GCInterval is the waterline GC's cadence. Default 1s.
	// +kubebuilder:default="1s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('10ms') && duration(self) <= duration('1h')",message="spec.delivery.gcInterval must be between 10ms and 1h"
	// +optional
	GCInterval *metav1.Duration `json:"gcInterval,omitempty"`
	// PollInterval is the outbox poller's cadence. Default 100ms.
	// +kubebuilder:default="100ms"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1ms') && duration(self) <= duration('1m')",message="spec.delivery.pollInterval must be between 1ms and 1m"
	// +optional
	PollInterval *metav1.Duration `json:"pollInterval,omitempty"`
	// PollBatch is the most rows the poller reads per scan. Default 6000.
	// +kubebuilder:default=6000
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	// +optional
	PollBatch int32 `json:"pollBatch,omitempty"`
}

// LimitsSpec holds the per-pod and per-connection limits.
type LimitsSpec struct {
	// InboundQueue is the inbound queue's capacity; beyond it sends are
	// shed as overloaded. Cold: a change rolls the pods. Default 8000.
	// +kubebuilder:default=8000
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	// +optional
	InboundQueue int32 `json:"inboundQueue,omitempty"`
	// MaxBodyBytes is the largest message body, in bytes. Default 4096.
	// +kubebuilder:default=4096
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=60000
	// +optional
	MaxBodyBytes int32 `json:"maxBodyBytes,omitempty"`
	// MaxInFlightSends is the per-connection credit of unanswered sends.
	// Default 64.
	// +kubebuilder:default=64
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	// +optional
	MaxInFlightSends int32 `json:"maxInFlightSends,omitempty"`
	// SendsPerSecond is the per-connection send rate. Default 50.
	// +kubebuilder:default=50
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	// +optional
	SendsPerSecond int32 `json:"sendsPerSecond,omitempty"`
	// FanoutPerSecond is each user's budget of outbox rows per second (a
	// send costs one per member of its chat); a send over it is answered
	// rate_limited. Default 2000.
	// +kubebuilder:default=2000
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000000
	// +optional
	FanoutPerSecond int32 `json:"fanoutPerSecond,omitempty"`
	// ChatCreatesPerMinute is each user's budget of chats created per
	// minute on one pod (POST /api/chats; one minute's worth at once); a
	// creation over it is answered 429 rate_limited. Default 600.
	// +kubebuilder:default=600
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	// +optional
	ChatCreatesPerMinute int32 `json:"chatCreatesPerMinute,omitempty"`
}

// NudgeSpec is the offline nudge: a webhook the workload POSTs, signed
// and batched, the recipients a committed message could not reach live
// (no connection, or withdrawn), so the application can send a mobile
// push (docs/nudge.md). Cold: a change rolls the pods.
type NudgeSpec struct {
	// URL of the webhook: an absolute http:// or https:// URL with a host
	// and no user info.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	// +kubebuilder:validation:XValidation:rule="isURL(self) && (url(self).getScheme() == 'http' || url(self).getScheme() == 'https') && url(self).getHostname() != ''",message="spec.nudge.url must be an absolute http:// or https:// URL with a host"
	URL string `json:"url"`
	// SecretRef points at the HMAC-SHA256 secret that signs every request
	// (at least 16 bytes); it reaches the pod as an environment variable
	// from the Secret, never as an argument.
	SecretRef JWTSecretRef `json:"secretRef"`
	// BatchSize is the most nudges per request. Default 100.
	// +kubebuilder:default=100
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10000
	// +optional
	BatchSize int32 `json:"batchSize,omitempty"`
	// MaxDelay is the longest a nudge waits for its batch to fill.
	// Default 1s.
	// +kubebuilder:default="1s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1ms') && duration(self) <= duration('1m')",message="spec.nudge.maxDelay must be between 1ms and 1m"
	// +optional
	MaxDelay *metav1.Duration `json:"maxDelay,omitempty"`
	// QueueSize bounds the nudges waiting to be sent; when it is full the
	// oldest is dropped (tetra_nudge_dropped_total). Default 10000.
	// +kubebuilder:default=10000
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	// +optional
	QueueSize int32 `json:"queueSize,omitempty"`
	// Timeout bounds one request. Default 5s.
	// +kubebuilder:default="5s"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+$`
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('100ms') && duration(self) <= duration('5m')",message="spec.nudge.timeout must be between 100ms and 5m"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
}

// NetworkPolicySpec asks for a NetworkPolicy that admits, to the
// workload's pods, only the sources named here (every other ingress is
// dropped; egress is not restricted). The pods serve two ports: the client
// port "http" (8080: the HTTP API, WebSocket /ws, /healthz, /readyz and the
// admin endpoints) and the metrics port "metrics" (9090: /metrics only).
// The operator's own pods (label app.kubernetes.io/name=tetra-operator in
// the operator's namespace) are always admitted to the client port: they
// call /admin/rebuild after a Redis failover. The kubelet's probes are not
// subject to NetworkPolicy on common plugins. Each peer is a standard
// NetworkPolicyPeer: an ipBlock alone, or a podSelector and/or a
// namespaceSelector (both together: those pods of those namespaces).
// +kubebuilder:validation:XValidation:rule="has(self.clientsFrom) || has(self.metricsFrom) || (has(self.allowAllClients) && self.allowAllClients)",message="spec.networkPolicy must name clientsFrom, metricsFrom or allowAllClients: an empty policy would admit only the operator"
type NetworkPolicySpec struct {
	// AllowAllClients admits every source to the client port (the usual
	// choice behind an Ingress or a LoadBalancer: the clients are the
	// internet); clientsFrom must then be omitted. Default false.
	// +optional
	AllowAllClients bool `json:"allowAllClients,omitempty"`
	// ClientsFrom are the sources admitted to the client port "http"
	// (for example the namespace of the ingress controller). Omitted (and
	// allowAllClients false): only the operator reaches it.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(p, has(p.ipBlock) ? !has(p.podSelector) && !has(p.namespaceSelector) : has(p.podSelector) || has(p.namespaceSelector))",message="spec.networkPolicy.clientsFrom: each peer names either an ipBlock alone, or a podSelector and/or a namespaceSelector"
	// +kubebuilder:validation:XValidation:rule="self.all(p, !has(p.ipBlock) || isCIDR(p.ipBlock.cidr))",message="spec.networkPolicy.clientsFrom: ipBlock.cidr must be a CIDR such as 10.0.0.0/8"
	// +listType=atomic
	// +optional
	ClientsFrom []networkingv1.NetworkPolicyPeer `json:"clientsFrom,omitempty"`
	// MetricsFrom are the sources admitted to the metrics port "metrics"
	// (for example the monitoring namespace's Prometheus). Omitted: no
	// one scrapes the pods.
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:XValidation:rule="self.all(p, has(p.ipBlock) ? !has(p.podSelector) && !has(p.namespaceSelector) : has(p.podSelector) || has(p.namespaceSelector))",message="spec.networkPolicy.metricsFrom: each peer names either an ipBlock alone, or a podSelector and/or a namespaceSelector"
	// +kubebuilder:validation:XValidation:rule="self.all(p, !has(p.ipBlock) || isCIDR(p.ipBlock.cidr))",message="spec.networkPolicy.metricsFrom: ipBlock.cidr must be a CIDR such as 10.0.0.0/8"
	// +listType=atomic
	// +optional
	MetricsFrom []networkingv1.NetworkPolicyPeer `json:"metricsFrom,omitempty"`
}

// MessengerSpec declares one messenger deployment.
// +kubebuilder:validation:XValidation:rule="self.backend == 'kafka' ? has(self.kafka) : !has(self.kafka)",message="spec.kafka is required when spec.backend is kafka and must be omitted otherwise",fieldPath=".kafka"
// +kubebuilder:validation:XValidation:rule="!has(self.replicas) || self.replicas <= 1 || has(self.redis)",message="spec.replicas > 1 requires spec.redis: the embedded in-process index serves a single instance",fieldPath=".replicas"
// +kubebuilder:validation:XValidation:rule="!has(self.networkPolicy) || !has(self.networkPolicy.allowAllClients) || !self.networkPolicy.allowAllClients || !has(self.networkPolicy.clientsFrom)",message="spec.networkPolicy.clientsFrom must be omitted when spec.networkPolicy.allowAllClients is true",fieldPath=".networkPolicy.clientsFrom"
type MessengerSpec struct {
	// Backend is where the outbox lives: postgres or kafka. History is
	// always in PostgreSQL. Cold: a change rolls the pods.
	// +kubebuilder:default=postgres
	// +optional
	Backend Backend `json:"backend,omitempty"`

	// Image of the workload. Empty: the operator's default image.
	// +kubebuilder:validation:MaxLength=512
	// +optional
	Image string `json:"image,omitempty"`
	// ImagePullPolicy of the workload container.
	// +kubebuilder:validation:Enum=Always;IfNotPresent;Never
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`
	// Replicas of the workload. More than one requires spec.redis.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=100
	// +optional
	Replicas *int32 `json:"replicas,omitempty"`
	// Resources of the workload container. Empty (no requests and no
	// limits): requests of 500m CPU, 512Mi memory and 64Mi ephemeral
	// storage, limits of 1Gi memory and 1Gi ephemeral storage and none on
	// CPU, sized from measurements (docs/operator.md, "Production
	// defaults"); anything set is used as given, with no defaults mixed in.
	// +optional
	Resources corev1.ResourceRequirements `json:"resources,omitempty"`
	// NetworkPolicy, when set, renders a NetworkPolicy <name> that admits
	// only the named sources to the pods' ports. Omitted: none (all
	// ingress allowed, as without the operator).
	// +optional
	NetworkPolicy *NetworkPolicySpec `json:"networkPolicy,omitempty"`

	// PostgreSQL holds history (and the outbox with backend postgres).
	PostgreSQL PostgreSQLSpec `json:"postgresql"`
	// Redis holds the waterline index. Without it each pod keeps the
	// index in process, which allows a single replica only.
	// +optional
	Redis *RedisSpec `json:"redis,omitempty"`
	// Kafka is the outbox topic; required exactly when backend is kafka.
	// +optional
	Kafka *KafkaSpec `json:"kafka,omitempty"`
	// JWT is the token-signing secret.
	JWT JWTSpec `json:"jwt"`

	// Retention of history and the outbox backstop.
	// +kubebuilder:default={}
	// +optional
	Retention RetentionSpec `json:"retention,omitempty"`
	// Delivery thresholds (hot).
	// +kubebuilder:default={}
	// +optional
	Delivery DeliverySpec `json:"delivery,omitempty"`
	// Limits per pod and per connection.
	// +kubebuilder:default={}
	// +optional
	Limits LimitsSpec `json:"limits,omitempty"`
	// Nudge is the offline nudge webhook; omitted: off.
	// +optional
	Nudge *NudgeSpec `json:"nudge,omitempty"`
}

// Condition types of a Messenger.
const (
	// ConditionReady: every desired replica runs the current configuration
	// and is ready.
	ConditionReady = "Ready"
	// ConditionProgressing: a rollout is under way.
	ConditionProgressing = "Progressing"
	// ConditionDegraded: something needs a human (a missing Secret, an
	// unreachable or ambiguous Redis, an invalid tuning, a pod that cannot
	// pull its image or keeps crashing, a rollout past its deadline).
	ConditionDegraded = "Degraded"
)

// RedisIdentity is what the operator last accepted as the Redis master.
type RedisIdentity struct {
	// RunID changes when the Redis process restarts.
	RunID string `json:"runID"`
	// MasterReplID changes when a replica is promoted.
	MasterReplID string `json:"masterReplID"`
	// Address the identity was read from (informational; never compared).
	// +optional
	Address string `json:"address,omitempty"`
	// Epoch counts the failovers the operator has handled, starting at 0
	// for the first identity seen.
	Epoch int64 `json:"epoch"`
	// RestartEpoch is the epoch written into the pod template because a
	// failover could not be handled by the rebuild endpoint; 0 when none.
	// +optional
	RestartEpoch int64 `json:"restartEpoch,omitempty"`
	// Since is when this identity was accepted.
	// +optional
	Since *metav1.Time `json:"since,omitempty"`
}

// WatermarkRebuild records the last rebuild the operator asked for.
type WatermarkRebuild struct {
	// Time the rebuild was requested.
	Time metav1.Time `json:"time"`
	// Reason, for example RedisFailover.
	Reason string `json:"reason"`
	// Method is Endpoint (POST /admin/rebuild on every ready pod) or
	// Restart (the Redis epoch was written into the pod template).
	// +kubebuilder:validation:Enum=Endpoint;Restart
	Method string `json:"method"`
	// Epoch of the Redis identity that caused it.
	Epoch int64 `json:"epoch"`
	// Pods that acknowledged the rebuild (Endpoint only).
	// +optional
	Pods int32 `json:"pods,omitempty"`
}

// MessengerStatus is the observed state.
type MessengerStatus struct {
	// ObservedGeneration is the generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions: Ready, Progressing, Degraded.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// Replicas is the desired replica count rolled out.
	// +optional
	Replicas int32 `json:"replicas,omitempty"`
	// ReadyReplicas of the workload Deployment.
	// +optional
	ReadyReplicas int32 `json:"readyReplicas,omitempty"`
	// ConfigHash is the hash of the cold settings in the pod template.
	// +optional
	ConfigHash string `json:"configHash,omitempty"`
	// Image is the workload image of the pod template (spec.image or the
	// operator's default).
	// +optional
	Image string `json:"image,omitempty"`
	// KeyPrefix is the Redis key prefix the pod template gives the pods
	// (spec.redis.keyPrefix or its default); empty without Redis.
	// +optional
	KeyPrefix string `json:"keyPrefix,omitempty"`
	// TuningHash is the hash of the tuning ConfigMap's data, announced to
	// every running pod as the tetra.dev/tuning-hash annotation.
	// +optional
	TuningHash string `json:"tuningHash,omitempty"`
	// Redis is the Redis identity last accepted.
	// +optional
	Redis *RedisIdentity `json:"redis,omitempty"`
	// LastRebuild is the last watermark rebuild the operator requested.
	// +optional
	LastRebuild *WatermarkRebuild `json:"lastRebuild,omitempty"`
}

// Messenger is a tetra messenger deployment. Its name is that of its
// Deployment, Service and PDB and the value of its children's
// app.kubernetes.io/instance label, so it must be a DNS-1035 label of at
// most 63 characters (the tuning ConfigMap, <name>-tuning, then fits too).
// +kubebuilder:object:root=true
// +kubebuilder:validation:XValidation:rule="size(self.metadata.name) <= 63",message="metadata.name must be at most 63 characters: it names the Service and Deployment and is a label value"
// +kubebuilder:validation:XValidation:rule="self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')",message="metadata.name must be a DNS-1035 label (lower-case letters, digits and '-', starting with a letter): it names the Service"
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=msgr;msgrs,categories=tetra
// +kubebuilder:printcolumn:name="Backend",type=string,JSONPath=`.spec.backend`
// +kubebuilder:printcolumn:name="Replicas",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Status",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Degraded",type=string,JSONPath=`.status.conditions[?(@.type=="Degraded")].reason`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:printcolumn:name="Image",type=string,priority=1,JSONPath=`.status.image`
// +kubebuilder:printcolumn:name="Config",type=string,priority=1,JSONPath=`.status.configHash`
// +kubebuilder:printcolumn:name="Generation",type=integer,priority=1,JSONPath=`.metadata.generation`
// +kubebuilder:printcolumn:name="Observed",type=integer,priority=1,JSONPath=`.status.observedGeneration`
// +kubebuilder:printcolumn:name="Redis-Epoch",type=integer,priority=1,JSONPath=`.status.redis.epoch`
// +kubebuilder:printcolumn:name="Key-Prefix",type=string,priority=1,JSONPath=`.status.keyPrefix`
type Messenger struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   MessengerSpec   `json:"spec"`
	Status MessengerStatus `json:"status,omitempty"`
}

// MessengerList is a list of Messengers.
// +kubebuilder:object:root=true
type MessengerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Messenger `json:"items"`
}

func init() {
	SchemeBuilder.Register(&Messenger{}, &MessengerList{})
}
