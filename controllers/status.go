package controllers

import (
	"fmt"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tetrav1 "github.com/tetra-messenger/tetra/api/v1alpha1"
)

// Condition reasons read off the workload's pods and Deployment. Like the
// Event reasons they are part of the interface (alerts match on them) and
// never change.
const (
	// ReasonImagePullFailed (Degraded): a pod's container cannot get its
	// image: ErrImagePull, ImagePullBackOff, ErrImageNeverPull,
	// InvalidImageName, ...
	ReasonImagePullFailed = "ImagePullFailed"
	// ReasonCrashLooping (Degraded): a container keeps exiting and the
	// kubelet backs off restarting it (CrashLoopBackOff); the message
	// quotes the last exit code and the end of its log.
	ReasonCrashLooping = "CrashLooping"
	// ReasonContainerConfigError (Degraded): the kubelet cannot create or
	// start the container (CreateContainerConfigError, for example a
	// missing Secret key; CreateContainerError; RunContainerError).
	ReasonContainerConfigError = "ContainerConfigError"
	// ReasonUnschedulable (Degraded): no node takes the pod.
	ReasonUnschedulable = "Unschedulable"
	// ReasonProgressDeadlineExceeded (Degraded, and Progressing=False):
	// the Deployment made no progress for its progressDeadlineSeconds.
	ReasonProgressDeadlineExceeded = "ProgressDeadlineExceeded"
	// ReasonReplicaFailure (Degraded): the ReplicaSet cannot create pods
	// (quota, admission).
	ReasonReplicaFailure = "ReplicaFailure"
	// ReasonWorkloadDegraded (Degraded): a pod serves (it stays ready)
	// but its /readyz body says {"status":"degraded","reason":...}, for
	// example live delivery while Redis is away; the message names the
	// pod and quotes the reason.
	ReasonWorkloadDegraded = "WorkloadDegraded"
)

// problem is one reason for Degraded=True.
type problem struct{ reason, message string }

// maxCause bounds the part of a message quoted from a pod or Deployment.
const maxCause = 300

// imagePullReasons are the kubelet's waiting reasons of a container whose
// image cannot be had.
var imagePullReasons = map[string]bool{
	"ErrImagePull": true, "ImagePullBackOff": true, "ErrImageNeverPull": true, "InvalidImageName": true,
	"RegistryUnavailable": true, "SignatureValidationFailed": true,
}

var configErrorReasons = map[string]bool{
	"CreateContainerConfigError": true, "CreateContainerError": true, "RunContainerError": true,
}

// workloadProblems reads what is wrong with the workload off its pods (all
// of the Messenger's pods, in any order) and its Deployment: one problem
// per pod at most (its first container in trouble), pods by name, then the
// Deployment's conditions. Terminating pods are skipped. Messages name the
// pod, the container and the cause.
func workloadProblems(pods []corev1.Pod, dep *appsv1.Deployment) []problem {
	sorted := make([]corev1.Pod, 0, len(pods))
	for _, p := range pods {
		if p.DeletionTimestamp == nil && p.Status.Phase != corev1.PodSucceeded {
			sorted = append(sorted, p)
		}
	}
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Name < sorted[j].Name })
	var out []problem
	for _, p := range sorted {
		if pr, ok := podProblem(&p); ok {
			out = append(out, pr)
		}
	}
	if dep != nil {
		for _, c := range dep.Status.Conditions {
			switch {
			case c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse && c.Reason == "ProgressDeadlineExceeded":
				out = append(out, problem{ReasonProgressDeadlineExceeded,
					fmt.Sprintf("Deployment %s: rollout stalled: %s", dep.Name, clip(c.Message))})
			case c.Type == appsv1.DeploymentReplicaFailure && c.Status == corev1.ConditionTrue:
				out = append(out, problem{ReasonReplicaFailure,
					fmt.Sprintf("Deployment %s cannot create pods: %s: %s", dep.Name, c.Reason, clip(c.Message))})
			}
		}
	}
	return out
}

