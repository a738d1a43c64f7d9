package controllers

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/predicate"

	tetrav1 "github.com/tetra-messenger/tetra/api/v1alpha1"
	"github.com/tetra-messenger/tetra/internal/operator/adminapi"
	"github.com/tetra-messenger/tetra/internal/operator/redisid"
	"github.com/tetra-messenger/tetra/internal/operator/render"
	"github.com/tetra-messenger/tetra/internal/redisinfo"
)

// FieldOwner is the server-side apply field manager of the operator.
const FieldOwner = "tetra-operator"

// Event reasons. They are part of the operator's interface: alerts and
// runbooks match on them, so they never change.
const (
	ReasonRolloutTriggered          = "RolloutTriggered"
	ReasonRedisFailoverDetected     = "RedisFailoverDetected"
	ReasonWatermarkRebuildRequested = "WatermarkRebuildRequested"
	ReasonSecretMissing             = "SecretMissing"
	// ReasonNameConflict: a child's name is taken by an object this
	// Messenger does not control; the operator leaves it alone.
	ReasonNameConflict = "NameConflict"
)

// Condition reasons.
const (
	reasonAvailable        = "Available"
	reasonUnavailable      = "Unavailable"
	reasonRollingOut       = "RollingOut"
	reasonRolloutComplete  = "RolloutComplete"
	reasonPaused           = "Paused"
	reasonAsExpected       = "AsExpected"
	reasonInvalidSpec      = "InvalidSpec"
	reasonRedisUnreachable = "RedisUnreachable"
	reasonRedisNoMaster    = "RedisNoMaster"
	reasonRedisSeveral     = "RedisSeveralMasters"
	reasonApplyFailed      = "ApplyFailed"
	reasonInvalidName      = "InvalidName"
)

// DefaultRebuildGrace: after a Redis outage the pods fail /readyz until
// they reach Redis again, and are ready one or two readiness periods (10 s
// each) after it is back; a minute covers that with a margin.
const DefaultRebuildGrace = 60 * time.Second

// conflictRequeue is how soon a Messenger whose child names are taken is
// looked at again: the foreign object carries no label the cache sees, so
// its removal wakes nothing.
const conflictRequeue = 30 * time.Second

// conflictRequeueQuiet is how soon a reconcile whose status patch lost an
// optimistic-lock race runs again (status writes wake nothing).
const conflictRequeueQuiet = 200 * time.Millisecond

// secretIndex is the field index of Messengers by referenced Secret name.
const secretIndex = ".spec.secretRefs"

// RedisProber reads the identity of a Redis master (redisid.Prober).
type RedisProber interface {
	Probe(ctx context.Context, t redisid.Target) (redisinfo.Identity, error)
}

// MessengerReconciler renders a Messenger's children and watches its Redis.
type MessengerReconciler struct {
	client.Client
	// APIReader reads Secrets and Pods directly from the API server: the
	// cache holds only Secrets' metadata and no Pods at all.
	APIReader client.Reader
	Scheme    *runtime.Scheme
	Recorder  events.EventRecorder

	// DefaultImage is the workload image for Messengers without spec.image.
	DefaultImage string
	// OperatorNamespace is where the operator's pods run; with
	// spec.networkPolicy they are admitted to the workload's client port
	// (render.Inputs.OperatorNamespace). Empty: out of cluster.
	OperatorNamespace string
	// RedisPollInterval is the mean interval between Redis identity
	// probes (jittered by ±20%). Zero means 10 s.
	RedisPollInterval time.Duration
	// Prober reads Redis identities; nil means redisid.Prober{}.
	Prober RedisProber
	// Rebuilder calls the workload's rebuild endpoint.
	Rebuilder adminapi.Rebuilder
	// Health reads the pods' /readyz bodies for the Degraded condition
	// (a pod that serves while saying "degraded").
	Health adminapi.HealthReader
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// RebuildGrace is how long after a failover the operator keeps asking
	// the pods to rebuild (every 2 s) while some pod is not ready or the
	// call fails, before it restarts them instead. Zero means
	// DefaultRebuildGrace.
	RebuildGrace time.Duration

	mu      sync.Mutex
	pending map[types.NamespacedName]redisinfo.Identity
}

// +kubebuilder:rbac:groups=tetra.dev,resources=messengers,verbs=get;list;watch
// +kubebuilder:rbac:groups=tetra.dev,resources=messengers/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=tetra.dev,resources=messengers/finalizers,verbs=update
// +kubebuilder:rbac:groups="",resources=configmaps;services,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=apps,resources=deployments,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=policy,resources=poddisruptionbudgets,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update;patch;delete
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch

// CacheOptions restricts the manager's cache to what the controller needs:
// only the ConfigMaps, Deployments, Services, PDBs, NetworkPolicies and Pods the operator
// labels as its own (the workload's pods carry the label from the pod
// template). Secrets are watched metadata-only.
func CacheOptions() cache.Options {
	sel := labels.SelectorFromSet(labels.Set{render.LabelManagedBy: render.ManagedBy})
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.ConfigMap{}:             {Label: sel},
		&appsv1.Deployment{}:            {Label: sel},
		&corev1.Service{}:               {Label: sel},
		&policyv1.PodDisruptionBudget{}: {Label: sel},
		&networkingv1.NetworkPolicy{}:   {Label: sel},
		&corev1.Pod{}:                   {Label: sel},
	}}
}

