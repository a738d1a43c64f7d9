package render_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	tetrav1 "github.com/tetra-messenger/tetra/api/v1alpha1"
	"github.com/tetra-messenger/tetra/internal/operator/render"
)

// sample reads a Messenger of config/samples and gives it what the API
// server would (namespace, UID).
func sample(t *testing.T, file string) *tetrav1.Messenger {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join("..", "..", "..", "config", "samples", file))
	if err != nil {
		t.Fatal(err)
	}
	var m tetrav1.Messenger
	if err := yaml.UnmarshalStrict(raw, &m); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	m.Namespace, m.UID = "default", "uid-sample"
	return &m
}

func samples(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("..", "..", "..", "config", "samples", "tetra_v1alpha1_messenger_*.yaml"))
	if err != nil || len(files) < 3 {
		t.Fatalf("samples: %v %v (want at least postgres, kafka, postgres-sentinel)", files, err)
	}
	for i, f := range files {
		files[i] = filepath.Base(f)
	}
	return files
}

// Every sample renders production defaults: requests and a memory limit
// (the defaults when the sample sets none), a stated non-root user and
// group, a read-only root, soft spreading over nodes and zones for more
// than one replica, and /metrics on its own port.
func TestSamplesRenderProductionDefaults(t *testing.T) {
	for _, file := range samples(t) {
		t.Run(file, func(t *testing.T) {
			m := sample(t, file)
			o := mustRender(t, m, inputs())
			pod := o.Deployment.Spec.Template.Spec
			c := pod.Containers[0]
			if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
				t.Errorf("resources %+v: want CPU and memory requests and a memory limit", c.Resources)
			}
			if len(m.Spec.Resources.Requests) == 0 && len(m.Spec.Resources.Limits) == 0 {
				if !c.Resources.Requests.Cpu().Equal(render.DefaultCPURequest) || !c.Resources.Requests.Memory().Equal(render.DefaultMemoryRequest) ||
					!c.Resources.Limits.Memory().Equal(render.DefaultMemoryLimit) || c.Resources.Limits.Cpu().Value() != 0 ||
					!c.Resources.Requests.StorageEphemeral().Equal(render.DefaultEphemeralStorageRequest) ||
					!c.Resources.Limits.StorageEphemeral().Equal(render.DefaultEphemeralStorageLimit) {
					t.Errorf("resources %+v: want the defaults 500m/512Mi/64Mi, limits 1Gi memory and ephemeral storage, no CPU limit", c.Resources)
				}
			}
			sc := pod.SecurityContext
			if sc == nil || !ptr.Deref(sc.RunAsNonRoot, false) || ptr.Deref(sc.RunAsUser, 0) != 65532 || ptr.Deref(sc.RunAsGroup, 0) != 65532 {
				t.Errorf("pod security context %+v: want runAsNonRoot, runAsUser and runAsGroup 65532", sc)
			}
			if !ptr.Deref(c.SecurityContext.ReadOnlyRootFilesystem, false) || ptr.Deref(c.SecurityContext.AllowPrivilegeEscalation, true) {
				t.Errorf("container security context %+v", c.SecurityContext)
			}
			if render.Replicas(m) > 1 {
				keys := map[string]bool{}
				for _, tsc := range pod.TopologySpreadConstraints {
					if tsc.WhenUnsatisfiable != corev1.ScheduleAnyway || tsc.MaxSkew != 1 || tsc.LabelSelector == nil ||
						tsc.LabelSelector.MatchLabels[render.LabelInstance] != m.Name {
						t.Errorf("spread %+v: want a soft (ScheduleAnyway) skew of 1 over this Messenger's pods", tsc)
					}
					keys[tsc.TopologyKey] = true
				}
				if !keys["kubernetes.io/hostname"] || !keys["topology.kubernetes.io/zone"] {
					t.Errorf("spread keys %v: want nodes and zones", keys)
				}
				if o.PDB == nil {
					t.Error("no PDB for more than one replica")
				}
			}
			ports := map[string]int32{}
			for _, p := range c.Ports {
				ports[p.Name] = p.ContainerPort
			}
			if ports["http"] != render.HTTPPort || ports["metrics"] != render.MetricsPort {
				t.Errorf("ports %v", ports)
			}
			if env(o.Deployment)["TETRA_METRICS_ADDR"].Value != ":9090" {
				t.Errorf("TETRA_METRICS_ADDR %+v", env(o.Deployment)["TETRA_METRICS_ADDR"])
			}
			if o.Deployment.Spec.Template.Annotations["prometheus.io/port"] != "9090" {
				t.Errorf("prometheus.io/port %q", o.Deployment.Spec.Template.Annotations["prometheus.io/port"])
			}
		})
	}
}

// One replica gets no spread constraints; resources given are used as
// given, without defaults mixed in.
func TestResourcesAndSpreadOnlyWhenWanted(t *testing.T) {
	m := base()
	o := mustRender(t, m, inputs())
	if got := o.Deployment.Spec.Template.Spec.TopologySpreadConstraints; got != nil {
		t.Errorf("one replica: spread %+v", got)
	}
	m.Spec.Resources = corev1.ResourceRequirements{Limits: corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("300Mi")}}
	o = mustRender(t, m, inputs())
	r := o.Deployment.Spec.Template.Spec.Containers[0].Resources
	if len(r.Requests) != 0 || len(r.Limits) != 1 || !r.Limits.Memory().Equal(resource.MustParse("300Mi")) {
		t.Errorf("given resources changed: %+v", r)
	}
}

