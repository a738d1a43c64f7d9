package realnode_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	goredis "github.com/redis/go-redis/v9"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/controller-runtime/pkg/client"

	tetrav1 "github.com/tetra-messenger/tetra/api/v1alpha1"
	"github.com/tetra-messenger/tetra/internal/operator/redistest"
	"github.com/tetra-messenger/tetra/internal/testenv"
	"github.com/tetra-messenger/tetra/internal/version"
	"github.com/tetra-messenger/tetra/workload/auth"
	wclient "github.com/tetra-messenger/tetra/workload/client"
	"github.com/tetra-messenger/tetra/workload/protocol"
)

const (
	repo      = "../.."
	ns        = "chat-e2e"
	opNS      = "tetra-system"
	pgRelay   = 15432 // on the node address, to 127.0.0.1:5432
	redisPort = 16379 // on the node address, to the test's Redis proxy
)

// node is the running cluster and what the steps share.
type node struct {
	t        *testing.T        // the current step's
	root     *testing.T        // the whole run's: what outlives a step is cleaned up with it
	env      map[string]string // from hack/realnode.sh env
	kubectl  string
	helm     string
	c        client.Client
	tetra    string // the tetra binary, for loadgen
	jwt      string // the current JWT secret
	redis    *testenv.Proxy
	redisA   *redistest.Server
	redisB   *redistest.Server // after the failover
	pgURL    string            // as the pods see it
	numbers  []string
	numberMu sync.Mutex
}

// record keeps a measured number for the summary at the end.
func (n *node) record(format string, args ...any) {
	n.numberMu.Lock()
	defer n.numberMu.Unlock()
	s := fmt.Sprintf(format, args...)
	n.numbers = append(n.numbers, s)
	n.t.Log("MEASURED: " + s)
}

func script(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.Command("bash", append([]string{filepath.Join(repo, "hack", "realnode.sh")}, args...)...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = os.Stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("hack/realnode.sh %s: %v", strings.Join(args, " "), err)
	}
	return out.String()
}

func (n *node) run(name string, args ...string) string {
	n.t.Helper()
	out, err := n.runE(name, args...)
	if err != nil {
		n.t.Fatalf("%s %s: %v\n%s", filepath.Base(name), strings.Join(args, " "), err, out)
	}
	return out
}

func (n *node) runE(name string, args ...string) (string, error) {
	cmd := exec.Command(name, args...)
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "KUBECONFIG="+n.env["KUBECONFIG"])
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (n *node) k(args ...string) string { n.t.Helper(); return n.run(n.kubectl, args...) }