// SetupWithManager registers the controller, its field index and watches.
func (r *MessengerReconciler) SetupWithManager(ctx context.Context, mgr ctrl.Manager) error {
	if r.Prober == nil {
		r.Prober = redisid.Prober{}
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &tetrav1.Messenger{}, secretIndex, func(o client.Object) []string {
		return render.SecretNames(o.(*tetrav1.Messenger))
	}); err != nil {
		return fmt.Errorf("index messengers by secret: %w", err)
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&tetrav1.Messenger{}, builder.WithPredicates(predicate.Or(
			predicate.GenerationChangedPredicate{}, predicate.AnnotationChangedPredicate{}))).
		Owns(&corev1.ConfigMap{}).
		Owns(&appsv1.Deployment{}).
		Owns(&corev1.Service{}).
		Owns(&policyv1.PodDisruptionBudget{}).
		Owns(&networkingv1.NetworkPolicy{}).
		Watches(&corev1.Secret{}, handler.EnqueueRequestsFromMapFunc(r.messengersForSecret), builder.OnlyMetadata).
		// A pod that cannot pull its image or keeps crashing changes no
		// Deployment field: the pods themselves are watched, so Degraded
		// follows them at once.
		Watches(&corev1.Pod{}, handler.EnqueueRequestsFromMapFunc(messengerForPod)).
		Named("messenger").
		Complete(r)
}

// messengersForSecret maps a Secret to the Messengers that reference it.
func (r *MessengerReconciler) messengersForSecret(ctx context.Context, s client.Object) []ctrl.Request {
	var list tetrav1.MessengerList
	if err := r.List(ctx, &list, client.InNamespace(s.GetNamespace()), client.MatchingFields{secretIndex: s.GetName()}); err != nil {
		ctrl.LoggerFrom(ctx).Error(err, "list messengers for secret", "secret", s.GetName())
		return nil
	}
	reqs := make([]ctrl.Request, len(list.Items))
	for i, m := range list.Items {
		reqs[i] = ctrl.Request{NamespacedName: types.NamespacedName{Namespace: m.Namespace, Name: m.Name}}
	}
	return reqs
}

// messengerForPod maps a workload pod to its Messenger (the instance label
// is the Messenger's name).
func messengerForPod(_ context.Context, p client.Object) []ctrl.Request {
	name := p.GetLabels()[render.LabelInstance]
	if name == "" || p.GetLabels()[render.LabelManagedBy] != render.ManagedBy {
		return nil
	}
	return []ctrl.Request{{NamespacedName: types.NamespacedName{Namespace: p.GetNamespace(), Name: name}}}
}

func (r *MessengerReconciler) now() time.Time {
	if r.Now != nil {
		return r.Now()
	}
	return time.Now()
}

func (r *MessengerReconciler) pollAfter() time.Duration {
	d := r.RedisPollInterval
	if d <= 0 {
		d = 10 * time.Second
	}
	return time.Duration(float64(d) * (0.8 + 0.4*rand.Float64()))
}

// Reconcile brings one Messenger's children to the rendered state and, when
// it has Redis, probes the Redis identity.
func (r *MessengerReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	res, outcome, err := r.reconcile(ctx, req)
	if err != nil {
		if apierrors.IsConflict(err) {
			// A stale cached Messenger lost the optimistic lock of a
			// status patch: not a failure, just run again on fresh data.
			ReconcilesTotal.WithLabelValues(OutcomeConflict).Inc()
			ctrl.LoggerFrom(ctx).V(1).Info("status patch conflict; requeueing", "error", err.Error())
			return ctrl.Result{RequeueAfter: conflictRequeueQuiet}, nil
		}
		// Never RequeueAfter and an error together.
		ReconcilesTotal.WithLabelValues(OutcomeError).Inc()
		return ctrl.Result{}, err
	}
	ReconcilesTotal.WithLabelValues(outcome).Inc()
	return res, nil
}

// pass is one reconcile of one Messenger: what its phases read and write.
type pass struct {
	m, orig  *tetrav1.Messenger
	gen      int64
	secrets  map[string]*corev1.Secret
	versions map[string]string // Secret name -> resourceVersion, for the config hash
	degraded *metav1.Condition // the Redis probe's verdict, until the status phase
	result   ctrl.Result       // the requeue the pass ends with
	objs     render.Objects
	live     appsv1.Deployment // the Deployment before this pass applied anything
	liveErr  error             // nil, or NotFound
}

// stop is how a phase ends a pass early: the outcome and the error to
// return (the status was patched already, or the error says why not).
type stop struct {
	res     ctrl.Result
	outcome string
	err     error
}