func peerNS(name string) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"kubernetes.io/metadata.name": name}}}
}

// spec.networkPolicy renders one policy over the Messenger's pods: the
// client port from clientsFrom and the operator, the metrics port from
// metricsFrom, nothing else; without it, none.
func TestNetworkPolicy(t *testing.T) {
	m := base()
	if o := mustRender(t, m, inputs()); o.NetworkPolicy != nil {
		t.Fatalf("a NetworkPolicy without spec.networkPolicy: %+v", o.NetworkPolicy)
	}
	m.Spec.NetworkPolicy = &tetrav1.NetworkPolicySpec{
		ClientsFrom: []networkingv1.NetworkPolicyPeer{peerNS("ingress-nginx")},
		MetricsFrom: []networkingv1.NetworkPolicyPeer{peerNS("monitoring")},
	}
	in := inputs()
	in.OperatorNamespace = "tetra-system"
	np := mustRender(t, m, in).NetworkPolicy
	if np == nil || np.Name != "chat" || np.Namespace != "ns" || len(np.OwnerReferences) != 1 {
		t.Fatalf("policy %+v", np)
	}
	if np.Spec.PodSelector.MatchLabels[render.LabelInstance] != "chat" || len(np.Spec.PolicyTypes) != 1 || np.Spec.PolicyTypes[0] != networkingv1.PolicyTypeIngress {
		t.Errorf("selector/types %+v", np.Spec)
	}
	if len(np.Spec.Ingress) != 2 {
		t.Fatalf("rules %+v", np.Spec.Ingress)
	}
	client, metrics := np.Spec.Ingress[0], np.Spec.Ingress[1]
	if len(client.Ports) != 1 || *client.Ports[0].Port != intstr.FromString("http") || len(client.From) != 2 ||
		client.From[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "ingress-nginx" ||
		client.From[1].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "tetra-system" ||
		client.From[1].PodSelector.MatchLabels[render.LabelName] != "tetra-operator" {
		t.Errorf("client rule %+v", client)
	}
	if len(metrics.Ports) != 1 || *metrics.Ports[0].Port != intstr.FromString("metrics") || len(metrics.From) != 1 ||
		metrics.From[0].NamespaceSelector.MatchLabels["kubernetes.io/metadata.name"] != "monitoring" {
		t.Errorf("metrics rule %+v", metrics)
	}
	// allowAllClients: the client port from anywhere (no from), the
	// metrics port still only from metricsFrom.
	m.Spec.NetworkPolicy = &tetrav1.NetworkPolicySpec{AllowAllClients: true, MetricsFrom: []networkingv1.NetworkPolicyPeer{peerNS("monitoring")}}
	np = mustRender(t, m, in).NetworkPolicy
	if len(np.Spec.Ingress) != 2 || np.Spec.Ingress[0].From != nil || len(np.Spec.Ingress[1].From) != 1 {
		t.Errorf("allowAllClients rules %+v", np.Spec.Ingress)
	}
	// metricsFrom only: the client port admits the operator alone.
	m.Spec.NetworkPolicy = &tetrav1.NetworkPolicySpec{MetricsFrom: []networkingv1.NetworkPolicyPeer{peerNS("monitoring")}}
	np = mustRender(t, m, in).NetworkPolicy
	if len(np.Spec.Ingress) != 2 || len(np.Spec.Ingress[0].From) != 1 || np.Spec.Ingress[0].From[0].PodSelector == nil {
		t.Errorf("metricsFrom-only rules %+v", np.Spec.Ingress)
	}
}

// A bad spec.networkPolicy renders nothing and the error names the field.
func TestNetworkPolicyRefusesBadPeers(t *testing.T) {
	sel := &metav1.LabelSelector{MatchLabels: map[string]string{"a": "b"}}
	for _, tc := range []struct {
		name  string
		np    tetrav1.NetworkPolicySpec
		field string
	}{
		{"empty", tetrav1.NetworkPolicySpec{}, "spec.networkPolicy must name"},
		{"all and from", tetrav1.NetworkPolicySpec{AllowAllClients: true, ClientsFrom: []networkingv1.NetworkPolicyPeer{peerNS("x")}}, "spec.networkPolicy.clientsFrom must be omitted"},
		{"empty peer", tetrav1.NetworkPolicySpec{ClientsFrom: []networkingv1.NetworkPolicyPeer{{}}}, "spec.networkPolicy.clientsFrom[0]"},
		{"ipBlock and selector", tetrav1.NetworkPolicySpec{MetricsFrom: []networkingv1.NetworkPolicyPeer{peerNS("x"), {IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8"}, PodSelector: sel}}}, "spec.networkPolicy.metricsFrom[1]"},
		{"bad cidr", tetrav1.NetworkPolicySpec{ClientsFrom: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0"}}}}, "spec.networkPolicy.clientsFrom[0].ipBlock.cidr"},
		{"except outside", tetrav1.NetworkPolicySpec{ClientsFrom: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8", Except: []string{"192.168.0.0/16"}}}}}, "spec.networkPolicy.clientsFrom[0].ipBlock.except[0]"},
		{"bad selector", tetrav1.NetworkPolicySpec{MetricsFrom: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"a b": "c"}}}}}, "spec.networkPolicy.metricsFrom[0].podSelector"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := base()
			m.Spec.NetworkPolicy = &tc.np
			_, err := render.Render(m, inputs())
			if err == nil || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("err %v, want one naming %q", err, tc.field)
			}
		})
	}
}