func podProblem(p *corev1.Pod) (problem, bool) {
	statuses := append(append([]corev1.ContainerStatus{}, p.Status.InitContainerStatuses...), p.Status.ContainerStatuses...)
	for _, cs := range statuses {
		w := cs.State.Waiting
		if w == nil {
			continue
		}
		switch {
		case imagePullReasons[w.Reason]:
			return problem{ReasonImagePullFailed, fmt.Sprintf("pod %s: container %s cannot pull image %q: %s: %s",
				p.Name, cs.Name, cs.Image, w.Reason, clip(w.Message))}, true
		case w.Reason == "CrashLoopBackOff":
			last := "no exit seen yet"
			if t := cs.LastTerminationState.Terminated; t != nil {
				last = fmt.Sprintf("last exit code %d (%s)", t.ExitCode, t.Reason)
				if msg := lastLine(t.Message); msg != "" {
					last += ": " + clip(msg)
				}
			}
			return problem{ReasonCrashLooping, fmt.Sprintf("pod %s: container %s is crash-looping (restarts: %d; %s)",
				p.Name, cs.Name, cs.RestartCount, last)}, true
		case configErrorReasons[w.Reason]:
			return problem{ReasonContainerConfigError, fmt.Sprintf("pod %s: container %s cannot start: %s: %s",
				p.Name, cs.Name, w.Reason, clip(w.Message))}, true
		}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
			return problem{ReasonUnschedulable, fmt.Sprintf("pod %s cannot be scheduled: %s", p.Name, clip(c.Message))}, true
		}
	}
	return problem{}, false
}

// lastLine is the last non-empty line of s (a termination message is the
// end of the container's log with FallbackToLogsOnError; the workload logs
// JSON, whose "msg" and "err" say the most).
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			return l
		}
	}
	return ""
}

func clip(s string) string {
	s = strings.TrimSpace(s)
	if len(s) <= maxCause {
		return s
	}
	return s[:maxCause] + "..."
}

// joinProblems is the Degraded condition for problems (nil when none): the
// first problem's reason, every message.
func joinProblems(ps []problem) *metav1.Condition {
	if len(ps) == 0 {
		return nil
	}
	msgs := make([]string, len(ps))
	for i, p := range ps {
		msgs[i] = p.message
	}
	return &metav1.Condition{Status: metav1.ConditionTrue, Reason: ps[0].reason, Message: strings.Join(msgs, "; ")}
}

// rollout describes the Deployment against the rendered configuration.
type rollout struct {
	desired, updated, ready, available, total int32
	// current: the Deployment controller has seen the latest template,
	// which carries hash.
	current bool
	// deadline: ProgressDeadlineExceeded.
	deadline string
}

func readRollout(dep *appsv1.Deployment, desired int32, hash string) rollout {
	r := rollout{desired: desired, updated: dep.Status.UpdatedReplicas, ready: dep.Status.ReadyReplicas,
		available: dep.Status.AvailableReplicas, total: dep.Status.Replicas}
	r.current = dep.Generation != 0 && dep.Status.ObservedGeneration >= dep.Generation &&
		dep.Spec.Template.Annotations[tetrav1.ConfigHashAnnotation] == hash
	for _, c := range dep.Status.Conditions {
		if c.Type == appsv1.DeploymentProgressing && c.Status == corev1.ConditionFalse && c.Reason == "ProgressDeadlineExceeded" {
			r.deadline = clip(c.Message)
		}
	}
	return r
}

// complete: every desired replica runs the current template and is
// available, and no other pod is left.
func (r rollout) complete() bool {
	return r.current && r.updated == r.desired && r.total == r.desired && r.available == r.desired
}

// setRolloutConditions sets Progressing and Ready from r so that neither
// contradicts its message: Ready is True only when the rollout is complete
// and every desired replica is ready, and its message says which of the
// two is missing otherwise.
func setRolloutConditions(m *tetrav1.Messenger, r rollout, hash string) bool {
	switch {
	case r.complete():
		setCondition(m, tetrav1.ConditionProgressing, metav1.ConditionFalse, reasonRolloutComplete,
			fmt.Sprintf("%d replicas run config %s", r.desired, hash))
	case r.deadline != "":
		setCondition(m, tetrav1.ConditionProgressing, metav1.ConditionFalse, ReasonProgressDeadlineExceeded,
			fmt.Sprintf("rollout to config %s stalled (%d of %d replicas updated): %s", hash, r.updated, r.desired, r.deadline))
	default:
		setCondition(m, tetrav1.ConditionProgressing, metav1.ConditionTrue, reasonRollingOut,
			fmt.Sprintf("%d of %d replicas updated to config %s", r.updated, r.desired, hash))
	}
	switch {
	case r.complete() && r.ready >= r.desired:
		setCondition(m, tetrav1.ConditionReady, metav1.ConditionTrue, reasonAvailable,
			fmt.Sprintf("%d of %d replicas ready, all running config %s", r.ready, r.desired, hash))
		return true
	case r.ready < r.desired:
		setCondition(m, tetrav1.ConditionReady, metav1.ConditionFalse, reasonUnavailable,
			fmt.Sprintf("%d of %d replicas ready", r.ready, r.desired))
	default:
		setCondition(m, tetrav1.ConditionReady, metav1.ConditionFalse, reasonRollingOut,
			fmt.Sprintf("%d of %d replicas ready, but only %d of %d run config %s (%d pods in all)",
				r.ready, r.desired, r.updated, r.desired, hash, r.total))
	}
	return false
}

func sortedKeys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