// reconcile does the work of Reconcile and says how it ended (one of the
// Outcome constants; an error overrides it). It runs the phases in order;
// each may end the pass (a paused Messenger, a missing Secret, a name
// conflict, a failed apply):
//
//	load         the Messenger, the pause annotation, its name
//	secrets      the referenced Secrets: present, with their keys and versions
//	redis        the Redis identity and failover handling (with spec.redis)
//	render       the children, and no foreign object under their names
//	apply        server-side apply of the children
//	status       readiness from the Deployment and its pods, Degraded reasons
func (r *MessengerReconciler) reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, string, error) {
	p, st := r.load(ctx, req)
	for _, phase := range []func(context.Context, *pass) *stop{r.observeSecrets, r.observeRedisPhase, r.renderChildren, r.applyChildren} {
		if st != nil {
			break
		}
		st = phase(ctx, p)
	}
	if st != nil {
		return st.res, st.outcome, st.err
	}
	return r.computeStatus(ctx, p)
}

// refuse ends a pass with the Messenger not ready for reason: Degraded
// True and Ready False with msg, the generation observed, the status
// patched. It returns the outcome with the patch's error.
func (r *MessengerReconciler) refuse(ctx context.Context, p *pass, res ctrl.Result, outcome, reason, msg string) *stop {
	setCondition(p.m, tetrav1.ConditionDegraded, metav1.ConditionTrue, reason, msg)
	setCondition(p.m, tetrav1.ConditionReady, metav1.ConditionFalse, reason, msg)
	p.m.Status.ObservedGeneration = p.gen
	return &stop{res, outcome, r.patchStatus(ctx, p.orig, p.m)}
}

// load reads the Messenger; a deleted, paused or misnamed one ends the pass.
func (r *MessengerReconciler) load(ctx context.Context, req ctrl.Request) (*pass, *stop) {
	var m tetrav1.Messenger
	if err := r.Get(ctx, req.NamespacedName, &m); err != nil {
		if apierrors.IsNotFound(err) {
			r.setPending(req.NamespacedName, nil)
			return nil, &stop{outcome: OutcomeDeleted}
		}
		return nil, &stop{outcome: OutcomeError, err: err}
	}
	p := &pass{m: &m, orig: m.DeepCopy(), gen: m.Generation,
		degraded: &metav1.Condition{Status: metav1.ConditionFalse, Reason: reasonAsExpected, Message: "no problem seen"}}
	if m.Annotations[tetrav1.PausedAnnotation] == "true" {
		r.setPending(req.NamespacedName, nil)
		setCondition(&m, tetrav1.ConditionProgressing, metav1.ConditionFalse, reasonPaused,
			"reconciliation paused by the "+tetrav1.PausedAnnotation+" annotation")
		return p, &stop{outcome: OutcomePaused, err: r.patchStatus(ctx, p.orig, &m)}
	}
	// The schema refuses such names; this guards CRDs installed before it.
	if msg := invalidName(m.Name); msg != "" {
		return p, r.refuse(ctx, p, ctrl.Result{}, OutcomeRefused, reasonInvalidName, msg)
	}
	return p, nil
}

// observeSecrets reads the referenced Secrets: existence, keys and
// versions. A missing one ends the pass (the Secret watch wakes it).
func (r *MessengerReconciler) observeSecrets(ctx context.Context, p *pass) *stop {
	secrets, missing, err := r.readSecrets(ctx, p.m)
	if err != nil {
		return &stop{outcome: OutcomeError, err: err}
	}
	if len(missing) > 0 {
		msg := "waiting for " + joinMissing(missing)
		r.Recorder.Eventf(p.m, nil, corev1.EventTypeWarning, ReasonSecretMissing, "Reconcile", msg)
		return r.refuse(ctx, p, ctrl.Result{}, OutcomeDegraded, ReasonSecretMissing, msg)
	}
	p.secrets = secrets
	p.versions = make(map[string]string, len(secrets))
	for name, s := range secrets {
		p.versions[name] = s.ResourceVersion
	}
	return nil
}

// observeRedisPhase probes the Redis identity before rendering (a failover
// handled by a restart changes the pod template) and persists a new one.
func (r *MessengerReconciler) observeRedisPhase(ctx context.Context, p *pass) *stop {
	rs := p.m.Spec.Redis
	if rs == nil {
		return nil
	}
	p.result.RequeueAfter = r.pollAfter()
	url := string(p.secrets[rs.SecretRef.Name].Data[render.SecretKey(rs.SecretRef.Key, render.DefaultURLKey)])
	jwt := p.secrets[p.m.Spec.JWT.SecretRef.Name].Data[render.SecretKey(p.m.Spec.JWT.SecretRef.Key, render.DefaultJWTKey)]
	cond, announce, changed := r.observeRedis(ctx, p.m, url)
	if cond != nil {
		p.degraded = cond
	}
	if changed {
		// Claim the new identity (and epoch) before acting on it: the
		// status patch carries an optimistic lock, so a pass that read
		// a stale cached Messenger (one that has not seen this
		// operator's last patch yet) loses here and announces and
		// rebuilds nothing; the failover is handled once.
		if err := r.patchStatus(ctx, p.orig, p.m); err != nil {
			return &stop{outcome: OutcomeError, err: err}
		}
		p.orig = p.m.DeepCopy()
		if announce != nil {
			announce()
		}
	}
	return r.rebuildPhase(ctx, p, jwt)
}

