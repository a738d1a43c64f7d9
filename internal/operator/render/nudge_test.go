package render_test

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	tetrav1 "github.com/tetra-messenger/tetra/api/v1alpha1"
	"github.com/tetra-messenger/tetra/internal/operator/render"
)

func TestRenderNudge(t *testing.T) {
	m := base()
	if e := env(mustRender(t, m, inputs()).Deployment); len(e) == 0 {
		t.Fatal("no env")
	} else {
		for k := range e {
			if strings.HasPrefix(k, "TETRA_NUDGE_") {
				t.Errorf("%s without spec.nudge", k)
			}
		}
	}
	off := mustRender(t, m, inputs()).ConfigHash
	m.Spec.Nudge = &tetrav1.NudgeSpec{URL: "https://push.example.com/hook", SecretRef: tetrav1.JWTSecretRef{Name: "push"},
		BatchSize: 50, MaxDelay: &metav1.Duration{Duration: 200 * time.Millisecond}, QueueSize: 7, Timeout: &metav1.Duration{Duration: 2 * time.Second}}
	o := mustRender(t, m, inputs())
	e := env(o.Deployment)
	for k, v := range map[string]string{"TETRA_NUDGE_URL": "https://push.example.com/hook", "TETRA_NUDGE_BATCH_SIZE": "50",
		"TETRA_NUDGE_MAX_DELAY": "200ms", "TETRA_NUDGE_QUEUE": "7", "TETRA_NUDGE_TIMEOUT": "2s"} {
		if e[k].Value != v {
			t.Errorf("%s = %q, want %q", k, e[k].Value, v)
		}
	}
	if got := secretRef(t, e["TETRA_NUDGE_SECRET"]); got != "push/secret" {
		t.Errorf("TETRA_NUDGE_SECRET from %s, want push/secret (the default key)", got)
	}
	if o.ConfigHash == off {
		t.Error("turning the nudge on does not change the config hash (the pods would not roll)")
	}
	if names := render.SecretNames(m); !strings.Contains(strings.Join(names, ","), "push") {
		t.Errorf("SecretNames %v lack the nudge Secret (its rotation must roll, its absence degrade)", names)
	}
	for _, bad := range []string{"ftp://x/y", "https://u:p@x/y", "https:///y", "not a url"} {
		m.Spec.Nudge.URL = bad
		if _, err := render.Render(m, inputs()); err == nil || !strings.Contains(err.Error(), "spec.nudge.url") || strings.Contains(err.Error(), "u:p@") {
			t.Errorf("URL %q: %v, want a refusal naming spec.nudge.url without the password", bad, err)
		}
	}
}
