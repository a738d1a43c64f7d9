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