// rebuildPhase asks the pods to rebuild their index for an epoch the
// status owes a rebuild (status.redis.epoch above lastRebuild's and above
// the restart epoch). Every pod must be ready to be asked; until they are
// (after a Redis outage they come back a probe period or two after
// Redis), it waits, looking again every rebuildRetry, for up to
// RebuildGrace from the failover; only then, or when the call still fails
// by then, does it restart the pods with the epoch in their template.
func (r *MessengerReconciler) rebuildPhase(ctx context.Context, p *pass, jwt []byte) *stop {
	red := p.m.Status.Redis
	if red == nil || red.Epoch == 0 || red.RestartEpoch >= red.Epoch ||
		(p.m.Status.LastRebuild != nil && p.m.Status.LastRebuild.Epoch >= red.Epoch) {
		return nil
	}
	// The cache may not have this operator's last status patch yet: ask
	// the API server, so a rebuild is never requested twice for one epoch.
	var fresh tetrav1.Messenger
	if err := r.APIReader.Get(ctx, client.ObjectKeyFromObject(p.m), &fresh); err != nil {
		return &stop{outcome: OutcomeError, err: err}
	}
	if fresh.ResourceVersion != p.m.ResourceVersion {
		return &stop{res: ctrl.Result{RequeueAfter: conflictRequeueQuiet}, outcome: OutcomeConflict}
	}
	epoch := red.Epoch
	now := metav1.NewTime(r.now().Truncate(time.Second))
	acked, err := r.requestRebuild(ctx, p.m, jwt)
	if err == nil {
		p.m.Status.LastRebuild = &tetrav1.WatermarkRebuild{Time: now, Reason: "RedisFailover", Method: "Endpoint", Epoch: epoch, Pods: int32(acked)}
		if err := r.patchStatus(ctx, p.orig, p.m); err != nil {
			return &stop{outcome: OutcomeError, err: err}
		}
		p.orig = p.m.DeepCopy()
		r.Recorder.Eventf(p.m, nil, corev1.EventTypeNormal, ReasonWatermarkRebuildRequested, "Rebuild",
			"%d pods rebuilt their waterline index after the Redis failover (epoch %d)", acked, epoch)
		RebuildsTotal.WithLabelValues(RebuildEndpoint).Inc()
		return nil
	}
	since := now.Time
	if red.Since != nil {
		since = red.Since.Time
	}
	if left := since.Add(r.rebuildGrace()).Sub(r.now()); left > 0 {
		ctrl.LoggerFrom(ctx).Info("rebuild endpoint not usable yet; asking again", "epoch", epoch, "reason", err.Error(), "restartIn", left.Round(time.Second).String())
		if p.result.RequeueAfter == 0 || p.result.RequeueAfter > rebuildRetry {
			p.result.RequeueAfter = rebuildRetry
		}
		return nil
	}
	red.RestartEpoch = epoch
	p.m.Status.LastRebuild = &tetrav1.WatermarkRebuild{Time: now, Reason: "RedisFailover", Method: "Restart", Epoch: epoch}
	// Persist the restart epoch before the Deployment is patched with it,
	// so a failed patch is retried with the same epoch.
	if err := r.patchStatus(ctx, p.orig, p.m); err != nil {
		return &stop{outcome: OutcomeError, err: err}
	}
	p.orig = p.m.DeepCopy()
	r.Recorder.Eventf(p.m, nil, corev1.EventTypeNormal, ReasonRolloutTriggered, "Rollout",
		"rebuild endpoint not usable for %v (%v): restarting the workload with Redis epoch %d", r.rebuildGrace(), err, epoch)
	RebuildsTotal.WithLabelValues(RebuildRestart).Inc()
	return nil
}

// rebuildRetry is how often a rebuild the pods cannot take yet is asked
// again during RebuildGrace.
const rebuildRetry = 2 * time.Second

func (r *MessengerReconciler) rebuildGrace() time.Duration {
	if r.RebuildGrace <= 0 {
		return DefaultRebuildGrace
	}
	return r.RebuildGrace
}

