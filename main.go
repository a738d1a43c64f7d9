// Command manager is the tetra operator: it reconciles Messenger resources
// (api/v1alpha1) into the messenger workload. See docs/operator.md.
package main

import (
	"flag"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	tetrav1 "github.com/tetra-messenger/tetra/api/v1alpha1"
	"github.com/tetra-messenger/tetra/controllers"
	"github.com/tetra-messenger/tetra/internal/operator/redisid"
	"github.com/tetra-messenger/tetra/internal/version"
)

var scheme = runtime.NewScheme()

func init() {
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(tetrav1.AddToScheme(scheme))
}

func main() {
	var (
		metricsAddr   string
		probeAddr     string
		leaderElect   bool
		defaultImage  string
		redisPoll     time.Duration
		redisTimeout  time.Duration
		leaderElectNS string
		metricsSecure bool
		operatorNS    string
		rebuildGrace  time.Duration
	)
	flag.StringVar(&metricsAddr, "metrics-bind-address", ":8443", "address of the metrics endpoint (0 disables it)")
	flag.BoolVar(&metricsSecure, "metrics-secure", true, "serve the metrics over HTTPS (a self-signed certificate) behind authentication and authorization:\n"+
		"a scraper needs a bearer token whose subject may get the non-resource URL /metrics (kubebuilder's default);\n"+
		"false serves plain HTTP to anyone who reaches the address (bind it to loopback then, for example 127.0.0.1:8080)")
	flag.StringVar(&operatorNS, "operator-namespace", os.Getenv("POD_NAMESPACE"), "namespace of the operator's pods, admitted by a Messenger's spec.networkPolicy to the client port\n"+
		"(default $POD_NAMESPACE, set by the chart and config/manager; empty out of cluster: no such rule)")
	flag.StringVar(&probeAddr, "health-probe-bind-address", ":8081", "address of /healthz and /readyz")
	flag.BoolVar(&leaderElect, "leader-elect", false, "elect a leader so that only one replica reconciles (the chart and config/manager turn it on;\n"+
		"off by default, as kubebuilder's, so the manager runs out of cluster with no flags)")
	flag.StringVar(&leaderElectNS, "leader-election-namespace", "", "namespace of the leader lease (default: the pod's namespace)")
	flag.StringVar(&defaultImage, "default-image", version.WorkloadImage, "workload image for Messengers without spec.image")
	flag.DurationVar(&redisPoll, "redis-poll-interval", 10*time.Second, "mean interval between Redis identity probes (jittered by ±20%)")
	flag.DurationVar(&rebuildGrace, "rebuild-grace", controllers.DefaultRebuildGrace, "after a Redis failover, how long to keep asking the pods to rebuild (every 2 s) while one is not ready\n"+
		"or the call fails, before restarting them instead")
	flag.DurationVar(&redisTimeout, "redis-timeout", 2*time.Second, "timeout of each Redis or Sentinel call of a probe")
	opts := zap.Options{}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	log := ctrl.Log.WithName("setup")
	redisid.DiscardClientLogs()

	cfg := ctrl.GetConfigOrDie()
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme:                  scheme,
		Metrics:                 controllers.MetricsOptions(metricsAddr, metricsSecure),
		HealthProbeBindAddress:  probeAddr,
		LeaderElection:          leaderElect,
		LeaderElectionID:        "tetra-operator.tetra.dev",
		LeaderElectionNamespace: leaderElectNS,
		Cache:                   controllers.CacheOptions(),
	})
	if err != nil {
		log.Error(err, "create manager")
		os.Exit(1)
	}
	ctx := ctrl.SetupSignalHandler()
	r := &controllers.MessengerReconciler{
		Client:            mgr.GetClient(),
		APIReader:         mgr.GetAPIReader(),
		Scheme:            mgr.GetScheme(),
		Recorder:          mgr.GetEventRecorder("tetra-operator"),
		DefaultImage:      defaultImage,
		OperatorNamespace: operatorNS,
		RebuildGrace:      rebuildGrace,
		RedisPollInterval: redisPoll,
		Prober:            redisid.Prober{Timeout: redisTimeout},
	}
	if err := r.SetupWithManager(ctx, mgr); err != nil {
		log.Error(err, "set up controller")
		os.Exit(1)
	}
	if err := mgr.AddHealthzCheck("healthz", healthz.Ping); err != nil {
		log.Error(err, "health check")
		os.Exit(1)
	}
	if err := mgr.AddReadyzCheck("readyz", healthz.Ping); err != nil {
		log.Error(err, "ready check")
		os.Exit(1)
	}
	log.Info("starting manager", "version", version.Version, "defaultImage", defaultImage, "redisPollInterval", redisPoll, "leaderElection", leaderElect,
		"metricsAddr", metricsAddr, "metricsSecure", metricsSecure, "operatorNamespace", operatorNS)
	if err := mgr.Start(ctx); err != nil {
		log.Error(err, "manager stopped")
		os.Exit(1)
	}
}
