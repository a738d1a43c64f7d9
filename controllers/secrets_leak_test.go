package controllers_test

import (
	"encoding/json"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tetrav1 "github.com/tetra-messenger/tetra/api/v1alpha1"
)

// Secret values never appear in the Messenger's status, in events, or in
// the rendered children (which reference Secrets, never copy them), even
// when the Redis in the Secret is unreachable and its error is reported.
func TestSecretValuesNeverLeak(t *testing.T) {
	needEnv(t)
	t.Parallel()
	ns := newNamespace(t)
	const pgPW, redisPW = "PgS3cretValue", "RedisS3cretValue"
	createSecret(t, ns, "pg", map[string]string{"url": "postgres://tetra:" + pgPW + "@db/tetra"})
	createSecret(t, ns, "jwt", map[string]string{"secret": jwtSecret})
	createSecret(t, ns, "redis", map[string]string{"url": "redis://:" + redisPW + "@127.0.0.1:1/0"})
	create(t, messenger(ns, "chat", func(m *tetrav1.Messenger) {
		m.Spec.Redis = &tetrav1.RedisSpec{SecretRef: tetrav1.URLSecretRef{Name: "redis"}}
	}))
	// Wait until the unreachable Redis is reported.
	waitFor(t, wait, "a Degraded condition about Redis", func() (bool, string) {
		m := msgr(t, ns, "chat")
		for _, c := range m.Status.Conditions {
			if c.Type == "Degraded" && c.Status == "True" {
				return true, c.Message
			}
		}
		return false, ""
	})
	var dump []any
	dump = append(dump, msgr(t, ns, "chat"))
	var events eventsv1.EventList
	if err := k8s.List(ctx(), &events, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	dump = append(dump, events)
	var cms corev1.ConfigMapList
	if err := k8s.List(ctx(), &cms, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	dump = append(dump, cms)
	if d, ok := deployment(t, ns, "chat"); ok {
		dump = append(dump, d)
	}
	raw, _ := json.Marshal(dump)
	for _, secret := range []string{pgPW, redisPW, jwtSecret} {
		if strings.Contains(string(raw), secret) {
			t.Errorf("a Secret value (%.6s...) appears in the status, events or children", secret)
		}
	}
}
