package controllers_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tetrav1 "github.com/tetra-messenger/tetra/api/v1alpha1"
)

// TestNudgeRendered: spec.nudge reaches the workload as TETRA_NUDGE_*
// variables, the secret as a reference to its Secret (never a value or an
// argument), with the schema's defaults; the Secret is required, and
// removing spec.nudge removes the variables.
func TestNudgeRendered(t *testing.T) {
	needEnv(t)
	t.Parallel()
	ns := newNamespace(t)
	baseSecrets(t, ns)
	createSecret(t, ns, "push", map[string]string{"hmac": "0123456789abcdef0123"})
	create(t, messenger(ns, "chat", func(m *tetrav1.Messenger) {
		m.Spec.Nudge = &tetrav1.NudgeSpec{URL: "https://push.example.com/hooks/nudge", SecretRef: tetrav1.JWTSecretRef{Name: "push", Key: "hmac"},
			MaxDelay: &metav1.Duration{Duration: 250 * time.Millisecond}}
	}))
	m, d := waitSettled(t, ns, "chat")
	if n := m.Spec.Nudge; n.BatchSize != 100 || n.QueueSize != 10000 || n.Timeout == nil || n.Timeout.Duration != 5*time.Second {
		t.Errorf("schema defaults not applied: %+v", n)
	}
	c := d.Spec.Template.Spec.Containers[0]
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	want := map[string]string{"TETRA_NUDGE_URL": "https://push.example.com/hooks/nudge", "TETRA_NUDGE_BATCH_SIZE": "100",
		"TETRA_NUDGE_MAX_DELAY": "250ms", "TETRA_NUDGE_QUEUE": "10000", "TETRA_NUDGE_TIMEOUT": "5s"}
	for k, v := range want {
		if env[k].Value != v {
			t.Errorf("%s = %q, want %q", k, env[k].Value, v)
		}
	}
	sec := env["TETRA_NUDGE_SECRET"]
	if sec.Value != "" || sec.ValueFrom == nil || sec.ValueFrom.SecretKeyRef == nil || sec.ValueFrom.SecretKeyRef.Name != "push" || sec.ValueFrom.SecretKeyRef.Key != "hmac" {
		t.Errorf("TETRA_NUDGE_SECRET = %+v, want a reference to key hmac of Secret push", sec)
	}
	for _, a := range append(c.Args, c.Command...) {
		if strings.Contains(a, "0123456789abcdef") || strings.Contains(a, "nudge") {
			t.Errorf("argument %q: the nudge is configured through the environment only", a)
		}
	}
	hash := hashOf(d)

	// Off again: the variables go and the pods roll.
	update(t, ns, "chat", func(m *tetrav1.Messenger) { m.Spec.Nudge = nil })
	waitFor(t, wait, "the nudge variables removed", func() (bool, string) {
		d, _ := deployment(t, ns, "chat")
		for _, e := range d.Spec.Template.Spec.Containers[0].Env {
			if strings.HasPrefix(e.Name, "TETRA_NUDGE_") {
				return false, e.Name
			}
		}
		return hashOf(d) != hash, "config hash unchanged"
	})
}

// TestNudgeRefused: a nudge URL the schema lets through but the workload
// would refuse (user info in it) is refused by the controller with
// Degraded InvalidSpec naming spec.nudge.url, and nothing is rendered; a
// missing nudge Secret is SecretMissing.
func TestNudgeRefused(t *testing.T) {
	needEnv(t)
	t.Parallel()
	ns := newNamespace(t)
	baseSecrets(t, ns)
	createSecret(t, ns, "push", map[string]string{"secret": "0123456789abcdef0123"})
	create(t, messenger(ns, "chat", func(m *tetrav1.Messenger) {
		m.Spec.Nudge = &tetrav1.NudgeSpec{URL: "https://user:pass@push.example.com/hook", SecretRef: tetrav1.JWTSecretRef{Name: "push"}}
	}))
	waitFor(t, wait, "Degraded InvalidSpec naming spec.nudge.url", func() (bool, string) {
		c := meta.FindStatusCondition(msgr(t, ns, "chat").Status.Conditions, tetrav1.ConditionDegraded)
		return c != nil && c.Status == metav1.ConditionTrue && c.Reason == "InvalidSpec" && strings.Contains(c.Message, "spec.nudge.url") &&
			!strings.Contains(c.Message, "pass@"), fmt.Sprintf("%+v", c)
	})
	if _, ok := deployment(t, ns, "chat"); ok {
		t.Error("a Deployment rendered from a refused spec")
	}

	create(t, messenger(ns, "other", func(m *tetrav1.Messenger) {
		m.Spec.Nudge = &tetrav1.NudgeSpec{URL: "https://push.example.com/hook", SecretRef: tetrav1.JWTSecretRef{Name: "absent"}}
	}))
	waitFor(t, wait, "Degraded SecretMissing for the nudge Secret", func() (bool, string) {
		c := meta.FindStatusCondition(msgr(t, ns, "other").Status.Conditions, tetrav1.ConditionDegraded)
		return c != nil && c.Status == metav1.ConditionTrue && strings.Contains(c.Message, `Secret "absent"`), fmt.Sprintf("%+v", c)
	})
}
