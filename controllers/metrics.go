package controllers

import (
	"github.com/prometheus/client_golang/prometheus"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// MetricsOptions are the manager's metrics endpoint at addr ("0": off).
// secure serves HTTPS (a self-signed certificate made at start) behind
// controller-runtime's authentication and authorization filter
// (kubebuilder's default): every scrape's bearer token is checked with a
// TokenReview, and its right to get the non-resource URL /metrics with a
// SubjectAccessReview (config/rbac/metrics_auth_role.yaml lets the
// operator ask both; metrics_reader_role.yaml is the scraper's). Without
// secure, plain HTTP to whoever reaches addr: bind it to loopback.
func MetricsOptions(addr string, secure bool) metricsserver.Options {
	o := metricsserver.Options{BindAddress: addr, SecureServing: secure}
	if secure {
		o.FilterProvider = filters.WithAuthenticationAndAuthorization
	}
	return o
}

// Reconcile outcomes, the values of tetra_operator_reconciles_total's
// outcome label. Every call of Reconcile counts exactly once.
const (
	// OutcomeReady: children applied, Ready=True, not Degraded.
	OutcomeReady = "ready"
	// OutcomeProgressing: children applied, not Degraded, Ready=False
	// (a rollout under way or replicas not ready yet).
	OutcomeProgressing = "progressing"
	// OutcomeDegraded: Degraded=True on something the operator waits out
	// (SecretMissing, RedisUnreachable, RedisNoMaster,
	// RedisSeveralMasters, and what the pods and the Deployment say:
	// ImagePullFailed, CrashLooping, ContainerConfigError, Unschedulable,
	// ProgressDeadlineExceeded, ReplicaFailure); children are applied when
	// they can be.
	OutcomeDegraded = "degraded"
	// OutcomeRefused: the operator refuses to render the Messenger
	// (NameConflict, InvalidName, InvalidSpec) until a human acts.
	OutcomeRefused = "refused"
	// OutcomeError: the reconcile returned an error and is retried with
	// backoff (ApplyFailed, API errors).
	OutcomeError = "error"
	// OutcomePaused: the tetra.dev/paused annotation is "true".
	OutcomePaused = "paused"
	// OutcomeConflict: a status patch lost an optimistic-lock race; run
	// again shortly on fresh data (not a failure).
	OutcomeConflict = "conflict"
	// OutcomeDeleted: the Messenger no longer exists.
	OutcomeDeleted = "deleted"
)

// Outcomes lists every outcome label value.
var Outcomes = []string{OutcomeReady, OutcomeProgressing, OutcomeDegraded, OutcomeRefused,
	OutcomeError, OutcomePaused, OutcomeConflict, OutcomeDeleted}

// Failover kinds, the values of tetra_operator_redis_failovers_total's kind
// label: how the new master relates to the old one (redisinfo.Identity.PromotedFrom).
const (
	// FailoverRestart: a new master process with a history of its own
	// (a restart without persistence, or another server now answers at
	// the address).
	FailoverRestart = "restart"
	// FailoverPromotion: the new master followed the old one's history
	// until it was promoted: its master_replid2 is the old master_replid
	// (a replica promoted by Sentinel, another process), or it is the same
	// process with a new master_replid after REPLICAOF NO ONE.
	FailoverPromotion = "promotion"
)

// Rebuild methods, the values of tetra_operator_rebuilds_total's method
// label (status.lastRebuild.method in lower case).
const (
	// RebuildEndpoint: every ready pod answered POST /admin/rebuild.
	RebuildEndpoint = "endpoint"
	// RebuildRestart: the call was not usable; the pods are rolled with
	// the new Redis epoch in their template.
	RebuildRestart = "restart"
)

// The operator's own metrics, registered on controller-runtime's registry
// (served by the manager's metrics endpoint beside controller_runtime_*).
var (
	ReconcilesTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tetra_operator_reconciles_total",
		Help: "Messenger reconciles by outcome (ready, progressing, degraded, refused, error, paused, conflict, deleted).",
	}, []string{"outcome"})
	RedisFailoversTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tetra_operator_redis_failovers_total",
		Help: "Confirmed Redis identity changes the operator acted on, by kind (promotion: the new master followed the old one's history, as a replica promoted by Sentinel; restart: a new process with a history of its own).",
	}, []string{"kind"})
	RebuildsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "tetra_operator_rebuilds_total",
		Help: "Waterline index rebuilds the operator caused after a Redis failover, by method (endpoint: POST /admin/rebuild; restart: pods rolled).",
	}, []string{"method"})
)

func init() {
	ctrlmetrics.Registry.MustRegister(ReconcilesTotal, RedisFailoversTotal, RebuildsTotal)
	// Every series exists from the start, at 0, so rate() and absent()
	// behave before the first event.
	for _, o := range Outcomes {
		ReconcilesTotal.WithLabelValues(o)
	}
	for _, k := range []string{FailoverRestart, FailoverPromotion} {
		RedisFailoversTotal.WithLabelValues(k)
	}
	for _, m := range []string{RebuildEndpoint, RebuildRestart} {
		RebuildsTotal.WithLabelValues(m)
	}
}