// renderChildren renders the children and refuses to touch names taken by
// objects this Messenger does not control (a forced apply would take them
// over).
func (r *MessengerReconciler) renderChildren(ctx context.Context, p *pass) *stop {
	var restartEpoch int64
	if p.m.Status.Redis != nil {
		restartEpoch = p.m.Status.Redis.RestartEpoch
	}
	in := render.Inputs{DefaultImage: r.DefaultImage, SecretVersions: p.versions, RestartEpoch: restartEpoch,
		OperatorNamespace: r.OperatorNamespace}
	objs, err := render.Render(p.m, in)
	if err != nil {
		// The schema refuses bad specs; this is the belt to its braces.
		return r.refuse(ctx, p, p.result, OutcomeRefused, reasonInvalidSpec, err.Error())
	}
	children := []client.Object{objs.ConfigMap, objs.Service, objs.Deployment}
	if objs.PDB != nil {
		children = append(children, objs.PDB)
	}
	if objs.NetworkPolicy != nil {
		children = append(children, objs.NetworkPolicy)
	}
	var conflicts []string
	for _, o := range children {
		foreign, err := r.foreign(ctx, p.m, o)
		if err != nil {
			return &stop{outcome: OutcomeError, err: err}
		}
		if foreign != "" {
			conflicts = append(conflicts, foreign)
		}
	}
	if len(conflicts) > 0 {
		msg := joinMissing(conflicts) + " already exist and are not controlled by this Messenger: rename or delete them; the operator leaves them untouched"
		r.Recorder.Eventf(p.m, nil, corev1.EventTypeWarning, ReasonNameConflict, "Reconcile", msg)
		st := r.refuse(ctx, p, ctrl.Result{RequeueAfter: conflictRequeue}, OutcomeRefused, ReasonNameConflict, msg)
		if st.err != nil {
			st.res, st.outcome = ctrl.Result{}, OutcomeError
		}
		return st
	}
	p.liveErr = r.Get(ctx, client.ObjectKeyFromObject(objs.Deployment), &p.live)
	if p.liveErr != nil && !apierrors.IsNotFound(p.liveErr) {
		return &stop{outcome: OutcomeError, err: p.liveErr}
	}
	if p.liveErr == nil && (replaceForPrefix(&p.live, render.KeyPrefix(p.m)) || replaceForFleet(&p.live, objs.FleetHash)) {
		// Pods of another key prefix, token secret or Redis run (or still
		// terminate): replace them rather than roll, or the new pods
		// refuse to start beside them on the shared database (the
		// workload's fleet identity, issue 24).
		in.Recreate = true
		if objs, err = render.Render(p.m, in); err != nil {
			return &stop{res: p.result, outcome: OutcomeError, err: err}
		}
	}
	p.objs = objs
	return nil
}

// applyChildren applies the children (server-side apply) and announces a
// rollout; a failed apply is said in the status and retried with backoff.
func (r *MessengerReconciler) applyChildren(ctx context.Context, p *pass) *stop {
	objs := p.objs
	applyErr := func() error {
		for _, o := range []client.Object{objs.ConfigMap, objs.Service, objs.Deployment} {
			if err := r.apply(ctx, o); err != nil {
				return fmt.Errorf("apply %s %s: %w", o.GetObjectKind().GroupVersionKind().Kind, o.GetName(), err)
			}
		}
		if err := r.applyOptional(ctx, p.m, objs.PDB, &policyv1.PodDisruptionBudget{}, render.PDBName(p.m)); err != nil {
			return err
		}
		return r.applyOptional(ctx, p.m, objs.NetworkPolicy, &networkingv1.NetworkPolicy{}, render.NetworkPolicyName(p.m))
	}()
	if applyErr != nil {
		// Say so in the status, and still return the error for a retry
		// with backoff.
		st := r.refuse(ctx, p, ctrl.Result{}, OutcomeError, reasonApplyFailed, applyErr.Error())
		if st.err != nil && !apierrors.IsConflict(st.err) {
			return &stop{outcome: OutcomeError, err: errors.Join(applyErr, st.err)}
		}
		return &stop{outcome: OutcomeError, err: applyErr}
	}
	// A change of the config hash rolls the pods; say so. (A restart for a
	// Redis failover was announced in observeRedis, where it was decided.)
	if oldHash := p.live.Spec.Template.Annotations[tetrav1.ConfigHashAnnotation]; p.liveErr == nil && oldHash != objs.ConfigHash {
		r.Recorder.Eventf(p.m, nil, corev1.EventTypeNormal, ReasonRolloutTriggered, "Rollout",
			"cold settings changed (config hash %s -> %s): rolling the workload", oldHash, objs.ConfigHash)
	}
	return nil
}

// computeStatus fills the status from the Deployment as the cache sees it
// (its own updates trigger a new reconcile) and from its pods, announces
// the tuning to the pods, and patches the status.
func (r *MessengerReconciler) computeStatus(ctx context.Context, p *pass) (ctrl.Result, string, error) {
	m, objs := p.m, p.objs
	desired := render.Replicas(m)
	m.Status.Replicas = desired
	m.Status.ConfigHash = objs.ConfigHash
	m.Status.ObservedGeneration = p.gen
	var dep appsv1.Deployment
	if err := r.Get(ctx, client.ObjectKeyFromObject(objs.Deployment), &dep); err != nil && !apierrors.IsNotFound(err) {
		return ctrl.Result{}, OutcomeError, err
	}
	m.Status.ReadyReplicas = dep.Status.ReadyReplicas
	m.Status.Image = objs.Deployment.Spec.Template.Spec.Containers[0].Image
	m.Status.KeyPrefix = render.KeyPrefix(m)
	m.Status.TuningHash = objs.TuningHash
	outcome := OutcomeProgressing
	if setRolloutConditions(m, readRollout(&dep, desired, objs.ConfigHash), objs.ConfigHash) {
		outcome = OutcomeReady
	}

	// What the pods and the Deployment say is wrong, before the Redis
	// probe's verdict (a pod's failure is usually what a person must fix
	// first; both are in the message).
	var pods corev1.PodList
	if err := r.List(ctx, &pods, client.InNamespace(m.Namespace), client.MatchingLabels(render.SelectorLabels(m))); err != nil {
		return ctrl.Result{}, OutcomeError, fmt.Errorf("list pods: %w", err)
	}
	degraded := p.degraded
	problems := workloadProblems(pods.Items, &dep)
	// What the pods say of themselves: ready, but degraded. No event
	// announces it, so a Messenger with running pods is looked at again
	// every poll interval.
	sick := r.Health.Degraded(ctx, pods.Items)
	for _, name := range sortedKeys(sick) {
		problems = append(problems, problem{ReasonWorkloadDegraded, fmt.Sprintf("pod %s: degraded: %s", name, sick[name])})
	}
	if len(pods.Items) > 0 && (p.result.RequeueAfter == 0 || p.result.RequeueAfter > r.pollAfter()) {
		p.result.RequeueAfter = r.pollAfter()
	}
	if degraded.Status == metav1.ConditionTrue {
		problems = append(problems, problem{degraded.Reason, degraded.Message})
	}
	if c := joinProblems(problems); c != nil {
		degraded = c
	}
	setCondition(m, tetrav1.ConditionDegraded, degraded.Status, degraded.Reason, degraded.Message)
	if err := r.announceTuning(ctx, pods.Items, objs.TuningHash); err != nil {
		return ctrl.Result{}, OutcomeError, err
	}
	if degraded.Status == metav1.ConditionTrue {
		outcome = OutcomeDegraded
	}
	return p.result, outcome, r.patchStatus(ctx, p.orig, m)
}

