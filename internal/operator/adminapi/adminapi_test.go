package adminapi_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/tetra-messenger/tetra/internal/operator/adminapi"
	// Test-only: the contract check that the workload accepts the token
	// the operator mints. The operator itself never imports workload/auth.
	"github.com/tetra-messenger/tetra/workload/auth"
)

var secret = []byte("0123456789abcdef0123456789abcdef")

func TestMintedTokenIsAnAdminTokenForTheWorkload(t *testing.T) {
	now := time.Now()
	tok, err := adminapi.MintAdminToken(secret, now)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := auth.NewSigner(secret)
	if err != nil {
		t.Fatal(err)
	}
	if err := signer.VerifyAdmin(tok); err != nil {
		t.Fatalf("the workload refuses the operator's admin token: %v", err)
	}
	if _, err := signer.Verify(tok); err == nil {
		t.Fatal("the admin token also passes as a user token")
	}
	claims := jwt.MapClaims{}
	if _, err := jwt.ParseWithClaims(tok, claims, func(*jwt.Token) (any, error) { return secret, nil }); err != nil {
		t.Fatal(err)
	}
	exp, _ := claims.GetExpirationTime()
	if claims["sub"] != "admin" || claims["scope"] != "admin" || exp.Sub(now) > adminapi.TokenTTL+time.Second {
		t.Fatalf("claims %v", claims)
	}
	other, _ := auth.NewSigner([]byte("another-secret-of-enough-length"))
	if other.VerifyAdmin(tok) == nil {
		t.Fatal("a token signed with another secret verified")
	}
	if _, err := adminapi.MintAdminToken(nil, now); err == nil {
		t.Fatal("empty secret accepted")
	}
}

func pod(name, ip string, ready bool) corev1.Pod {
	st := corev1.ConditionFalse
	if ready {
		st = corev1.ConditionTrue
	}
	return corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: st}}},
	}
}

func TestReadyPods(t *testing.T) {
	done := pod("done", "", false)
	done.Status.Phase = corev1.PodSucceeded
	gone := pod("gone", "10.0.0.9", false)
	gone.DeletionTimestamp = &metav1.Time{Time: time.Now()}
	got, err := adminapi.ReadyPods([]corev1.Pod{pod("a", "10.0.0.1", true), done, gone, pod("b", "10.0.0.2", true)})
	if err != nil || len(got) != 2 {
		t.Fatalf("%v %v", got, err)
	}
	if _, err := adminapi.ReadyPods([]corev1.Pod{pod("a", "10.0.0.1", true), pod("c", "10.0.0.3", false)}); err == nil || !strings.Contains(err.Error(), "pod c") {
		t.Fatalf("a pod that is not ready must force a restart: %v", err)
	}
	if _, err := adminapi.ReadyPods(nil); err != adminapi.ErrNoReadyPods {
		t.Fatalf("no pods: %v", err)
	}
	if u := adminapi.PodURL(8080)(&[]corev1.Pod{pod("a", "fd00::1", true)}[0]); u != "http://[fd00::1]:8080/admin/rebuild" {
		t.Fatalf("url %s", u)
	}
}

func TestRebuildCallsEveryPod(t *testing.T) {
	signer, _ := auth.NewSigner(secret)
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		if r.Method != http.MethodPost || signer.VerifyAdmin(tok) != nil {
			http.Error(w, "no", http.StatusUnauthorized)
			return
		}
		calls.Add(1)
		if strings.HasPrefix(r.URL.Path, "/fail/") {
			http.Error(w, "index unavailable", http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte(`{"rebuilt":true}`))
	}))
	defer srv.Close()
	rb := adminapi.Rebuilder{URL: func(p *corev1.Pod) string { return srv.URL + "/" + p.Name + "/admin/rebuild" }}
	n, err := rb.Rebuild(context.Background(), []corev1.Pod{pod("a", "x", true), pod("b", "y", true)}, secret)
	if err != nil || n != 2 || calls.Load() != 2 {
		t.Fatalf("n=%d calls=%d err=%v", n, calls.Load(), err)
	}
	n, err = rb.Rebuild(context.Background(), []corev1.Pod{pod("a", "x", true), pod("fail", "y", true)}, secret)
	if err == nil || n != 1 || !strings.Contains(err.Error(), "pod fail") || !strings.Contains(err.Error(), "503") {
		t.Fatalf("a failing pod: n=%d err=%v", n, err)
	}
}