// waitFor polls cond every 250 ms until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	last := ""
	for {
		ok, why := cond()
		if ok {
			return time.Since(start)
		}
		last = why
		if time.Since(start) > timeout {
			t.Fatalf("timed out after %v waiting for %s: %s", timeout, what, last)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func ctx() context.Context { return context.Background() }

func (n *node) messenger(name string) *tetrav1.Messenger {
	n.t.Helper()
	var m tetrav1.Messenger
	if err := n.c.Get(ctx(), types.NamespacedName{Namespace: ns, Name: name}, &m); err != nil {
		n.t.Fatalf("get messenger %s: %v", name, err)
	}
	return &m
}

func (n *node) pods(namespace, instance string) []corev1.Pod {
	n.t.Helper()
	var list corev1.PodList
	if err := n.c.List(ctx(), &list, client.InNamespace(namespace), client.MatchingLabels{"app.kubernetes.io/instance": instance}); err != nil {
		n.t.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range list.Items {
		if p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

func ready(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func cond(m *tetrav1.Messenger, typ string) metav1.Condition {
	if c := meta.FindStatusCondition(m.Status.Conditions, typ); c != nil {
		return *c
	}
	return metav1.Condition{Type: typ, Status: "Unknown"}
}

// waitSettled waits until the Messenger is Ready at its generation with
// exactly its replicas, all Ready, running image (when not empty).
func (n *node) waitSettled(name, image string, timeout time.Duration) (time.Duration, []corev1.Pod) {
	n.t.Helper()
	var pods []corev1.Pod
	took := waitFor(n.t, timeout, "Messenger "+name+" Ready", func() (bool, string) {
		m := n.messenger(name)
		r := cond(m, tetrav1.ConditionReady)
		pods = n.pods(ns, name)
		if m.Status.ObservedGeneration != m.Generation || r.Status != metav1.ConditionTrue {
			return false, fmt.Sprintf("gen %d/%d Ready %s %s: %s; Degraded %s", m.Status.ObservedGeneration, m.Generation, r.Status, r.Reason, r.Message, cond(m, tetrav1.ConditionDegraded).Message)
		}
		if int32(len(pods)) != *m.Spec.Replicas {
			return false, fmt.Sprintf("%d pods", len(pods))
		}
		for _, p := range pods {
			if !ready(&p) || (image != "" && p.Spec.Containers[0].Image != image) {
				return false, fmt.Sprintf("pod %s ready=%v image %s", p.Name, ready(&p), p.Spec.Containers[0].Image)
			}
		}
		return true, ""
	})
	return took, pods
}

func podURL(p corev1.Pod) string { return "http://" + p.Status.PodIP + ":8080" }

// podMetricsURL is a pod's metrics listener (the operator renders
// TETRA_METRICS_ADDR=:9090; /metrics is not on 8080 then).
func podMetricsURL(p corev1.Pod) string { return "http://" + p.Status.PodIP + ":9090" }

func (n *node) serviceURL(name string) string {
	n.t.Helper()
	var svc corev1.Service
	if err := n.c.Get(ctx(), types.NamespacedName{Namespace: ns, Name: name}, &svc); err != nil {
		n.t.Fatal(err)
	}
	url := "http://" + svc.Spec.ClusterIP + ":8080"
	// Ready pods are not yet a reachable Service: kube-proxy programs the
	// ClusterIP a moment after the EndpointSlice names them, and until then
	// a connection is refused (a CI run's load generator failed on its first
	// POST so). Wait until the Service itself answers.
	waitFor(n.t, time.Minute, "Service "+name+" to answer /readyz", func() (bool, string) {
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
	return url
}

func (n *node) token(user string) string {
	n.t.Helper()
	s, err := auth.NewSigner([]byte(n.jwt))
	if err != nil {
		n.t.Fatal(err)
	}
	tok, err := s.Issue(user, time.Hour)
	if err != nil {
		n.t.Fatal(err)
	}
	return tok
}

// loadgen runs `tetra loadgen --url urls` and returns its report; the run
// must pass (0 lost: loadgen exits non-zero otherwise).
func (n *node) loadgen(what string, urls []string, args ...string) map[string]string {
	n.t.Helper()
	rep, err := n.loadgenE(what, urls, args...)
	if err != nil {
		n.t.Fatal(err)
	}
	return rep
}

type loadResult struct {
	rep map[string]string
	err error
}

// loadgenE is loadgen for another goroutine: it reports instead of failing.
func (n *node) loadgenE(what string, urls []string, args ...string) (map[string]string, error) {
	cmd := exec.Command(n.tetra, append([]string{"loadgen", "--url", strings.Join(urls, ","), "--quiet"}, args...)...)
	cmd.Env = append(os.Environ(), "TETRA_JWT_SECRET="+n.jwt)
	out, err := cmd.CombinedOutput()
	rep := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if len(line) > 25 {
			rep[strings.TrimSpace(line[:24])] = strings.TrimSpace(line[24:])
		}
	}
	n.t.Logf("loadgen (%s):\n%s", what, out)
	if err != nil {
		return rep, fmt.Errorf("loadgen (%s) failed: %v", what, err)
	}
	if rep["lost"] != "0" {
		return rep, fmt.Errorf("loadgen (%s): lost %q, want 0", what, rep["lost"])
	}
	return rep, nil
}

func (n *node) goLoadgen(what string, urls []string, args ...string) chan loadResult {
	ch := make(chan loadResult, 1)
	go func() {
		rep, err := n.loadgenE(what, urls, args...)
		ch <- loadResult{rep, err}
	}()
	return ch
}

func (n *node) waitLoadgen(ch chan loadResult) map[string]string {
	n.t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			n.t.Fatal(r.err)
		}
		return r.rep
	case <-time.After(4 * time.Minute):
		n.t.Fatal("loadgen did not finish")
	}
	return nil
}

// prober sends GET path to url at rate requests per second, each on a new
// connection (so kube-proxy picks a pod per request), and counts failures.
type prober struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	samples    []string
	stop       chan struct{}
	done       chan struct{}
}

func startProber(url, token string, rate int) *prober {
	p := &prober{stop: make(chan struct{}), done: make(chan struct{})}
	hc := &http.Client{Timeout: 3 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var wg sync.WaitGroup
	go func() {
		defer close(p.done)
		tick := time.NewTicker(time.Second / time.Duration(rate))
		defer tick.Stop()
		for {
			select {
			case <-p.stop:
				wg.Wait()
				return
			case <-tick.C:
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				req, _ := http.NewRequest(http.MethodGet, url, nil)
				req.Header.Set("Authorization", "Bearer "+token)
				resp, err := hc.Do(req)
				if err == nil {
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						p.ok.Add(1)
						return
					}
					err = fmt.Errorf("HTTP %d", resp.StatusCode)
				}
				p.failed.Add(1)
				p.mu.Lock()
				if len(p.samples) < 10 {
					p.samples = append(p.samples, time.Now().Format("15:04:05.000")+" "+err.Error())
				}
				p.mu.Unlock()
			}()
		}
	}()
	return p
}

func (p *prober) finish() (ok, failed int64, samples []string) {
	close(p.stop)
	<-p.done
	return p.ok.Load(), p.failed.Load(), p.samples
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// lock serializes real-node runs on one machine (the bridge, ports and
// iptables are machine-wide).
func lock(t *testing.T) {
	f, err := os.OpenFile("/var/lock/tetra-realnode.lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		fmt.Fprintln(os.Stderr, "realnode: another real-node run holds /var/lock/tetra-realnode.lock; waiting for it")
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { f.Close() })
}

// skipOrFail skips loudly, or fails under CI=true.
func skipOrFail(t *testing.T, why string) {
	t.Helper()
	msg := "the real-node test cannot run here: " + why
	if testenv.InCI() {
		t.Fatalf("CI=true forbids skipping: %s", msg)
	}
	fmt.Fprintf(os.Stderr, "\n!!! %s: SKIPPED: %s\n!!! (needs root on Linux with cgroups, overlayfs and apt-get or podman/containerd/runc installed; see hack/realnode.sh)\n\n", t.Name(), msg)
	t.Skip(msg)
}

func TestRealNode(t *testing.T) {
	if testing.Short() && !testenv.InCI() {
		skipOrFail(t, "-short")
	}
	if os.Getenv("TETRA_REALNODE") == "0" && !testenv.InCI() {
		skipOrFail(t, "TETRA_REALNODE=0")
	}
	if out, err := exec.Command("bash", filepath.Join(repo, "hack", "realnode.sh"), "check").CombinedOutput(); err != nil {
		skipOrFail(t, strings.TrimSpace(string(out)))
	}
	lock(t)
	start := time.Now()
	n := &node{t: t, root: t}
	defer func() {
		t.Logf("real-node test: %v in all", time.Since(start).Round(time.Second))
		for _, s := range n.numbers {
			t.Log("  " + s)
		}
	}()

	// Stale state from an interrupted run is cleared first.
	script(t, "down")
	script(t, "deps")
	t0 := time.Now()
	script(t, "images")
	n.record("images built from the Dockerfile with podman in %v", time.Since(t0).Round(time.Second))
	t.Cleanup(func() { n.teardown() })
	t0 = time.Now()
	out := script(t, "up")
	n.record("node up (control plane, containerd, kubelet, kube-proxy) and Ready in %v", time.Since(t0).Round(time.Second))
	n.env = map[string]string{}
	for _, l := range strings.Split(out, "\n") {
		if k, v, ok := strings.Cut(l, "="); ok {
			n.env[k] = v
		}
	}
	n.kubectl = filepath.Join(n.env["NODE_BIN"], "kubectl")
	n.helm = filepath.Join(n.env["NODE_BIN"], "helm")
	cfg, err := clientcmd.BuildConfigFromFlags("", n.env["KUBECONFIG"])
	if err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(tetrav1.AddToScheme(scheme))
	if n.c, err = client.New(cfg, client.Options{Scheme: scheme}); err != nil {
		t.Fatal(err)
	}
	n.tetra = testenv.TetraBinary(t)
	defer testenv.RemoveBinary()

	n.backing()
	steps := []struct {
		name string
		fn   func()
	}{
		{"helm-install", n.helmInstall},
		{"sample-ready", n.sampleReady},
		{"conversation-and-load", n.conversationAndLoad},
		{"live-tuning", n.liveTuning},
		{"image-roll", n.imageRoll},
		{"secret-rotation", n.secretRotation},
		{"redis-failover", n.redisFailover},
		{"broken-image", n.brokenImage},
		{"crash-loop", n.crashLoop},
		{"key-prefix", n.keyPrefix},
		{"deletion", n.deletion},
		{"sentinel-failover", n.sentinelFailover},
		{"pod-loss", n.podLoss},
		{"kustomize", n.kustomize},
	}
	for _, s := range steps {
		t0 := time.Now()
		ok := t.Run(s.name, func(t *testing.T) {
			prev := n.t
			n.t = t
			defer func() { n.t = prev }()
			s.fn()
		})
		t.Logf("step %s: %v (%v)", s.name, map[bool]string{true: "ok", false: "FAILED"}[ok], time.Since(t0).Round(time.Second))
		if !ok {
			n.dumpState()
			t.FailNow()
		}
	}
}

// backing: a PostgreSQL database of the test's own, a Redis server of its
// own behind a proxy (the stable address a failover replaces the server
// behind), and relays on the node address so pods reach both.
func (n *node) backing() {
	t := n.t
	admin := "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	db := "tetra_node_" + randomHex(4)
	conn, err := pgx.Connect(ctx(), admin)
	if err != nil {
		skipOrFail(t, "PostgreSQL on 127.0.0.1:5432: "+err.Error())
	}
	if _, err := conn.Exec(ctx(), "CREATE DATABASE "+db); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx())
	t.Cleanup(func() {
		c, err := pgx.Connect(ctx(), admin)
		if err == nil {
			_, _ = c.Exec(ctx(), "DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
			c.Close(ctx())
		}
	})
	n.pgURL = fmt.Sprintf("postgres://postgres@%s:%d/%s?sslmode=disable", n.env["NODE_IP"], pgRelay, db)
	redistest.Available(t)
	n.redisA = redistest.Start(t, 0)
	n.redis = testenv.NewProxy(t, n.redisA.Addr())
	_, port, _ := strings.Cut(n.redis.Addr(), ":")
	script(t, "relay", "pg", strconv.Itoa(pgRelay), "5432")
	script(t, "relay", "redis", strconv.Itoa(redisPort), port)
}

func (n *node) helmInstall() {
	t0 := time.Now()
	n.run(n.helm, "install", "tetra", "charts/tetra-operator", "-n", opNS, "--create-namespace",
		"--set", "redis.pollInterval=2s", "--wait", "--timeout", "3m")
	n.record("operator installed with Helm and Ready in %v", time.Since(t0).Round(time.Second))
	var dep appsv1.Deployment
	if err := n.c.Get(ctx(), types.NamespacedName{Namespace: opNS, Name: "tetra-tetra-operator"}, &dep); err != nil {
		n.t.Fatal(err)
	}
	if img := dep.Spec.Template.Spec.Containers[0].Image; img != version.OperatorImage {
		n.t.Errorf("operator image %s, want %s", img, version.OperatorImage)
	}
}

// secrets creates (or replaces) the three Secrets of the sample.
func (n *node) secrets() {
	redisURL := fmt.Sprintf("redis://%s:%d/0", n.env["NODE_IP"], redisPort)
	for name, kv := range map[string]string{"tetra-postgres": "url=" + n.pgURL, "tetra-redis": "url=" + redisURL, "tetra-jwt": "secret=" + n.jwt} {
		y := n.k("create", "secret", "generic", name, "-n", ns, "--from-literal="+kv, "--dry-run=client", "-o", "yaml")
		n.apply(y)
	}
}

func (n *node) apply(yaml string) {
	n.t.Helper()
	cmd := exec.Command(n.kubectl, "apply", "-f", "-")
	cmd.Env = append(os.Environ(), "KUBECONFIG="+n.env["KUBECONFIG"])
	cmd.Stdin = strings.NewReader(yaml)
	if out, err := cmd.CombinedOutput(); err != nil {
		n.t.Fatalf("kubectl apply: %v\n%s\n%s", err, out, yaml)
	}
}

// sampleReady: the PostgreSQL sample, as shipped, in a namespace with its
// Secrets; its pods come up Ready as the image's non-root user, with a
// read-only root and no ServiceAccount token.
func (n *node) sampleReady() {
	t := n.t
	n.k("create", "namespace", ns)
	n.jwt = randomHex(24)
	n.secrets()
	t0 := time.Now()
	n.k("apply", "-n", ns, "-f", "config/samples/tetra_v1alpha1_messenger_postgres.yaml")
	took, pods := n.waitSettled("chat", version.WorkloadImage, 4*time.Minute)
	n.record("sample Messenger (2 replicas) Ready %v after kubectl apply", took.Round(time.Second))
	_ = t0
	for _, p := range pods {
		c := p.Spec.Containers[0]
		if *p.Spec.SecurityContext.RunAsUser != 65532 || !*c.SecurityContext.ReadOnlyRootFilesystem || c.ImagePullPolicy != corev1.PullIfNotPresent {
			t.Errorf("pod %s: user %d, read-only root %v, pull %s", p.Name, *p.Spec.SecurityContext.RunAsUser, *c.SecurityContext.ReadOnlyRootFilesystem, c.ImagePullPolicy)
		}
		for _, v := range p.Spec.Volumes {
			if v.Projected != nil {
				t.Errorf("pod %s mounts a projected ServiceAccount token volume %s", p.Name, v.Name)
			}
		}
		if p.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("pod %s restarted %d times", p.Name, p.Status.ContainerStatuses[0].RestartCount)
		}
	}
	m := n.messenger("chat")
	if m.Status.KeyPrefix != "tetra:"+ns+"/chat:" || m.Status.Image != version.WorkloadImage || m.Status.Redis == nil {
		t.Errorf("status %+v", m.Status)
	}
	wide := n.k("get", "messengers", "-n", ns, "-o", "wide")
	t.Logf("kubectl get messengers -o wide:\n%s", wide)
	for _, want := range []string{"IMAGE", "CONFIG", "OBSERVED", version.WorkloadImage, m.Status.ConfigHash, "tetra:" + ns + "/chat:"} {
		if !strings.Contains(wide, want) {
			t.Errorf("kubectl get messengers -o wide lacks %q", want)
		}
	}
}

// conversationAndLoad: alice on one pod, bob on the other, a message each
// way; then `tetra loadgen --url` across the two pods.
func (n *node) conversationAndLoad() {
	t := n.t
	pods := n.pods(ns, "chat")
	if len(pods) != 2 || pods[0].Status.PodIP == pods[1].Status.PodIP {
		t.Fatalf("want 2 pods with their own IPs: %d", len(pods))
	}
	got := make(chan protocol.Message, 4)
	dial := func(url, user string) *wclient.Client {
		c, err := wclient.Dial(ctx(), wclient.Config{URL: url, Token: n.token(user), OnMessage: func(m protocol.Message) { got <- m }})
		if err != nil {
			t.Fatalf("%s on %s: %v", user, url, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	alice := dial(podURL(pods[0]), "alice")
	bob := dial(podURL(pods[1]), "bob")
	chat, err := alice.CreateDirect(ctx(), "bob")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		from *wclient.Client
		to   string
		body string
	}{{alice, "bob", "hi bob, from " + pods[0].Name}, {bob, "alice", "hi alice, from " + pods[1].Name}} {
		acc, err := s.from.Send(ctx(), chat.ChatID, s.body)
		if err != nil {
			t.Fatal(err)
		}
		select {
		case m := <-got:
			if m.MessageID != acc.MessageID || m.Body != s.body {
				t.Fatalf("%s got %+v, want %s", s.to, m, acc.MessageID)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not receive %q across pods", s.to, s.body)
		}
	}
	alice.Close()
	bob.Close()
	rep := n.loadgen("across two pods", []string{podURL(pods[0]), podURL(pods[1])},
		"--clients", "40", "--rate", "100", "--duration", "15s")
	n.record("loadgen --url across 2 pods, 40 clients, 100 msg/s, 15 s: accepted %s, lost %s, deliveries/accepted %s, latency %s",
		rep["accepted"], rep["lost"], rep["deliveries/accepted"], rep["latency p50/p99/p99.9"])
}

// metric reads one counter from a pod's /metrics.
func metric(url, name string) (float64, error) {
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == name {
			return strconv.ParseFloat(f[1], 64)
		}
	}
	return 0, fmt.Errorf("%s not in %s/metrics", name, url)
}

// liveTuning: maxDeliveryAttempts changes on the Messenger; every pod
// reloads it with no restart, and the delay is measured.
func (n *node) liveTuning() {
	t := n.t
	before := n.pods(ns, "chat")
	reloads := map[string]float64{}
	for _, p := range before {
		v, err := metric(podMetricsURL(p), "tetra_tuning_reloads_total")
		if err != nil {
			t.Fatal(err)
		}
		reloads[p.Name] = v
	}
	t0 := time.Now()
	n.k("patch", "messenger", "chat", "-n", ns, "--type", "merge", "-p", `{"spec":{"delivery":{"maxDeliveryAttempts":5}}}`)
	var slowest time.Duration
	for _, p := range before {
		took := waitFor(t, 3*time.Minute, "pod "+p.Name+" to reload its tuning", func() (bool, string) {
			v, err := metric(podMetricsURL(p), "tetra_tuning_reloads_total")
			return err == nil && v > reloads[p.Name], fmt.Sprintf("%v %v", v, err)
		})
		if d := time.Since(t0); d > slowest {
			slowest = d
		}
		_ = took
	}
	n.record("live tuning (maxDeliveryAttempts 3 -> 5) applied in every pod %v after kubectl patch (tuning-hash annotation)", slowest.Round(100*time.Millisecond))
	if cm := n.k("get", "configmap", "chat-tuning", "-n", ns, "-o", "jsonpath={.data.maxDeliveryAttempts}"); cm != "5" {
		t.Errorf("ConfigMap maxDeliveryAttempts %q", cm)
	}
	after := n.pods(ns, "chat")
	if len(after) != len(before) {
		t.Fatalf("pods %d -> %d", len(before), len(after))
	}
	for i := range after {
		if after[i].UID != before[i].UID || after[i].Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("pod %s replaced or restarted by a hot setting", after[i].Name)
		}
	}

	// The same without the annotation, for comparison: the Messenger
	// paused (the operator writes nothing), the ConfigMap edited by hand,
	// and only the kubelet's periodic sync to carry it to the pods.
	for _, p := range after {
		v, err := metric(podMetricsURL(p), "tetra_tuning_reloads_total")
		if err != nil {
			t.Fatal(err)
		}
		reloads[p.Name] = v
	}
	n.k("annotate", "messenger", "chat", "-n", ns, tetrav1.PausedAnnotation+"=true")
	waitFor(t, 30*time.Second, "Paused", func() (bool, string) {
		c := cond(n.messenger("chat"), tetrav1.ConditionProgressing)
		return c.Reason == "Paused", c.Reason
	})
	t0 = time.Now()
	n.k("patch", "configmap", "chat-tuning", "-n", ns, "--type", "merge", "-p", `{"data":{"maxPending":"25"}}`)
	slowest, fastest := time.Duration(0), time.Hour
	for _, p := range after {
		waitFor(t, 3*time.Minute, "pod "+p.Name+" to reload the hand-edited ConfigMap", func() (bool, string) {
			v, err := metric(podMetricsURL(p), "tetra_tuning_reloads_total")
			return err == nil && v > reloads[p.Name], fmt.Sprintf("%v %v", v, err)
		})
		d := time.Since(t0)
		slowest, fastest = max(slowest, d), min(fastest, d)
	}
	n.record("without the annotation (Messenger paused, ConfigMap edited by hand): the pods saw it %v to %v later (the kubelet's periodic sync)",
		fastest.Round(time.Second), slowest.Round(time.Second))
	n.k("annotate", "messenger", "chat", "-n", ns, tetrav1.PausedAnnotation+"-")
	waitFor(t, time.Minute, "the operator to restore the ConfigMap from the spec", func() (bool, string) {
		v := n.k("get", "configmap", "chat-tuning", "-n", ns, "-o", "jsonpath={.data.maxPending}")
		return v == "20", v
	})
}

// imageRoll: a new image tag rolls the pods while ~100 requests/s go
// through the Service and loadgen's clients ride the roll: no failed
// request, nothing lost.
func (n *node) imageRoll() {
	t := n.t
	newImage := version.WorkloadImage + "-roll"
	script(t, "load", version.WorkloadImage, newImage)
	svc := n.serviceURL("chat")
	p := startProber(svc+"/api/chats", n.token("prober"), 100)
	lg := n.goLoadgen("through the Service during the roll", []string{svc}, "--clients", "20", "--rate", "50", "--duration", "75s", "--drain", "60s")
	time.Sleep(3 * time.Second)
	t0 := time.Now()
	n.k("patch", "messenger", "chat", "-n", ns, "--type", "merge", "-p", fmt.Sprintf(`{"spec":{"image":%q}}`, newImage))
	took, _ := n.waitSettled("chat", newImage, 4*time.Minute)
	time.Sleep(3 * time.Second)
	ok, failed, samples := p.finish()
	n.record("image roll (2 pods, maxSurge 1): Ready on the new image %v after the patch; %d requests ok, %d failed at ~100 requests/s through the Service",
		took.Round(time.Second), ok, failed)
	_ = t0
	if failed != 0 {
		t.Errorf("%d requests failed during the roll: %v", failed, samples)
	}
	rep := n.waitLoadgen(lg)
	n.record("loadgen through the Service across the roll: accepted %s, lost %s, reconnects %s", rep["accepted"], rep["lost"], rep["reconnects"])
}

// secretRotation: a new JWT secret rolls the pods; tokens signed with it
// work, tokens signed with the old one do not.
func (n *node) secretRotation() {
	t := n.t
	old := n.token("alice")
	hash := n.messenger("chat").Status.ConfigHash
	n.jwt = randomHex(24)
	n.secrets()
	waitFor(t, time.Minute, "a new config hash", func() (bool, string) {
		h := n.messenger("chat").Status.ConfigHash
		return h != hash, h
	})
	took, pods := n.waitSettled("chat", "", 4*time.Minute)
	n.record("Secret rotation: rolled and Ready in %v", took.Round(time.Second))
	for _, p := range pods {
		for tok, want := range map[string]int{n.token("alice"): 200, old: 401} {
			req, _ := http.NewRequest(http.MethodGet, podURL(p)+"/api/chats", nil)
			req.Header.Set("Authorization", "Bearer "+tok)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != want {
				t.Errorf("pod %s: %d for a token, want %d", p.Name, resp.StatusCode, want)
			}
		}
	}
}

// redisFailover: under load, the Redis the pods use is replaced behind its
// stable address by a server with another identity. The operator sees the
// new run_id twice, records the failover and has every pod rebuild (or
// restarts them); loadgen loses nothing.
func (n *node) redisFailover() {
	t := n.t
	before := n.messenger("chat").Status.Redis
	if before == nil {
		t.Fatal("no status.redis before the failover")
	}
	pods := n.pods(ns, "chat")
	lg := n.goLoadgen("across the Redis failover", []string{podURL(pods[0]), podURL(pods[1])},
		"--clients", "40", "--rate", "100", "--duration", "40s", "--drain", "60s")
	time.Sleep(10 * time.Second)
	b := redistest.Start(n.root, 0) // serves the steps after this one too
	n.redisB = b
	t0 := time.Now()
	n.redis.Retarget(b.Addr()) // new connections to b, old ones dropped
	n.redisA.Stop()
	var m *tetrav1.Messenger
	took := waitFor(t, 2*time.Minute, "the operator to handle the failover", func() (bool, string) {
		m = n.messenger("chat")
		r := m.Status.Redis
		return r != nil && r.Epoch == before.Epoch+1 && m.Status.LastRebuild != nil && m.Status.LastRebuild.Epoch == r.Epoch,
			fmt.Sprintf("redis %+v rebuild %+v", r, m.Status.LastRebuild)
	})
	runID, _ := b.Info("run_id")
	if m.Status.Redis.RunID != runID {
		t.Errorf("status.redis.runID %s, want the new server's %s", m.Status.Redis.RunID, runID)
	}
	n.record("Redis failover: handled %v after the switch (method %s, %d pods, epoch %d)",
		took.Round(100*time.Millisecond), m.Status.LastRebuild.Method, m.Status.LastRebuild.Pods, m.Status.Redis.Epoch)
	_ = t0
	want := "WatermarkRebuildRequested"
	if m.Status.LastRebuild.Method == "Restart" {
		want = "RolloutTriggered"
	}
	// The operator's event recorder sends events in the background, so
	// an event may land after the status that reports the rebuild (a CI
	// run listed them 0 s after it and lacked WatermarkRebuildRequested).
	seen := map[string]bool{}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(500 * time.Millisecond) {
		var list eventsv1.EventList
		if err := n.c.List(ctx(), &list, client.InNamespace(ns)); err != nil {
			t.Fatal(err)
		}
		for _, e := range list.Items {
			seen[e.Reason] = true
		}
		if seen["RedisFailoverDetected"] && seen[want] {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("events %v lack RedisFailoverDetected or %s after 30 s", seen, want)
			break
		}
	}
	if m.Status.LastRebuild.Method == "Endpoint" && m.Status.LastRebuild.Pods != 2 {
		t.Errorf("rebuild in %d pods, want 2", m.Status.LastRebuild.Pods)
	}
	rep := n.waitLoadgen(lg)
	n.record("loadgen across the Redis failover: accepted %s, lost %s, deliveries/accepted %s, duplicates %s",
		rep["accepted"], rep["lost"], rep["deliveries/accepted"], rep["duplicates"])
	n.waitSettled("chat", "", 4*time.Minute)
}

// brokenImage: an image that cannot be pulled shows as Degraded
// ImagePullFailed naming the pod within 60 s; the old pods keep serving;
// restoring the image clears it.
func (n *node) brokenImage() {
	t := n.t
	good := n.messenger("chat").Spec.Image
	broken := "127.0.0.1:5/tetra/broken:0" // a registry address on loopback where nothing listens
	t0 := time.Now()
	n.k("patch", "messenger", "chat", "-n", ns, "--type", "merge", "-p", fmt.Sprintf(`{"spec":{"image":%q}}`, broken))
	var c metav1.Condition
	took := waitFor(t, 90*time.Second, "Degraded ImagePullFailed", func() (bool, string) {
		c = cond(n.messenger("chat"), tetrav1.ConditionDegraded)
		return c.Status == metav1.ConditionTrue && c.Reason == "ImagePullFailed", fmt.Sprintf("%+v", c)
	})
	n.record("broken image: Degraded=True ImagePullFailed %v after the patch: %q", took.Round(100*time.Millisecond), c.Message)
	if took > 60*time.Second {
		t.Errorf("Degraded took %v, want within 60 s", took)
	}
	if !strings.Contains(c.Message, "pod chat-") || !strings.Contains(c.Message, broken) {
		t.Errorf("Degraded message %q names no pod or image", c.Message)
	}
	m := n.messenger("chat")
	// The surge pod counts as updated although it never starts: 2 old
	// pods ready, 1 of 2 on the new config.
	if r := cond(m, tetrav1.ConditionReady); r.Status != metav1.ConditionFalse || r.Reason != "RollingOut" ||
		!strings.Contains(r.Message, "2 of 2 replicas ready, but only 1 of 2 run config") {
		t.Errorf("Ready %+v while the new image cannot be pulled", r)
	}
	ready := 0
	for _, p := range n.pods(ns, "chat") {
		if p.Spec.Containers[0].Image == good && isReady(p) {
			ready++
		}
	}
	if ready != 2 {
		t.Errorf("%d old pods still serving, want 2 (maxUnavailable 0)", ready)
	}
	_ = t0
	n.k("patch", "messenger", "chat", "-n", ns, "--type", "merge", "-p", fmt.Sprintf(`{"spec":{"image":%q}}`, good))
	n.waitSettled("chat", good, 4*time.Minute)
	waitFor(t, time.Minute, "Degraded cleared", func() (bool, string) {
		c := cond(n.messenger("chat"), tetrav1.ConditionDegraded)
		return c.Status == metav1.ConditionFalse, c.Message
	})
}

func isReady(p corev1.Pod) bool { return ready(&p) }

// crashLoop: a Messenger whose PostgreSQL cannot be reached crash-loops;
// Degraded says CrashLooping and quotes the workload's last log line (the
// termination message), naming the pod.
func (n *node) crashLoop() {
	t := n.t
	y := n.k("create", "secret", "generic", "tetra-postgres-bad", "-n", ns,
		"--from-literal=url=postgres://postgres@127.0.0.1:1/nothing?sslmode=disable", "--dry-run=client", "-o", "yaml")
	n.apply(y)
	t0 := time.Now()
	n.apply(fmt.Sprintf(`apiVersion: tetra.dev/v1alpha1
kind: Messenger
metadata: {name: crashy, namespace: %s}
spec:
  replicas: 1
  postgresql: {secretRef: {name: tetra-postgres-bad}}
  jwt: {secretRef: {name: tetra-jwt}}
`, ns))
	var c metav1.Condition
	took := waitFor(t, 2*time.Minute, "Degraded CrashLooping", func() (bool, string) {
		c = cond(n.messenger("crashy"), tetrav1.ConditionDegraded)
		return c.Status == metav1.ConditionTrue && c.Reason == "CrashLooping", fmt.Sprintf("%+v", c)
	})
	n.record("crash loop (PostgreSQL unreachable): Degraded=True CrashLooping %v after the apply: %q", took.Round(100*time.Millisecond), c.Message)
	_ = t0
	if !strings.Contains(c.Message, "pod crashy-") || !strings.Contains(c.Message, "PostgreSQL") {
		t.Errorf("Degraded message %q names no pod or no cause", c.Message)
	}
	if r := cond(n.messenger("crashy"), tetrav1.ConditionReady); r.Status != metav1.ConditionFalse {
		t.Errorf("Ready %+v while crash-looping", r)
	}
	n.k("delete", "messenger", "crashy", "-n", ns, "--wait=true", "--timeout=2m")
}

// keys lists the Redis keys under prefix on the current server.
func (n *node) keys(prefix string) []string {
	n.t.Helper()
	c := goredis.NewClient(&goredis.Options{Addr: n.redisB.Addr()})
	defer c.Close()
	var out []string
	iter := c.Scan(ctx(), 0, prefix+"*", 1000).Iterator()
	for iter.Next(ctx()) {
		out = append(out, iter.Val())
	}
	if err := iter.Err(); err != nil {
		n.t.Fatal(err)
	}
	return out
}

// keyPrefix: a new spec.redis.keyPrefix replaces the pods (Recreate: pods
// of two prefixes may not share the database, and a rolling update would
// wait forever for a new pod that refuses to start), then rolling updates
// again; the keys move to the new prefix, and the old prefix's keys can be
// selected by a plain SCAN pattern.
func (n *node) keyPrefix() {
	t := n.t
	old := n.messenger("chat").Status.KeyPrefix
	if len(n.keys(old)) == 0 {
		t.Fatalf("no Redis key under %q", old)
	}
	n.k("patch", "messenger", "chat", "-n", ns, "--type", "merge", "-p", `{"spec":{"redis":{"keyPrefix":"e2e:chat:"}}}`)
	took, pods := n.waitSettled("chat", "", 4*time.Minute)
	var dep appsv1.Deployment
	waitFor(t, time.Minute, "RollingUpdate again", func() (bool, string) {
		if err := n.c.Get(ctx(), types.NamespacedName{Namespace: ns, Name: "chat"}, &dep); err != nil {
			return false, err.Error()
		}
		return dep.Spec.Strategy.Type == appsv1.RollingUpdateDeploymentStrategyType, string(dep.Spec.Strategy.Type)
	})
	n.record("key prefix change: pods replaced and Ready in %v, then RollingUpdate again", took.Round(time.Second))
	for _, p := range pods {
		found := false
		for _, e := range p.Spec.Containers[0].Env {
			found = found || (e.Name == "TETRA_INDEX_PREFIX" && e.Value == "e2e:chat:")
		}
		if !found || p.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("pod %s: prefix env %v, restarts %d", p.Name, found, p.Status.ContainerStatuses[0].RestartCount)
		}
	}
	waitFor(t, 30*time.Second, "keys under the new prefix", func() (bool, string) {
		k := n.keys("e2e:chat:")
		return len(k) > 0, fmt.Sprint(len(k))
	})
	if m := n.messenger("chat"); m.Status.KeyPrefix != "e2e:chat:" {
		t.Errorf("status.keyPrefix %q", m.Status.KeyPrefix)
	}
	rep := n.loadgen("after the prefix change", []string{podURL(pods[0]), podURL(pods[1])}, "--clients", "20", "--rate", "50", "--duration", "5s")
	n.record("loadgen after the prefix change: accepted %s, lost %s", rep["accepted"], rep["lost"])
}

// deletion: deleting the Messenger garbage-collects its children and pods.
func (n *node) deletion() {
	t := n.t
	n.k("delete", "messenger", "chat", "-n", ns, "--wait=true", "--timeout=2m")
	took := waitFor(t, 2*time.Minute, "children and pods gone", func() (bool, string) {
		var left []string
		for name, o := range map[string]client.Object{"Deployment": &appsv1.Deployment{}, "Service": &corev1.Service{}} {
			if err := n.c.Get(ctx(), types.NamespacedName{Namespace: ns, Name: "chat"}, o); !apierrors.IsNotFound(err) {
				left = append(left, name)
			}
		}
		if err := n.c.Get(ctx(), types.NamespacedName{Namespace: ns, Name: "chat-tuning"}, &corev1.ConfigMap{}); !apierrors.IsNotFound(err) {
			left = append(left, "ConfigMap")
		}
		var pods corev1.PodList
		_ = n.c.List(ctx(), &pods, client.InNamespace(ns))
		if len(pods.Items) > 0 {
			left = append(left, fmt.Sprintf("%d pods", len(pods.Items)))
		}
		return len(left) == 0, strings.Join(left, ", ")
	})
	n.record("deletion: children and pods garbage-collected %v after the Messenger went", took.Round(time.Second))
}

// kustomize: the operator once more from config/default instead of Helm,
// with a one-replica Messenger.
func (n *node) kustomize() {
	t := n.t
	n.run(n.helm, "uninstall", "tetra", "-n", opNS, "--wait", "--timeout", "2m")
	n.k("delete", "namespace", opNS, "--wait=true", "--timeout=2m")
	t0 := time.Now()
	n.k("apply", "--server-side", "--force-conflicts", "-k", "config/default")
	n.k("rollout", "status", "deployment/tetra-operator-controller-manager", "-n", opNS, "--timeout=3m")
	n.record("operator installed with kustomize (config/default) and rolled out in %v", time.Since(t0).Round(time.Second))
	n.apply(fmt.Sprintf(`apiVersion: tetra.dev/v1alpha1
kind: Messenger
metadata: {name: solo, namespace: %s}
spec:
  replicas: 1
  postgresql: {secretRef: {name: tetra-postgres}}
  redis: {secretRef: {name: tetra-redis}}
  jwt: {secretRef: {name: tetra-jwt}}
`, ns))
	took, pods := n.waitSettled("solo", version.WorkloadImage, 4*time.Minute)
	n.record("kustomize install: a one-replica Messenger Ready in %v", took.Round(time.Second))
	resp, err := http.Get(podURL(pods[0]) + "/readyz")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("solo /readyz: %v %v", err, resp)
	}
	resp.Body.Close()
	n.k("delete", "messenger", "solo", "-n", ns, "--wait=true", "--timeout=2m")
	n.k("delete", "-k", "config/default", "--wait=true", "--timeout=3m")
}

// dumpState logs what a person would look at after a failed step.
func (n *node) dumpState() {
	t := n.t
	for _, args := range [][]string{
		{"get", "nodes,pods,deployments,replicasets,services,endpointslices", "-A", "-o", "wide"},
		{"get", "messengers", "-A", "-o", "yaml"},
		{"get", "events", "-A", "--sort-by=.lastTimestamp"},
		{"logs", "-n", opNS, "-l", "app.kubernetes.io/name=tetra-operator", "--tail=60"},
		{"logs", "-n", ns, "-l", "app.kubernetes.io/name=tetra", "--tail=30", "--prefix"},
	} {
		out, _ := n.runE(n.kubectl, args...)
		t.Logf("kubectl %s:\n%s", strings.Join(args, " "), out)
	}
}

var nsGone = regexp.MustCompile(`(?i)not ?found`)

// teardown deletes the namespaces while the kubelet still runs (so it
// stops the pods and their networking), then brings the node down.
func (n *node) teardown() {
	if n.kubectl != "" {
		for _, namespace := range []string{ns, opNS} {
			out, err := n.runE(n.kubectl, "delete", "namespace", namespace, "--wait=true", "--timeout=2m")
			if err != nil && !nsGone.MatchString(out) {
				n.t.Logf("delete namespace %s: %v %s", namespace, err, out)
			}
		}
	}
	cmd := exec.Command("bash", filepath.Join(repo, "hack", "realnode.sh"), "down")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		n.t.Errorf("hack/realnode.sh down: %v", err)
	}
}

// sentinelMessenger is the Messenger of the Sentinel and pod-loss steps; its
// requests are small so its pods fit beside the operator on 2 cores.
const sentinelMessenger = "chat-s"

// failoverEvents counts the RedisFailoverDetected Events of one Messenger
// and returns their notes.
func (n *node) failoverEvents(name string) []string {
	n.t.Helper()
	var list eventsv1.EventList
	if err := n.c.List(ctx(), &list, client.InNamespace(ns)); err != nil {
		n.t.Fatal(err)
	}
	var out []string
	for _, e := range list.Items {
		if e.Regarding.Name == name && e.Reason == "RedisFailoverDetected" {
			out = append(out, e.Note)
		}
	}
	sort.Strings(out)
	return out
}

// sentinelFailover: a Redis master, a replica and three Sentinels as host
// processes (bound to loopback and the node address, announcing the node
// address, so what the Sentinels hand out is reachable from the pods and
// the operator), a two-replica Messenger with spec.redis.sentinel, load
// through the Service, then SENTINEL FAILOVER and a SIGKILL of the master
// Sentinel promoted. Each is handled once (one epoch step, one
// RedisFailoverDetected, kind promotion) by the rebuild endpoint in every
// pod, no restart; the load loses nothing, deliveries per accepted stay at
// most 1.02 and no prompt client is withdrawn.
func (n *node) sentinelFailover() {
	t := n.t
	ip := n.env["NODE_IP"]
	bind := "127.0.0.1 " + ip
	master := redistest.Start(n.root, 0, "--bind", bind, "--replica-announce-ip", ip) // announced once it follows the other
	replica := redistest.Start(n.root, 0, "--bind", bind, "--replicaof", ip, strconv.Itoa(master.Port), "--replica-announce-ip", ip)
	waitFor(t, 30*time.Second, "the replica in sync", func() (bool, string) {
		v, err := replica.Info("master_link_status")
		return v == "up", fmt.Sprint(v, err)
	})
	var sentinels []*redistest.Server
	var addrs []string
	for range 3 {
		s := redistest.StartSentinelWith(n.root, redistest.SentinelOptions{Name: "mymaster", MasterAddr: ip + ":" + strconv.Itoa(master.Port),
			Quorum: 2, DownAfter: 5 * time.Second, Bind: []string{"127.0.0.1", ip}, AnnounceIP: ip})
		sentinels = append(sentinels, s)
		addrs = append(addrs, ip+":"+strconv.Itoa(s.Port))
	}
	waitFor(t, 30*time.Second, "the Sentinels to know each other and the replica", func() (bool, string) {
		out, err := sentinels[0].Do("SENTINEL", "CKQUORUM", "mymaster")
		if err != nil || !strings.Contains(out, "OK") {
			return false, fmt.Sprint(out, err)
		}
		v, _ := sentinels[0].Info("master0")
		return strings.Contains(v, "slaves=1") && strings.Contains(v, "sentinels=3"), v
	})
	y := n.k("create", "secret", "generic", "tetra-redis-sentinel", "-n", ns, "--from-literal=url=redis://ignored.invalid:6379/0", "--dry-run=client", "-o", "yaml")
	n.apply(y)
	quoted := make([]string, len(addrs))
	for i, a := range addrs {
		quoted[i] = strconv.Quote(a)
	}
	n.apply(fmt.Sprintf(`apiVersion: tetra.dev/v1alpha1
kind: Messenger
metadata: {name: %s, namespace: %s}
spec:
  replicas: 2
  postgresql: {secretRef: {name: tetra-postgres}}
  redis:
    secretRef: {name: tetra-redis-sentinel}
    sentinel: {masterName: mymaster, addresses: [%s]}
  jwt: {secretRef: {name: tetra-jwt}}
  resources:
    requests: {cpu: 100m, memory: 128Mi, ephemeral-storage: 64Mi}
    limits: {memory: 1Gi, ephemeral-storage: 1Gi}
`, sentinelMessenger, ns, strings.Join(quoted, ", ")))
	took, pods := n.waitSettled(sentinelMessenger, "", 4*time.Minute)
	n.record("Sentinel Messenger (2 replicas, master + replica + 3 Sentinels on the host) Ready %v after the apply", took.Round(time.Second))
	var before *tetrav1.RedisIdentity
	waitFor(t, time.Minute, "status.redis of the Sentinel Messenger", func() (bool, string) {
		before = n.messenger(sentinelMessenger).Status.Redis
		runID, _ := master.Info("run_id")
		return before != nil && before.RunID == runID, fmt.Sprintf("%+v", before)
	})
	svc := n.serviceURL(sentinelMessenger)
	lg := n.goLoadgen("through the Service across SENTINEL FAILOVER and a SIGKILL", []string{svc},
		"--clients", "40", "--rate", "100", "--duration", "90s", "--drain", "60s")
	time.Sleep(10 * time.Second)

	handled := func(epoch int64, what string) time.Duration {
		return waitFor(t, 2*time.Minute, what, func() (bool, string) {
			m := n.messenger(sentinelMessenger)
			r := m.Status.Redis
			return r != nil && r.Epoch == epoch && m.Status.LastRebuild != nil && m.Status.LastRebuild.Epoch == epoch,
				fmt.Sprintf("redis %+v rebuild %+v", r, m.Status.LastRebuild)
		})
	}
	check := func(epoch int64, newMaster *redistest.Server, what string) {
		m := n.messenger(sentinelMessenger)
		runID, _ := newMaster.Info("run_id")
		if m.Status.Redis.RunID != runID || m.Status.LastRebuild.Method != "Endpoint" || int(m.Status.LastRebuild.Pods) != len(pods) || m.Status.Redis.RestartEpoch != 0 {
			t.Errorf("%s: redis %+v rebuild %+v: want the new master %s rebuilt by the endpoint in %d pods, no restart",
				what, m.Status.Redis, m.Status.LastRebuild, runID, len(pods))
		}
		ev := n.failoverEvents(sentinelMessenger)
		if int64(len(ev)) != epoch-before.Epoch {
			t.Errorf("%s: %d RedisFailoverDetected events, want %d (each failover handled once): %q", what, len(ev), epoch-before.Epoch, ev)
		}
		for _, e := range ev {
			if !strings.Contains(e, "(promotion)") {
				t.Errorf("%s: event %q does not say promotion", what, e)
			}
		}
	}
	// 1. A manual failover: the replica is promoted.
	if out, err := sentinels[0].Do("SENTINEL", "FAILOVER", "mymaster"); err != nil || !strings.Contains(out, "OK") {
		t.Fatalf("SENTINEL FAILOVER: %q %v", out, err)
	}
	took = handled(before.Epoch+1, "the operator to handle SENTINEL FAILOVER")
	n.record("SENTINEL FAILOVER: handled %v after the command (epoch %d, rebuild by the endpoint)", took.Round(100*time.Millisecond), before.Epoch+1)
	check(before.Epoch+1, replica, "SENTINEL FAILOVER")
	// The old master follows the new one before it can be promoted back,
	// and every Sentinel has finished the failover and names the new
	// master: a Sentinel in TILT mode (its timer stalled on a loaded
	// machine, seen here) finishes its failover only when TILT ends, 30 s
	// later; a kill before that splits the Sentinels (one names the dead
	// master), and the operator rightly acts on nothing (RedisSeveralMasters).
	waitFor(t, time.Minute, "the old master to follow the new one", func() (bool, string) {
		v, _ := master.Info("master_link_status")
		return v == "up", v
	})
	waitFor(t, 90*time.Second, "every Sentinel to name the new master, out of TILT", sentinelsAgree(sentinels, ip+":"+strconv.Itoa(replica.Port)))
	// 2. SIGKILL of the master Sentinel promoted: after down-after (5 s)
	// the Sentinels promote the old master again.
	t1 := time.Now()
	replica.Stop()
	waitFor(t, 90*time.Second, "every Sentinel to name the promoted master, out of TILT", sentinelsAgree(sentinels, ip+":"+strconv.Itoa(master.Port)))
	took = handled(before.Epoch+2, "the operator to handle the SIGKILL of the master")
	n.record("SIGKILL of the master: handled %v after the kill (Sentinel's down-after 5 s included; epoch %d, rebuild by the endpoint)", time.Since(t1).Round(100*time.Millisecond), before.Epoch+2)
	_ = took
	check(before.Epoch+2, master, "SIGKILL")

	rep := n.waitLoadgen(lg)
	n.record("loadgen through the Service across both: accepted %s, lost %s, deliveries/accepted %s, duplicates %s, reconnects %s, latency %s, withdrawals %q",
		rep["accepted"], rep["lost"], rep["deliveries/accepted"], rep["duplicates"], rep["reconnects"], rep["latency p50/p99/p99.9"], rep["withdrawals"])
	if d, err := strconv.ParseFloat(rep["deliveries/accepted"], 64); err != nil || d > 1.02 {
		t.Errorf("deliveries/accepted %q, want at most 1.02", rep["deliveries/accepted"])
	}
	if rep["withdrawals"] != "" {
		t.Errorf("withdrawals %s, want none", rep["withdrawals"])
	}
	for _, p := range n.pods(ns, sentinelMessenger) {
		if p.Status.ContainerStatuses[0].RestartCount != 0 {
			t.Errorf("pod %s restarted %d times", p.Name, p.Status.ContainerStatuses[0].RestartCount)
		}
	}
	var dep appsv1.Deployment
	if err := n.c.Get(ctx(), types.NamespacedName{Namespace: ns, Name: sentinelMessenger}, &dep); err != nil {
		t.Fatal(err)
	}
	if e := dep.Spec.Template.Annotations[tetrav1.RedisEpochAnnotation]; e != "" {
		t.Errorf("the pods were restarted for a failover (redis-epoch %s in the template)", e)
	}
}

// sentinelsAgree is a waitFor condition: every Sentinel is out of TILT and
// names addr as the master, with status ok.
func sentinelsAgree(sentinels []*redistest.Server, addr string) func() (bool, string) {
	return func() (bool, string) {
		var seen []string
		ok := true
		for _, s := range sentinels {
			tilt, _ := s.Info("sentinel_tilt")
			m, _ := s.Info("master0")
			seen = append(seen, fmt.Sprintf("%d: tilt=%s %s", s.Port, tilt, m))
			ok = ok && tilt == "0" && strings.Contains(m, "status=ok") && strings.Contains(m, "address="+addr+",")
		}
		return ok, strings.Join(seen, "; ")
	}
}

// podLoss: three replicas; one pod deleted in the middle of a loadgen run
// through the Service: nothing lost, no HTTP request through the Service
// failed, and its clients are back on the others.
func (n *node) podLoss() {
	t := n.t
	n.k("patch", "messenger", sentinelMessenger, "-n", ns, "--type", "merge", "-p", `{"spec":{"replicas":3}}`)
	_, pods := n.waitSettled(sentinelMessenger, "", 4*time.Minute)
	if len(pods) != 3 {
		t.Fatalf("%d pods, want 3", len(pods))
	}
	svc := n.serviceURL(sentinelMessenger)
	p := startProber(svc+"/api/chats", n.token("prober"), 50)
	lg := n.goLoadgen("through the Service while a pod is deleted", []string{svc},
		"--clients", "40", "--rate", "100", "--duration", "45s", "--drain", "60s")
	time.Sleep(15 * time.Second)
	victim := pods[1].Name
	t0 := time.Now()
	n.k("delete", "pod", victim, "-n", ns, "--wait=false")
	took, _ := n.waitSettled(sentinelMessenger, "", 3*time.Minute)
	rep := n.waitLoadgen(lg)
	ok, failed, samples := p.finish()
	_ = t0
	n.record("pod loss (3 replicas, %s deleted mid-run): back to 3 Ready in %v; loadgen through the Service accepted %s, lost %s, reconnects %s; %d HTTP requests ok, %d failed",
		victim, took.Round(time.Second), rep["accepted"], rep["lost"], rep["reconnects"], ok, failed)
	if failed != 0 {
		t.Errorf("%d HTTP requests through the Service failed while a pod went: %v", failed, samples)
	}
	n.k("delete", "messenger", sentinelMessenger, "-n", ns, "--wait=true", "--timeout=2m")
}