// replaceForPrefix says whether the live Deployment's pods use (or, in a
// replacement still under way, may still use) another Redis key prefix
// than want, so that the next rollout must replace the pods instead of
// rolling them. A template without TETRA_INDEX_PREFIX ran with the
// workload's default, "tetra:" (operators before the field existed).
func replaceForPrefix(live *appsv1.Deployment, want string) bool {
	if want == "" || len(live.Spec.Template.Spec.Containers) == 0 {
		return false
	}
	have := "tetra:"
	for _, e := range live.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "TETRA_INDEX_PREFIX" {
			have = e.Value
		}
	}
	if have != want {
		return true
	}
	// Same prefix: keep Recreate until the replacement it started is
	// done.
	return replacing(live)
}

// replaceForFleet says whether the live Deployment's pods were rendered
// for another fleet hash (a rotated token secret, another Redis), or are
// still being replaced for one: then the pods are replaced, not rolled.
// A live Deployment without the annotation (rendered by an older operator)
// rolls as before.
func replaceForFleet(live *appsv1.Deployment, want string) bool {
	have, ok := live.Spec.Template.Annotations[tetrav1.FleetHashAnnotation]
	if !ok || want == "" {
		return false
	}
	return have != want || replacing(live)
}

// replacing says whether a Recreate the operator started is still under
// way. Recreate starts new pods only once every old one is gone, so the
// new pods all updated and available means no old pod is left (not even a
// terminating one, which would still hold its prefix or identity).
func replacing(live *appsv1.Deployment) bool {
	st := live.Status
	desired := int32(1)
	if live.Spec.Replicas != nil {
		desired = *live.Spec.Replicas
	}
	done := st.ObservedGeneration >= live.Generation && st.UpdatedReplicas == desired &&
		st.Replicas == desired && st.AvailableReplicas == desired
	return live.Spec.Strategy.Type == appsv1.RecreateDeploymentStrategyType && !done
}

// announceTuning writes hash as the tuning-hash annotation of every
// running pod that does not carry it yet. The write makes the kubelet sync
// the pod, which refreshes its mounted tuning ConfigMap at once; without
// it the kubelet does so only at its periodic sync (measured 49-74 s).
// Idempotent: a pod that carries the hash is not written.
func (r *MessengerReconciler) announceTuning(ctx context.Context, pods []corev1.Pod, hash string) error {
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || p.Annotations[tetrav1.TuningHashAnnotation] == hash {
			continue
		}
		patch := client.RawPatch(types.MergePatchType,
			[]byte(fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, tetrav1.TuningHashAnnotation, hash)))
		if err := r.Patch(ctx, p, patch); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("annotate pod %s with the tuning hash: %w", p.Name, err)
		}
	}
	return nil
}

// readSecrets reads every referenced Secret. missing lists the Secrets (or
// Secret keys) that do not exist.
func (r *MessengerReconciler) readSecrets(ctx context.Context, m *tetrav1.Messenger) (map[string]*corev1.Secret, []string, error) {
	type ref struct{ name, key string }
	refs := []ref{
		{m.Spec.PostgreSQL.SecretRef.Name, render.SecretKey(m.Spec.PostgreSQL.SecretRef.Key, render.DefaultURLKey)},
		{m.Spec.JWT.SecretRef.Name, render.SecretKey(m.Spec.JWT.SecretRef.Key, render.DefaultJWTKey)},
	}
	if m.Spec.Redis != nil {
		refs = append(refs, ref{m.Spec.Redis.SecretRef.Name, render.SecretKey(m.Spec.Redis.SecretRef.Key, render.DefaultURLKey)})
	}
	if m.Spec.Nudge != nil {
		refs = append(refs, ref{m.Spec.Nudge.SecretRef.Name, render.SecretKey(m.Spec.Nudge.SecretRef.Key, render.DefaultJWTKey)})
	}
	secrets := map[string]*corev1.Secret{}
	var missing []string
	for _, rf := range refs {
		s, seen := secrets[rf.name]
		if !seen {
			s = &corev1.Secret{}
			err := r.APIReader.Get(ctx, types.NamespacedName{Namespace: m.Namespace, Name: rf.name}, s)
			switch {
			case apierrors.IsNotFound(err):
				s = nil
			case err != nil:
				return nil, nil, fmt.Errorf("read secret %s: %w", rf.name, err)
			}
			secrets[rf.name] = s
		}
		switch {
		case s == nil:
			missing = append(missing, fmt.Sprintf("Secret %q", rf.name))
		case len(s.Data[rf.key]) == 0:
			missing = append(missing, fmt.Sprintf("key %q of Secret %q", rf.key, rf.name))
		}
	}
	return secrets, dedupe(missing), nil
}

