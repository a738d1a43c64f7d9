// Package adminapi is the operator's client of the workload's admin
// endpoints: it mints a short-lived admin token from the Messenger's JWT
// secret and asks pods to rebuild their waterline index after a Redis
// failover (POST /admin/rebuild).
//
// The token is an HS256 JWT with the claims the workload's auth package
// checks: sub "admin", scope "admin", iat and an exp five minutes out. The
// operator mints it itself with golang-jwt instead of importing the
// workload's auth package, which keeps the operator free of workload
// internals; a test checks that the workload accepts it.
package adminapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
	corev1 "k8s.io/api/core/v1"
)

// TokenTTL is the lifetime of a minted admin token.
const TokenTTL = 5 * time.Minute

// ErrNoReadyPods: there is no ready pod to ask.
var ErrNoReadyPods = errors.New("adminapi: no ready pods")

// MintAdminToken returns an admin token signed with secret, issued at now.
func MintAdminToken(secret []byte, now time.Time) (string, error) {
	if len(secret) == 0 {
		return "", errors.New("adminapi: empty JWT secret")
	}
	claims := jwt.MapClaims{
		"sub":   "admin",
		"scope": "admin",
		"iat":   now.Unix(),
		"exp":   now.Add(TokenTTL).Unix(),
	}
	return jwt.NewWithClaims(jwt.SigningMethodHS256, claims).SignedString(secret)
}

// URLFunc returns the rebuild URL of a pod.
type URLFunc func(pod *corev1.Pod) string

// PodURL is the default URLFunc: the pod's IP on the workload's port.
func PodURL(port int) URLFunc {
	return func(pod *corev1.Pod) string {
		return "http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(port)) + "/admin/rebuild"
	}
}

// Rebuilder calls POST /admin/rebuild on pods.
type Rebuilder struct {
	// HTTP is the client; nil means a client with a 70 s timeout (the
	// workload allows a rebuild 60 s).
	HTTP *http.Client
	// URL maps a pod to its endpoint; nil means PodURL(8080). Tests point
	// it at an httptest server, since envtest runs no pods.
	URL URLFunc
	// Now is the clock for tokens; nil means time.Now.
	Now func() time.Time
}

// ReadyPods returns the pods to ask: every pod not terminating and not
// finished. It fails with ErrNoReadyPods when there is none, and with an
// error naming the pod when one of them is not ready or has no IP, since
// such a pod cannot be asked and must be restarted instead.
func ReadyPods(pods []corev1.Pod) ([]corev1.Pod, error) {
	var out []corev1.Pod
	for _, p := range pods {
		if p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		if !podReady(&p) || p.Status.PodIP == "" {
			return nil, fmt.Errorf("adminapi: pod %s is not ready", p.Name)
		}
		out = append(out, p)
	}
	if len(out) == 0 {
		return nil, ErrNoReadyPods
	}
	return out, nil
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// Rebuild asks every pod, concurrently, to rebuild, and returns how many
// answered 200. Any failure is returned (joined); the caller then falls
// back to a restart.
func (r Rebuilder) Rebuild(ctx context.Context, pods []corev1.Pod, secret []byte) (int, error) {
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	token, err := MintAdminToken(secret, now())
	if err != nil {
		return 0, err
	}
	hc := r.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 70 * time.Second}
	}
	urlOf := r.URL
	if urlOf == nil {
		urlOf = PodURL(8080)
	}
	var (
		mu   sync.Mutex
		ok   int
		errs []error
		wg   sync.WaitGroup
	)
	for i := range pods {
		wg.Add(1)
		go func(p *corev1.Pod) {
			defer wg.Done()
			err := post(ctx, hc, urlOf(p), token)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("pod %s: %w", p.Name, err))
				return
			}
			ok++
		}(&pods[i])
	}
	wg.Wait()
	return ok, errors.Join(errs...)
}

func post(ctx context.Context, hc *http.Client, url, token string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST /admin/rebuild: %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	return nil
}

// ReadyzURL is the default URL of a pod's GET /readyz: its IP on port.
func ReadyzURL(port int) URLFunc {
	return func(pod *corev1.Pod) string {
		return "http://" + net.JoinHostPort(pod.Status.PodIP, strconv.Itoa(port)) + "/readyz"
	}
}

// Readyz is the part of the workload's GET /readyz body the operator
// reads: {"status":"degraded","reason":"index unreachable: ..."} says the
// pod serves (it stays ready: HTTP and history work) while part of it is
// impaired, for example live delivery while Redis is away. Any other
// status, or a body without one (older workloads answer the per-check
// object only), is not degraded.
type Readyz struct {
	Status string `json:"status"`
	Reason string `json:"reason"`
}

// StatusDegraded is the Readyz.Status of a degraded pod.
const StatusDegraded = "degraded"

// HealthReader reads the pods' /readyz bodies.
type HealthReader struct {
	// HTTP is the client; nil means one with a 2 s timeout.
	HTTP *http.Client
	// URL maps a pod to its /readyz; nil means ReadyzURL(8080).
	URL URLFunc
}

// Degraded asks every running pod with an IP, concurrently, for /readyz
// and returns the reason of each that says it is degraded, by pod name.
// A pod that does not answer, or answers something else, is left out: its
// readiness probe and the pod's status speak for it.
func (h HealthReader) Degraded(ctx context.Context, pods []corev1.Pod) map[string]string {
	hc := h.HTTP
	if hc == nil {
		hc = &http.Client{Timeout: 2 * time.Second}
	}
	urlOf := h.URL
	if urlOf == nil {
		urlOf = ReadyzURL(8080)
	}
	var (
		mu  sync.Mutex
		out = map[string]string{}
		wg  sync.WaitGroup
	)
	for i := range pods {
		p := &pods[i]
		if p.DeletionTimestamp != nil || p.Status.Phase != corev1.PodRunning || p.Status.PodIP == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rz, ok := readyz(ctx, hc, urlOf(p))
			if !ok || rz.Status != StatusDegraded {
				return
			}
			reason := strings.TrimSpace(rz.Reason)
			if reason == "" {
				reason = "no reason given"
			}
			if len(reason) > 300 {
				reason = reason[:300] + "..."
			}
			mu.Lock()
			out[p.Name] = reason
			mu.Unlock()
		}()
	}
	wg.Wait()
	return out
}

func readyz(ctx context.Context, hc *http.Client, url string) (Readyz, bool) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Readyz{}, false
	}
	resp, err := hc.Do(req)
	if err != nil {
		return Readyz{}, false
	}
	defer resp.Body.Close()
	var rz Readyz
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&rz); err != nil {
		return Readyz{}, false
	}
	return rz, true
}
