package charts_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

const chartDir = "tetra-operator"

func load(t *testing.T) *chart.Chart {
	t.Helper()
	c, err := loader.Load(chartDir)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// render runs a client-only `helm install --dry-run` (what `helm template`
// does) and returns the manifests by kind/name.
func render(t *testing.T, vals map[string]any) (map[string]string, error) {
	t.Helper()
	in := action.NewInstall(action.NewConfiguration())
	in.DryRunStrategy = action.DryRunClient
	in.ReleaseName = "tetra"
	in.Namespace = "tetra-system"
	in.Replace = true
	kv, err := common.ParseKubeVersion("v1.37.2") // the default is v1.20, below the chart's kubeVersion
	if err != nil {
		t.Fatal(err)
	}
	in.KubeVersion = kv
	rel, err := in.Run(load(t), vals)
	if err != nil {
		return nil, err
	}
	r := rel.(*releasev1.Release)
	out := map[string]string{}
	for _, doc := range strings.Split(r.Manifest, "\n---") {
		var u unstructured.Unstructured
		if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
			t.Fatalf("rendered YAML does not parse: %v\n%s", err, doc)
		}
		if len(u.Object) == 0 {
			continue
		}
		out[u.GetKind()+"/"+u.GetName()] = doc
	}
	return out, nil
}

func decode(t *testing.T, doc string, into any) {
	t.Helper()
	if err := yaml.UnmarshalStrict([]byte(stripComments(doc)), into); err != nil {
		t.Fatalf("decode: %v\n%s", err, doc)
	}
}

func stripComments(doc string) string {
	var b strings.Builder
	for _, l := range strings.Split(doc, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "#") {
			continue
		}
		b.WriteString(l + "\n")
	}
	return b.String()
}

func TestChartDefaults(t *testing.T) {
	objs, err := render(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"CustomResourceDefinition/messengers.tetra.dev", "ServiceAccount/tetra-tetra-operator", "ClusterRole/tetra-tetra-operator",
		"ClusterRoleBinding/tetra-tetra-operator", "Role/tetra-tetra-operator-leader-election",
		"RoleBinding/tetra-tetra-operator-leader-election", "Deployment/tetra-tetra-operator",
	} {
		if _, ok := objs[want]; !ok {
			t.Errorf("missing %s (have %v)", want, keys(objs))
		}
	}

	var crd apiextensionsv1.CustomResourceDefinition
	decode(t, objs["CustomResourceDefinition/messengers.tetra.dev"], &crd)
	if crd.Annotations["helm.sh/resource-policy"] != "keep" {
		t.Error("crds.keep=true did not annotate the CRD")
	}
	if crd.Spec.Group != "tetra.dev" || crd.Spec.Versions[0].Name != "v1alpha1" || crd.Spec.Versions[0].Schema == nil {
		t.Errorf("CRD %s %+v", crd.Spec.Group, crd.Spec.Versions)
	}

	var role rbacv1.ClusterRole
	decode(t, objs["ClusterRole/tetra-tetra-operator"], &role)
	var generated rbacv1.ClusterRole
	b, err := os.ReadFile(filepath.Join("..", "config", "rbac", "role.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	decode(t, string(b), &generated)
	if !equalYAML(t, role.Rules, generated.Rules) {
		t.Error("the chart's ClusterRole rules differ from config/rbac/role.yaml (run make manifests)")
	}

	var dep appsv1.Deployment
	decode(t, objs["Deployment/tetra-tetra-operator"], &dep)
	c := dep.Spec.Template.Spec.Containers[0]
	if c.Image != "ghcr.io/tetra-messenger/tetra-operator:0.1.0" {
		t.Errorf("image %s", c.Image)
	}
	args := strings.Join(c.Args, " ")
	for _, want := range []string{"--leader-elect=true", "--default-image=ghcr.io/tetra-messenger/tetra:latest", "--redis-poll-interval=10s", "--leader-election-namespace=tetra-system"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
	if dep.Spec.Template.Annotations["checksum/rbac"] == "" || !*dep.Spec.Template.Spec.SecurityContext.RunAsNonRoot {
		t.Error("checksum annotation or security context")
	}
	if dep.Spec.Template.Spec.ServiceAccountName != "tetra-tetra-operator" || dep.Namespace != "tetra-system" {
		t.Error("service account or namespace")
	}
}

func TestChartCRDMatchesGenerated(t *testing.T) {
	a, err := os.ReadFile(filepath.Join(chartDir, "files", "crds", "tetra.dev_messengers.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join("..", "config", "crd", "bases", "tetra.dev_messengers.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Fatal("charts/tetra-operator/files/crds differs from config/crd/bases: run make manifests")
	}
}

func TestChartValues(t *testing.T) {
	objs, err := render(t, map[string]any{
		"crds":           map[string]any{"enabled": false},
		"image":          map[string]any{"repository": "registry.example/op", "tag": "v9"},
		"workload":       map[string]any{"image": "registry.example/tetra:v9"},
		"leaderElection": map[string]any{"enabled": false},
		"rbac":           map[string]any{"create": false},
		"serviceAccount": map[string]any{"create": false, "name": "existing"},
	})
	if err != nil {
		t.Fatal(err)
	}
	for k := range objs {
		if strings.HasPrefix(k, "CustomResourceDefinition/") || strings.HasPrefix(k, "ClusterRole") || strings.HasPrefix(k, "Role") || strings.HasPrefix(k, "ServiceAccount/") {
			t.Errorf("%s rendered although disabled", k)
		}
	}
	var dep appsv1.Deployment
	decode(t, objs["Deployment/tetra-tetra-operator"], &dep)
	c := dep.Spec.Template.Spec.Containers[0]
	if c.Image != "registry.example/op:v9" || !strings.Contains(strings.Join(c.Args, " "), "--default-image=registry.example/tetra:v9") ||
		dep.Spec.Template.Spec.ServiceAccountName != "existing" {
		t.Errorf("values not applied: %s %v %s", c.Image, c.Args, dep.Spec.Template.Spec.ServiceAccountName)
	}

	objs, err = render(t, map[string]any{"crds": map[string]any{"keep": false}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(objs["CustomResourceDefinition/messengers.tetra.dev"], "resource-policy") {
		t.Error("crds.keep=false still keeps the CRD")
	}
}

func TestChartSchemaRefusesBadValues(t *testing.T) {
	for name, vals := range map[string]map[string]any{
		"unknown key":        {"replicas": 2},
		"bad pull policy":    {"image": map[string]any{"repository": "x", "pullPolicy": "Sometimes"}},
		"bad poll interval":  {"redis": map[string]any{"pollInterval": "often"}},
		"crds.keep not bool": {"crds": map[string]any{"keep": "yes"}},
		"bad log level":      {"logLevel": "loud"},
	} {
		if _, err := render(t, vals); err == nil || !strings.Contains(err.Error(), "schema") {
			t.Errorf("%s: accepted or not a schema error: %v", name, err)
		}
	}
}

func equalYAML(t *testing.T, a, b any) bool {
	ya, err := yaml.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	yb, err := yaml.Marshal(b)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Equal(ya, yb)
}

func keys(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