func dedupe(in []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range in {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}

func joinMissing(missing []string) string { return strings.Join(missing, ", ") }

// observeRedis probes the Redis identity and handles a confirmed change. It
// returns a Degraded condition when the identity cannot be trusted, and
// whether the status changed in a way that must be persisted before the
// Deployment is rendered.
func (r *MessengerReconciler) observeRedis(ctx context.Context, m *tetrav1.Messenger, url string) (*metav1.Condition, func(), bool) {
	key := types.NamespacedName{Namespace: m.Namespace, Name: m.Name}
	rs := m.Spec.Redis
	t := redisid.Target{URL: url}
	if rs.Sentinel != nil {
		t.MasterName = rs.Sentinel.MasterName
		for _, a := range rs.Sentinel.Addresses {
			t.SentinelAddrs = append(t.SentinelAddrs, string(a))
		}
	}
	id, err := r.Prober.Probe(ctx, t)
	if err != nil {
		r.setPending(key, nil)
		reason := reasonRedisUnreachable
		switch {
		case errors.Is(err, redisid.ErrNoMaster):
			reason = reasonRedisNoMaster
		case errors.Is(err, redisid.ErrSeveralMasters):
			reason = reasonRedisSeveral
		}
		return &metav1.Condition{Status: metav1.ConditionTrue, Reason: reason,
			Message: err.Error() + "; no action taken until one master is seen"}, nil, false
	}
	now := metav1.NewTime(r.now().Truncate(time.Second))
	cur := m.Status.Redis
	if cur == nil || cur.RunID == "" {
		// The first identity: the pods primed against it themselves.
		m.Status.Redis = &tetrav1.RedisIdentity{RunID: id.RunID, MasterReplID: id.MasterReplID, Address: id.Addr, Since: &now}
		r.setPending(key, nil)
		return nil, nil, true
	}
	old := redisinfo.Identity{RunID: cur.RunID, MasterReplID: cur.MasterReplID, Addr: cur.Address}
	if id.Same(old) {
		r.setPending(key, nil)
		return nil, nil, false
	}
	// A different identity: act only when seen twice in a row.
	if prev, ok := r.getPending(key); !ok || !prev.Same(id) {
		r.setPending(key, &id)
		ctrl.LoggerFrom(ctx).Info("redis identity changed; waiting for a second observation", "identity", id.String())
		return nil, nil, false
	}
	r.setPending(key, nil)
	if id.Renewed(old) {
		// The same process gave itself a new replication ID because its
		// first replica attached: the same data, no failover.
		ctrl.LoggerFrom(ctx).Info("redis master renewed its replication ID (a first replica attached); not a failover", "identity", id.String())
		m.Status.Redis = &tetrav1.RedisIdentity{RunID: id.RunID, MasterReplID: id.MasterReplID, Address: id.Addr,
			Epoch: cur.Epoch, RestartEpoch: cur.RestartEpoch, Since: cur.Since}
		return nil, nil, true
	}
	kind := FailoverRestart
	if id.PromotedFrom(old) {
		kind = FailoverPromotion
	}
	epoch := cur.Epoch + 1
	m.Status.Redis = &tetrav1.RedisIdentity{RunID: id.RunID, MasterReplID: id.MasterReplID, Address: id.Addr,
		Epoch: epoch, RestartEpoch: cur.RestartEpoch, Since: &now}
	// Announced only once the new epoch is persisted (observeRedisPhase);
	// the rebuild follows in rebuildPhase.
	announce := func() {
		RedisFailoversTotal.WithLabelValues(kind).Inc()
		r.Recorder.Eventf(m, nil, corev1.EventTypeWarning, ReasonRedisFailoverDetected, "Failover",
			"Redis master changed (%s) from %s to %s: epoch %d", kind, old.String(), id.String(), epoch)
	}
	return nil, announce, true
}

// requestRebuild asks every pod of the Messenger to rebuild its index.
func (r *MessengerReconciler) requestRebuild(ctx context.Context, m *tetrav1.Messenger, jwt []byte) (int, error) {
	var pods corev1.PodList
	if err := r.APIReader.List(ctx, &pods, client.InNamespace(m.Namespace), client.MatchingLabels(render.SelectorLabels(m))); err != nil {
		return 0, fmt.Errorf("list pods: %w", err)
	}
	ready, err := adminapi.ReadyPods(pods.Items)
	if err != nil {
		return 0, err
	}
	return r.Rebuilder.Rebuild(ctx, ready, jwt)
}

func (r *MessengerReconciler) getPending(k types.NamespacedName) (redisinfo.Identity, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	id, ok := r.pending[k]
	return id, ok
}

func (r *MessengerReconciler) setPending(k types.NamespacedName, id *redisinfo.Identity) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if id == nil {
		delete(r.pending, k)
		return
	}
	if r.pending == nil {
		r.pending = map[types.NamespacedName]redisinfo.Identity{}
	}
	r.pending[k] = *id
}

