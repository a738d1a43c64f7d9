package config_test

import (
	"fmt"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

func build(t *testing.T, dir string) resmap.ResMap {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	return m
}

func byID(m resmap.ResMap) map[string]map[string]any {
	out := map[string]map[string]any{}
	for _, r := range m.Resources() {
		obj, _ := r.Map()
		out[r.GetKind()+"/"+r.GetName()] = obj
	}
	return out
}

func get(obj map[string]any, path ...any) any {
	var cur any = obj
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := cur.(map[string]any)
			cur = m[k]
		case int:
			s, _ := cur.([]any)
			if k >= len(s) {
				return nil
			}
			cur = s[k]
		}
	}
	return cur
}

func TestDefaultBuilds(t *testing.T) {
	objs := byID(build(t, "default"))
	for _, want := range []string{
		"Namespace/tetra-system", "CustomResourceDefinition/messengers.tetra.dev",
		"ServiceAccount/tetra-operator-controller-manager", "ClusterRole/tetra-operator-manager-role",
		"ClusterRoleBinding/tetra-operator-manager-rolebinding", "Role/tetra-operator-leader-election-role",
		"RoleBinding/tetra-operator-leader-election-rolebinding", "Deployment/tetra-operator-controller-manager",
		"ClusterRole/tetra-operator-messenger-editor-role", "ClusterRole/tetra-operator-messenger-viewer-role",
		"ClusterRole/tetra-operator-metrics-auth-role", "ClusterRoleBinding/tetra-operator-metrics-auth-rolebinding",
		"ClusterRole/tetra-operator-metrics-reader", "Service/tetra-operator-controller-manager-metrics",
	} {
		if objs[want] == nil {
			t.Errorf("config/default lacks %s", want)
		}
	}
	dep := objs["Deployment/tetra-operator-controller-manager"]
	if ns := get(dep, "metadata", "namespace"); ns != "tetra-system" {
		t.Errorf("manager namespace %v", ns)
	}
	if img := get(dep, "spec", "template", "spec", "containers", 0, "image"); img != "ghcr.io/tetra-messenger/tetra-operator:0.1.0" {
		t.Errorf("manager image %v", img)
	}
	if sa := get(dep, "spec", "template", "spec", "serviceAccountName"); sa != "tetra-operator-controller-manager" {
		t.Errorf("service account %v", sa)
	}
	// The metrics are served behind controller-runtime's authentication
	// and authorization filter, which asks TokenReviews and
	// SubjectAccessReviews under the metrics-auth role.
	args := fmt.Sprint(get(dep, "spec", "template", "spec", "containers", 0, "args"))
	if !strings.Contains(args, "--metrics-secure=true") || !strings.Contains(args, "--metrics-bind-address=:8443") {
		t.Errorf("manager args %s: want --metrics-secure=true on :8443", args)
	}
	auth := fmt.Sprint(get(objs["ClusterRole/tetra-operator-metrics-auth-role"], "rules"))
	if !strings.Contains(auth, "tokenreviews") || !strings.Contains(auth, "subjectaccessreviews") {
		t.Errorf("metrics-auth-role rules %s", auth)
	}
	if get(objs["ClusterRoleBinding/tetra-operator-metrics-auth-rolebinding"], "subjects", 0, "name") != "tetra-operator-controller-manager" {
		t.Error("metrics-auth binding does not name the operator's ServiceAccount")
	}
	crb := objs["ClusterRoleBinding/tetra-operator-manager-rolebinding"]
	if get(crb, "roleRef", "name") != "tetra-operator-manager-role" ||
		get(crb, "subjects", 0, "name") != "tetra-operator-controller-manager" || get(crb, "subjects", 0, "namespace") != "tetra-system" {
		t.Errorf("binding %v", crb)
	}
}

// TestRBACIsLeastPrivilege pins the generated ClusterRole: Secrets are only
// read, Pods only listed, Messengers themselves never written (only their
// status).
func TestRBACIsLeastPrivilege(t *testing.T) {
	objs := byID(build(t, "rbac"))
	role := objs["ClusterRole/manager-role"]
	rules, _ := get(role, "rules").([]any)
	verbs := map[string]string{}
	for _, r := range rules {
		rm := r.(map[string]any)
		for _, g := range rm["apiGroups"].([]any) {
			for _, res := range rm["resources"].([]any) {
				var vs []string
				for _, v := range rm["verbs"].([]any) {
					vs = append(vs, v.(string))
				}
				verbs[g.(string)+"/"+res.(string)] = strings.Join(vs, ",")
			}
		}
	}
	want := map[string]string{
		"/secrets":                          "get,list,watch",
		"/pods":                             "get,list,patch,watch", // watch: Degraded from pod state; patch: the tuning-hash annotation
		"tetra.dev/messengers":              "get,list,watch",
		"tetra.dev/messengers/status":       "get,patch,update",
		"tetra.dev/messengers/finalizers":   "update",
		"events.k8s.io/events":              "create,patch",
		"apps/deployments":                  "create,delete,get,list,patch,update,watch",
		"/configmaps":                       "create,delete,get,list,patch,update,watch",
		"/services":                         "create,delete,get,list,patch,update,watch",
		"policy/poddisruptionbudgets":       "create,delete,get,list,patch,update,watch",
		"networking.k8s.io/networkpolicies": "create,delete,get,list,patch,update,watch", // spec.networkPolicy
	}
	for k, v := range want {
		if verbs[k] != v {
			t.Errorf("%s: verbs %q, want %q", k, verbs[k], v)
		}
	}
	for k := range verbs {
		if _, ok := want[k]; !ok {
			t.Errorf("unexpected permission on %s: %s", k, verbs[k])
		}
	}
}

func TestSamplesBuild(t *testing.T) {
	objs := byID(build(t, "samples"))
	pg, kafka := objs["Messenger/chat"], objs["Messenger/chat-kafka"]
	if pg == nil || kafka == nil {
		t.Fatalf("samples: %v", objs)
	}
	if get(pg, "spec", "backend") != "postgres" || get(kafka, "spec", "backend") != "kafka" || get(kafka, "spec", "kafka", "topic") != "tetra-outbox" {
		t.Error("sample backends")
	}
}
