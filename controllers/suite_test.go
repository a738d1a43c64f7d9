package controllers_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	tetrav1 "github.com/tetra-messenger/tetra/api/v1alpha1"
	"github.com/tetra-messenger/tetra/controllers"
	"github.com/tetra-messenger/tetra/internal/operator/adminapi"
	"github.com/tetra-messenger/tetra/internal/operator/redisid"
)

// One envtest environment (kube-apiserver + etcd) and one manager for the
// whole package; every test works in its own namespace.
var (
	k8s        client.Client
	reconciler *controllers.MessengerReconciler
	restCfg    *rest.Config
	skipReason string
	rebuilds   = &rebuildRouter{handlers: map[string]http.HandlerFunc{}}
	scheme     = runtime.NewScheme()
)

// pollInterval is the Redis poll of the test manager.
const pollInterval = 150 * time.Millisecond

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(tetrav1.AddToScheme(scheme))

	dir, err := envtestAssets()
	if err != nil {
		if os.Getenv("CI") == "true" {
			fmt.Fprintf(os.Stderr, "FAIL: envtest assets unavailable (CI=true: envtest suites may not skip): %v\n", err)
			return 1
		}
		skipReason = err.Error()
		fmt.Fprintf(os.Stderr, "\n*** SKIPPING the envtest suite of controllers: %v ***\n"+
			"*** run `make envtest-assets` once (builds kube-apiserver and etcd from the module proxy, ~6 min) ***\n\n", err)
		return m.Run()
	}

	ctrl.SetLogger(zap.New(zap.WriteTo(os.Stderr), zap.Level(zapLevel())))
	redisid.DiscardClientLogs()
	env := &envtest.Environment{
		CRDDirectoryPaths:     []string{filepath.Join("..", "config", "crd", "bases")},
		ErrorIfCRDPathMissing: true,
		BinaryAssetsDirectory: dir,
	}
	start := time.Now()
	cfg, err := env.Start()
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: start envtest from %s: %v\n", dir, err)
		return 1
	}
	defer env.Stop()
	restCfg = cfg
	fmt.Fprintf(os.Stderr, "envtest: kube-apiserver and etcd up in %v (%s)\n", time.Since(start).Round(time.Millisecond), dir)

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache:                  controllers.CacheOptions(),
		Controller:             config.Controller{SkipNameValidation: ptrTo(true)},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: manager: %v\n", err)
		return 1
	}
	srv := httptest.NewServer(rebuilds)
	defer srv.Close()
	reconciler = &controllers.MessengerReconciler{
		Client:            mgr.GetClient(),
		APIReader:         mgr.GetAPIReader(),
		Scheme:            mgr.GetScheme(),
		Recorder:          mgr.GetEventRecorder("tetra-operator"),
		DefaultImage:      "example.test/tetra:default",
		OperatorNamespace: operatorNamespace,
		// Short, so the restart fallback is seen within a test; long
		// enough for a test to make a pod ready after a failover.
		RebuildGrace:      rebuildGrace,
		RedisPollInterval: pollInterval,
		Prober:            redisid.Prober{Timeout: 500 * time.Millisecond},
		// envtest runs no pods: the rebuild call of a pod goes to the test
		// server, routed by the pod's namespace (one per test).
		Rebuilder: adminapi.Rebuilder{URL: func(p *corev1.Pod) string {
			return srv.URL + "/" + p.Namespace + "/" + p.Name + "/admin/rebuild"
		}},
		Health: adminapi.HealthReader{URL: func(p *corev1.Pod) string {
			return srv.URL + "/" + p.Namespace + "/" + p.Name + "/readyz"
		}},
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := reconciler.SetupWithManager(ctx, mgr); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: setup: %v\n", err)
		return 1
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		fmt.Fprintln(os.Stderr, "FAIL: cache did not sync")
		return 1
	}
	// Tests read through a direct client: what the API server has, not
	// what the manager's cache has seen yet.
	k8s, err = client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: client: %v\n", err)
		return 1
	}
	code := m.Run()
	cancel()
	if err := <-done; err != nil {
		fmt.Fprintf(os.Stderr, "manager: %v\n", err)
	}
	return code
}

func zapLevel() zapcore.Level {
	if os.Getenv("TETRA_TEST_VERBOSE") != "" {
		return -1
	}
	return 2 // errors only
}

// envtestAssets finds kube-apiserver and etcd: KUBEBUILDER_ASSETS, else the
// cache of hack/envtest-assets.sh; with CI=true (or TETRA_ENVTEST_BUILD=1)
// it runs the script, which builds them once on a fresh machine.
func envtestAssets() (string, error) {
	if dir := os.Getenv("KUBEBUILDER_ASSETS"); dir != "" {
		for _, b := range []string{"kube-apiserver", "etcd"} {
			if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
				return "", fmt.Errorf("KUBEBUILDER_ASSETS=%s lacks %s", dir, b)
			}
		}
		return dir, nil
	}
	script := filepath.Join("..", "hack", "envtest-assets.sh")
	if out, err := exec.Command("bash", script, "--if-present").Output(); err == nil {
		return strings.TrimSpace(string(out)), nil
	}
	if os.Getenv("CI") != "true" && os.Getenv("TETRA_ENVTEST_BUILD") != "1" {
		return "", errors.New("no KUBEBUILDER_ASSETS and no cached envtest binaries")
	}
	fmt.Fprintln(os.Stderr, "envtest: no cached binaries; building kube-apiserver and etcd once with hack/envtest-assets.sh (several minutes on a fresh machine)")
	cmd := exec.Command("bash", script)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("hack/envtest-assets.sh: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// needEnv skips (or, with CI=true, fails: TestMain already returned) a
// test when the environment could not start.
func needEnv(t *testing.T) {
	t.Helper()
	if skipReason != "" {
		t.Skip("SKIP: envtest unavailable: " + skipReason)
	}
}

// rebuildRouter serves POST /<namespace>/<pod>/admin/rebuild to the
// handler a test registered for its namespace.
type rebuildRouter struct {
	mu       sync.Mutex
	handlers map[string]http.HandlerFunc
}

func (r *rebuildRouter) handle(ns string, h http.HandlerFunc) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.handlers[ns] = h
}

func (r *rebuildRouter) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	ns, _, _ := strings.Cut(strings.TrimPrefix(req.URL.Path, "/"), "/")
	r.mu.Lock()
	h := r.handlers[ns]
	r.mu.Unlock()
	if h == nil {
		http.Error(w, "no handler for namespace "+ns, http.StatusNotFound)
		return
	}
	h(w, req)
}

func ptrTo[T any](v T) *T { return &v }

// operatorNamespace is the namespace the suite's operator says it runs in.
const operatorNamespace = "tetra-system"

// rebuildGrace is the suite's MessengerReconciler.RebuildGrace.
const rebuildGrace = 8 * time.Second

// newNamespace creates a namespace for one test.
func newNamespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "t-"}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}
