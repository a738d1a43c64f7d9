package charts_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"helm.sh/helm/v4/pkg/action"
	"helm.sh/helm/v4/pkg/chart/common"
	chart "helm.sh/helm/v4/pkg/chart/v2"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	releasev1 "helm.sh/helm/v4/pkg/release/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	"sigs.k8s.io/yaml"

	_ "github.com/tetra-messenger/tetra/controllers" // registers tetra_operator_* on ctrlmetrics.Registry
	workloadmetrics "github.com/tetra-messenger/tetra/workload/metrics"
	"github.com/tetra-messenger/tetra/workload/outbox"
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
		"ClusterRole/tetra-tetra-operator-metrics-auth", "ClusterRoleBinding/tetra-tetra-operator-metrics-auth",
		"ClusterRole/tetra-tetra-operator-metrics-reader",
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
	for _, want := range []string{"--leader-elect=true", "--default-image=ghcr.io/tetra-messenger/tetra:0.1.0", "--redis-poll-interval=10s", "--leader-election-namespace=tetra-system",
		"--metrics-secure=true", "--metrics-bind-address=:8443"} {
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
	if sc := dep.Spec.Template.Spec.SecurityContext; sc.RunAsUser == nil || *sc.RunAsUser != 65532 || sc.RunAsGroup == nil || *sc.RunAsGroup != 65532 {
		t.Errorf("security context %+v: want runAsUser and runAsGroup 65532 stated", sc)
	}
	// The metrics filter asks TokenReviews and SubjectAccessReviews.
	var auth rbacv1.ClusterRole
	decode(t, objs["ClusterRole/tetra-tetra-operator-metrics-auth"], &auth)
	got := map[string]bool{}
	for _, r := range auth.Rules {
		for _, res := range r.Resources {
			got[res+":"+strings.Join(r.Verbs, ",")] = true
		}
	}
	if !got["tokenreviews:create"] || !got["subjectaccessreviews:create"] || len(auth.Rules) != 2 {
		t.Errorf("metrics-auth rules %+v", auth.Rules)
	}
	var authBinding rbacv1.ClusterRoleBinding
	decode(t, objs["ClusterRoleBinding/tetra-tetra-operator-metrics-auth"], &authBinding)
	if authBinding.RoleRef.Name != "tetra-tetra-operator-metrics-auth" || authBinding.Subjects[0].Name != "tetra-tetra-operator" {
		t.Errorf("metrics-auth binding %+v", authBinding)
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

// promRule mirrors the part of monitoring.coreos.com/v1 PrometheusRule the
// chart renders (decoded strictly: a typo in a field name fails).
type promRule struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   map[string]any `json:"metadata"`
	Spec       struct {
		Groups []struct {
			Name  string `json:"name"`
			Rules []struct {
				Alert       string            `json:"alert"`
				Expr        string            `json:"expr"`
				For         string            `json:"for"`
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"rules"`
		} `json:"groups"`
	} `json:"spec"`
}

type serviceMonitor struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Metadata   map[string]any `json:"metadata"`
	Spec       struct {
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Selector struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"selector"`
		Endpoints []struct {
			Port          string `json:"port"`
			Path          string `json:"path"`
			Interval      string `json:"interval"`
			ScrapeTimeout string `json:"scrapeTimeout"`
			// The operator's metrics are HTTPS behind authentication
			// (metrics.secure): Prometheus sends its own token.
			Scheme          string `json:"scheme"`
			BearerTokenFile string `json:"bearerTokenFile"`
			TLSConfig       struct {
				InsecureSkipVerify bool `json:"insecureSkipVerify"`
			} `json:"tlsConfig"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// exportedNames is every metric family the workload and the operator
// export: the rules may name no other.
func exportedNames(t *testing.T) map[string]bool {
	t.Helper()
	m := workloadmetrics.New(func(context.Context) (workloadmetrics.Snapshot, error) {
		return workloadmetrics.Snapshot{Relay: &workloadmetrics.RelaySnapshot{}, Outbox: []outbox.Stats{{Partition: 0, Depth: 1}}}, nil
	})
	names := map[string]bool{}
	for _, g := range []prometheus.Gatherer{m.Registry(), ctrlmetrics.Registry} {
		mfs, err := g.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			names[mf.GetName()] = true
		}
	}
	if !names["tetra_operator_reconciles_total"] || !names["tetra_relay_failures_total"] {
		t.Fatalf("gathered names incomplete: %v", names)
	}
	return names
}

var metricName = regexp.MustCompile(`\btetra_[a-z0-9_]+`)

func TestChartMonitoringDisabledByDefault(t *testing.T) {
	objs, err := render(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k := range objs {
		if strings.HasPrefix(k, "ServiceMonitor/") || strings.HasPrefix(k, "PrometheusRule/") {
			t.Errorf("%s rendered although disabled", k)
		}
	}
	// The metrics Service is always there, selecting the operator's pod.
	var svc corev1.Service
	decode(t, objs["Service/tetra-tetra-operator-metrics"], &svc)
	var dep appsv1.Deployment
	decode(t, objs["Deployment/tetra-tetra-operator"], &dep)
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Name != "metrics" || svc.Spec.Ports[0].Port != 8443 ||
		svc.Spec.Ports[0].TargetPort.String() != "metrics" {
		t.Errorf("metrics Service ports %+v", svc.Spec.Ports)
	}
	for k, v := range svc.Spec.Selector {
		if dep.Spec.Template.Labels[k] != v {
			t.Errorf("Service selector %v does not select the pod labels %v", svc.Spec.Selector, dep.Spec.Template.Labels)
		}
	}
	if len(svc.Spec.Selector) == 0 {
		t.Error("metrics Service without a selector")
	}
	found := false
	for _, p := range dep.Spec.Template.Spec.Containers[0].Ports {
		found = found || (p.Name == "metrics" && p.ContainerPort == 8443)
	}
	if !found {
		t.Error("the container has no port named metrics on 8443")
	}
}

func TestChartMonitoringEnabled(t *testing.T) {
	objs, err := render(t, map[string]any{
		"metrics": map[string]any{"port": 9090, "serviceMonitor": map[string]any{
			"enabled": true, "labels": map[string]any{"release": "kube-prometheus-stack"}, "interval": "15s"}},
		"prometheusRule": map[string]any{"enabled": true, "labels": map[string]any{"role": "alert-rules"},
			"deliveriesPerAccepted": map[string]any{"expected": 3, "tolerance": 0.5}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var svc corev1.Service
	decode(t, objs["Service/tetra-tetra-operator-metrics"], &svc)

	var sm serviceMonitor
	decode(t, objs["ServiceMonitor/tetra-tetra-operator"], &sm)
	if sm.APIVersion != "monitoring.coreos.com/v1" || sm.Kind != "ServiceMonitor" {
		t.Errorf("ServiceMonitor %s %s", sm.APIVersion, sm.Kind)
	}
	if labels, _ := sm.Metadata["labels"].(map[string]any); labels["release"] != "kube-prometheus-stack" {
		t.Errorf("ServiceMonitor labels %v", sm.Metadata["labels"])
	}
	if len(sm.Spec.NamespaceSelector.MatchNames) != 1 || sm.Spec.NamespaceSelector.MatchNames[0] != "tetra-system" {
		t.Errorf("namespaceSelector %+v", sm.Spec.NamespaceSelector)
	}
	if len(sm.Spec.Selector.MatchLabels) == 0 {
		t.Fatal("ServiceMonitor selects every Service")
	}
	for k, v := range sm.Spec.Selector.MatchLabels {
		if svc.Labels[k] != v {
			t.Errorf("ServiceMonitor selector %v does not select the metrics Service (labels %v)", sm.Spec.Selector.MatchLabels, svc.Labels)
		}
	}
	if len(sm.Spec.Endpoints) != 1 || sm.Spec.Endpoints[0].Port != svc.Spec.Ports[0].Name || sm.Spec.Endpoints[0].Path != "/metrics" ||
		sm.Spec.Endpoints[0].Interval != "15s" || svc.Spec.Ports[0].Port != 9090 {
		t.Errorf("endpoints %+v, Service ports %+v", sm.Spec.Endpoints, svc.Spec.Ports)
	}
	if e := sm.Spec.Endpoints[0]; e.Scheme != "https" || e.BearerTokenFile == "" || !e.TLSConfig.InsecureSkipVerify {
		t.Errorf("endpoint %+v: the metrics are HTTPS behind authentication (metrics.secure defaults to true)", e)
	}

	var pr promRule
	decode(t, objs["PrometheusRule/tetra-tetra-operator"], &pr)
	if pr.APIVersion != "monitoring.coreos.com/v1" || pr.Kind != "PrometheusRule" {
		t.Errorf("PrometheusRule %s %s", pr.APIVersion, pr.Kind)
	}
	if labels, _ := pr.Metadata["labels"].(map[string]any); labels["role"] != "alert-rules" {
		t.Errorf("PrometheusRule labels %v", pr.Metadata["labels"])
	}
	names := exportedNames(t)
	alerts := map[string]string{}
	for _, g := range pr.Spec.Groups {
		for _, r := range g.Rules {
			alerts[r.Alert] = r.Expr
			if r.Alert == "" || r.Expr == "" || r.For == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" {
				t.Errorf("incomplete rule %+v", r)
			}
			if strings.Count(r.Expr, "(") != strings.Count(r.Expr, ")") || strings.Count(r.Expr, "[") != strings.Count(r.Expr, "]") {
				t.Errorf("%s: unbalanced expression %q", r.Alert, r.Expr)
			}
			used := metricName.FindAllString(r.Expr, -1)
			if len(used) == 0 {
				t.Errorf("%s names no tetra metric: %q", r.Alert, r.Expr)
			}
			for _, n := range used {
				if !names[n] {
					t.Errorf("%s uses %s, which neither the workload nor the operator exports", r.Alert, n)
				}
			}
			// Helm must not have eaten the Prometheus templates.
			if strings.Contains(r.Annotations["summary"], "$value") && !strings.Contains(r.Annotations["summary"], "{{ $value") {
				t.Errorf("%s summary %q", r.Alert, r.Annotations["summary"])
			}
		}
	}
	for _, want := range []string{"TetraOutboxNotDraining", "TetraDeliveriesPerAcceptedOff", "TetraWithdrawalSurge"} {
		if alerts[want] == "" {
			t.Errorf("no alert %s (have %v)", want, alerts)
		}
	}
	if e := alerts["TetraOutboxNotDraining"]; !strings.Contains(e, "tetra_outbox_oldest_age_seconds") || !strings.Contains(e, "> 60") {
		t.Errorf("outbox age rule %q", e)
	}
	if e := alerts["TetraDeliveriesPerAcceptedOff"]; !strings.Contains(e, "- 3") || !strings.Contains(e, "> 0.5") || !strings.Contains(e, "[10m]") {
		t.Errorf("deliveries per accepted rule does not use the values: %q", e)
	}
}

func TestChartSchemaRefusesBadMonitoringValues(t *testing.T) {
	for name, vals := range map[string]map[string]any{
		"serviceMonitor.enabled not bool": {"metrics": map[string]any{"serviceMonitor": map[string]any{"enabled": "yes"}}},
		"bad scrape interval":             {"metrics": map[string]any{"serviceMonitor": map[string]any{"interval": "often"}}},
		"negative tolerance":              {"prometheusRule": map[string]any{"deliveriesPerAccepted": map[string]any{"tolerance": -1}}},
		"unknown rule key":                {"prometheusRule": map[string]any{"outboxAge": 60}},
	} {
		if _, err := render(t, vals); err == nil || !strings.Contains(err.Error(), "schema") {
			t.Errorf("%s: accepted or not a schema error: %v", name, err)
		}
	}
}

// metrics.port on the health probes' port would render two container ports
// on one number: the chart refuses it.
func TestChartRefusesMetricsPortOnProbesPort(t *testing.T) {
	_, err := render(t, map[string]any{"metrics": map[string]any{"port": 8081}})
	if err == nil || !strings.Contains(err.Error(), "metrics.port must not be 8081") {
		t.Errorf("metrics.port 8081 accepted or not the chart's message: %v", err)
	}
}

// dashboard mirrors the parts of a Grafana dashboard the test reads.
type dashboard struct {
	Title      string `json:"title"`
	UID        string `json:"uid"`
	Templating struct {
		List []struct {
			Name string `json:"name"`
		} `json:"list"`
	} `json:"templating"`
	Panels []struct {
		Title      string `json:"title"`
		Datasource struct {
			UID string `json:"uid"`
		} `json:"datasource"`
		Targets []struct {
			Expr string `json:"expr"`
		} `json:"targets"`
	} `json:"panels"`
}

// The Grafana dashboard: valid JSON over metrics the workload and the
// operator really export (a histogram's _bucket series count as their
// family), with the panels the runbook talks about; off by default, and
// rendered as a sidecar ConfigMap holding the file unchanged when on.
func TestChartGrafanaDashboard(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(chartDir, "files", "grafana", "tetra.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("tetra.json: %v", err)
	}
	names := exportedNames(t)
	used := map[string]bool{}
	titles := map[string]bool{}
	for _, p := range d.Panels {
		titles[p.Title] = true
		if p.Datasource.UID != "${datasource}" || len(p.Targets) == 0 {
			t.Errorf("panel %q: datasource %q, %d targets", p.Title, p.Datasource.UID, len(p.Targets))
		}
		for _, tg := range p.Targets {
			if strings.Count(tg.Expr, "(") != strings.Count(tg.Expr, ")") || strings.Count(tg.Expr, "{") != strings.Count(tg.Expr, "}") {
				t.Errorf("panel %q: unbalanced %q", p.Title, tg.Expr)
			}
			found := metricName.FindAllString(tg.Expr, -1)
			if len(found) == 0 {
				t.Errorf("panel %q names no tetra metric: %q", p.Title, tg.Expr)
			}
			for _, n := range found {
				family := n
				for _, suffix := range []string{"_bucket", "_sum", "_count"} {
					if base := strings.TrimSuffix(n, suffix); base != n && names[base] {
						family = base
					}
				}
				if !names[family] {
					t.Errorf("panel %q uses %s, which neither the workload nor the operator exports", p.Title, n)
				}
				used[family] = true
			}
		}
	}
	for _, want := range []string{"tetra_outbox_oldest_age_seconds", "tetra_deliveries_total", "tetra_messages_accepted_total",
		"tetra_withdrawals_total", "tetra_accept_latency_seconds", "tetra_delivery_latency_seconds"} {
		if !used[want] {
			t.Errorf("the dashboard does not chart %s", want)
		}
	}
	for _, want := range []string{"Outbox oldest row age", "Deliveries per accepted message", "Withdrawals by reaper", "Accept latency", "Delivery latency by path"} {
		if !titles[want] {
			t.Errorf("no panel %q", want)
		}
	}

	objs, err := render(t, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := objs["ConfigMap/tetra-tetra-operator-dashboard"]; ok {
		t.Error("the dashboard ConfigMap is rendered by default")
	}
	objs, err = render(t, map[string]any{"grafana": map[string]any{"dashboard": map[string]any{
		"enabled": true, "namespace": "monitoring", "annotations": map[string]any{"grafana_folder": "tetra"}}}})
	if err != nil {
		t.Fatal(err)
	}
	var cm corev1.ConfigMap
	decode(t, objs["ConfigMap/tetra-tetra-operator-dashboard"], &cm)
	if cm.Namespace != "monitoring" || cm.Labels["grafana_dashboard"] != "1" || cm.Annotations["grafana_folder"] != "tetra" {
		t.Errorf("dashboard ConfigMap meta %s %v %v", cm.Namespace, cm.Labels, cm.Annotations)
	}
	if strings.TrimSpace(cm.Data["tetra.json"]) != strings.TrimSpace(string(raw)) {
		t.Error("the ConfigMap does not hold files/grafana/tetra.json unchanged")
	}
}
