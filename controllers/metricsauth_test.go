package controllers_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/tetra-messenger/tetra/controllers"
	"github.com/tetra-messenger/tetra/internal/operator/redistest"
)

// The operator's metrics, as main.go serves them (--metrics-secure, the
// default), answer only a bearer token the API server authenticates and
// authorizes for GET /metrics: none is 401, a ServiceAccount without the
// metrics-reader rule is 403, one bound to it reads the metrics. (Main
// uses the same controllers.MetricsOptions.)
func TestOperatorMetricsNeedAuthorizedToken(t *testing.T) {
	needEnv(t)
	t.Parallel()
	ns := newNamespace(t)
	port := redistest.FreePort(t)
	opts := controllers.MetricsOptions(fmt.Sprintf("127.0.0.1:%d", port), true)
	hc, err := rest.HTTPClientFor(restCfg)
	if err != nil {
		t.Fatal(err)
	}
	srv, err := metricsserver.NewServer(opts, restCfg, hc)
	if err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Start(c) }()
	t.Cleanup(func() { cancel(); <-done })

	cs := kubernetes.NewForConfigOrDie(restCfg)
	token := func(sa string) string {
		if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx(), sa, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	reader, stranger := token("prometheus"), token("stranger")
	role := &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: ns + "-metrics-reader"},
		Rules: []rbacv1.PolicyRule{{NonResourceURLs: []string{"/metrics"}, Verbs: []string{"get"}}}}
	binding := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: ns + "-metrics-reader"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role.Name},
		Subjects: []rbacv1.Subject{{Kind: "ServiceAccount", Name: "prometheus", Namespace: ns}}}
	for _, o := range []interface{ GetName() string }{role, binding} {
		var err error
		switch v := o.(type) {
		case *rbacv1.ClusterRole:
			_, err = cs.RbacV1().ClusterRoles().Create(ctx(), v, metav1.CreateOptions{})
		case *rbacv1.ClusterRoleBinding:
			_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx(), v, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}} // the certificate is self-signed
	get := func(tok string) (int, string) {
		req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("https://127.0.0.1:%d/metrics", port), nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		resp, err := client.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	waitFor(t, wait, "the metrics server to listen", func() (bool, string) {
		code, body := get("")
		return code != 0, body
	})
	if code, _ := get(""); code != http.StatusUnauthorized {
		t.Errorf("no token: %d, want 401", code)
	}
	// controller-runtime's filter answers a token the TokenReview rejects
	// with an error as 500 "Authentication failed": refused either way.
	if code, body := get("not-a-token"); (code != http.StatusUnauthorized && code != http.StatusInternalServerError) || strings.Contains(body, "tetra_operator") {
		t.Errorf("a bad token: %d %.80q, want it refused", code, body)
	}
	if code, _ := get(stranger); code != http.StatusForbidden {
		t.Errorf("a ServiceAccount without the metrics-reader rule: %d, want 403", code)
	}
	// RBAC bindings take effect when the authorizer's cache has them.
	waitFor(t, wait, "the bound ServiceAccount reads the metrics", func() (bool, string) {
		code, body := get(reader)
		return code == http.StatusOK && len(body) > 0 && strings.Contains(body, "tetra_operator_reconciles_total"), fmt.Sprintf("%d %.120s", code, body)
	})
}