// invalidName says why name cannot name a Messenger's children ("" when
// it can): it is their instance label (63 bytes at most) and the name of
// the Service (a DNS-1035 label).
func invalidName(name string) string {
	if errs := validation.IsDNS1035Label(name); len(errs) > 0 {
		return fmt.Sprintf("name %q cannot name the Service and label the children: %s", name, strings.Join(errs, "; "))
	}
	return ""
}

// foreign reads the live object of a rendered child and describes it when
// it exists and is not controlled by m ("" when absent or ours). The cache
// holds only objects labelled as the operator's, so a miss is confirmed by
// a direct read of the object's metadata.
func (r *MessengerReconciler) foreign(ctx context.Context, m *tetrav1.Messenger, obj client.Object) (string, error) {
	gvk := obj.GetObjectKind().GroupVersionKind()
	key := client.ObjectKeyFromObject(obj)
	var owner metav1.Object
	live, err := r.Client.Scheme().New(gvk)
	if err != nil {
		return "", fmt.Errorf("new %s: %w", gvk.Kind, err)
	}
	lo := live.(client.Object)
	err = r.Get(ctx, key, lo)
	switch {
	case err == nil:
		owner = lo
	case apierrors.IsNotFound(err):
		pm := &metav1.PartialObjectMetadata{}
		pm.SetGroupVersionKind(gvk)
		err = r.APIReader.Get(ctx, key, pm)
		if apierrors.IsNotFound(err) {
			return "", nil
		}
		if err != nil {
			return "", fmt.Errorf("read %s %s: %w", gvk.Kind, key.Name, err)
		}
		owner = pm
	default:
		return "", fmt.Errorf("read %s %s: %w", gvk.Kind, key.Name, err)
	}
	if metav1.IsControlledBy(owner, m) {
		return "", nil
	}
	return fmt.Sprintf("%s %q", gvk.Kind, key.Name), nil
}

// applyOptionalKind names the kind of an optional child.
func applyOptionalKind(obj client.Object) string {
	switch obj.(type) {
	case *policyv1.PodDisruptionBudget:
		return "PodDisruptionBudget"
	case *networkingv1.NetworkPolicy:
		return "NetworkPolicy"
	}
	return fmt.Sprintf("%T", obj)
}

// applyOptional applies want (a PDB or NetworkPolicy), or, when want is
// nil, deletes the object of that kind and name if this Messenger controls
// it. live is an empty object of the kind.
func (r *MessengerReconciler) applyOptional(ctx context.Context, m *tetrav1.Messenger, want, live client.Object, name string) error {
	kind := applyOptionalKind(live)
	if !isNil(want) {
		if err := r.apply(ctx, want); err != nil {
			return fmt.Errorf("apply %s %s: %w", kind, name, err)
		}
		return nil
	}
	err := r.Get(ctx, types.NamespacedName{Namespace: m.Namespace, Name: name}, live)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if !metav1.IsControlledBy(live, m) {
		return nil
	}
	uid := live.GetUID()
	if err := r.Delete(ctx, live, client.Preconditions{UID: &uid}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete %s %s: %w", kind, name, err)
	}
	return nil
}

// isNil tells a nil pointer inside an interface.
func isNil(o client.Object) bool {
	switch v := o.(type) {
	case nil:
		return true
	case *policyv1.PodDisruptionBudget:
		return v == nil
	case *networkingv1.NetworkPolicy:
		return v == nil
	}
	return false
}

// apply server-side applies obj with the operator's field owner. An apply
// that changes nothing writes nothing: the resourceVersion stays.
func (r *MessengerReconciler) apply(ctx context.Context, obj client.Object) error {
	u, err := toApplyUnstructured(obj)
	if err != nil {
		return err
	}
	return r.Client.Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(FieldOwner), client.ForceOwnership)
}

// patchStatus patches the status subresource when it differs from orig,
// with an optimistic lock.
func (r *MessengerReconciler) patchStatus(ctx context.Context, orig, m *tetrav1.Messenger) error {
	if equality.Semantic.DeepEqual(orig.Status, m.Status) {
		return nil
	}
	return r.Status().Patch(ctx, m, client.MergeFromWithOptions(orig, client.MergeFromWithOptimisticLock{}))
}

func setCondition(m *tetrav1.Messenger, typ string, status metav1.ConditionStatus, reason, msg string) {
	meta.SetStatusCondition(&m.Status.Conditions, metav1.Condition{
		Type: typ, Status: status, Reason: reason, Message: msg, ObservedGeneration: m.Generation,
	})
}
