package loadgen

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tetra-messenger/tetra/workload/auth"
)

// ProcessStats is one server process of the run.
type ProcessStats struct {
	URL        string  `json:"url"`
	Clients    int     `json:"clients"`    // clients whose last connection went to this process
	PeakRSS    int64   `json:"peakRSS"`    // bytes (VmHWM); 0 when unknown
	CPUSeconds float64 `json:"cpuSeconds"` // user + system; 0 when unknown
}

// fleet is the run's servers: one, or several sharing one store and index.
// Every target shares the token secret.
type fleet struct {
	targets []target
	// redisURL and redisPrefix name the index keys of the run's servers,
	// deleted after they stopped unless keepKeys (an in-process server
	// under the caller's prefix); empty when there are none.
	redisURL, redisPrefix string
	keepKeys              bool
}

func (f *fleet) signer() *auth.Signer { return f.targets[0].signer() }

// outboxDepth asks the processes in turn (they share the store) and
// returns the first answer, -1 when none answers.
func (f *fleet) outboxDepth(ctx context.Context) int64 {
	for _, t := range f.targets {
		if d := t.outboxDepth(ctx); d >= 0 {
			return d
		}
	}
	return -1
}

// deliveryTotals sums the processes' withdrawal and rebuild counters (by
// reason), their deferred sends and their re-deliveries.
func (f *fleet) deliveryTotals(ctx context.Context) (withdrawals, rebuilds map[string]int64, deferred, redelivered int64) {
	for _, t := range f.targets {
		st, ok := t.adminStats(ctx)
		if !ok {
			continue
		}
		add := func(dst *map[string]int64, src map[string]int64) {
			for k, v := range src {
				if *dst == nil {
					*dst = map[string]int64{}
				}
				(*dst)[k] += v
			}
		}
		add(&withdrawals, st.Delivery.Withdrawals)
		add(&rebuilds, st.Delivery.Rebuilds)
		deferred += st.Delivery.Deferred
		redelivered += st.Delivery.Redeliveries
	}
	return withdrawals, rebuilds, deferred, redelivered
}

// finish records the processes' RSS and CPU: as before for one process,
// per process plus sums for several.
func (f *fleet) finish(rep *Report, clients []int) {
	rep.Replicas = len(f.targets)
	if len(f.targets) == 1 {
		f.targets[0].finish(rep)
		return
	}
	rep.ServerPeakRSS, rep.ServerCPUSeconds = 0, 0
	for i, t := range f.targets {
		ps := ProcessStats{URL: t.url(), Clients: clients[i]}
		if c, ok := t.(*child); ok {
			st := c.procStats()
			ps.PeakRSS, ps.CPUSeconds = st.PeakRSS, st.CPUSeconds
		}
		rep.Processes = append(rep.Processes, ps)
		rep.ServerPeakRSS += ps.PeakRSS
		rep.ServerCPUSeconds += ps.CPUSeconds
	}
}

// stop stops every process at once (each SIGTERM, then SIGKILL after
// childStopTimeout), then deletes the run's Redis keys.
func (f *fleet) stop() {
	var wg sync.WaitGroup
	for _, t := range f.targets {
		wg.Add(1)
		go func() { defer wg.Done(); t.stop() }()
	}
	wg.Wait()
	if f.redisURL != "" && f.redisPrefix != "" && !f.keepKeys {
		deleteRedisPrefix(f.redisURL, f.redisPrefix)
	}
}

// deleteRedisPrefix removes every key under prefix (best effort).
func deleteRedisPrefix(redisURL, prefix string) {
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		return
	}
	c := redis.NewClient(opt)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, prefix+"*", 500).Result()
		if err != nil {
			return
		}
		if len(keys) > 0 {
			c.Del(ctx, keys...)
		}
		if cursor = next; cursor == 0 {
			return
		}
	}
}

// homeTransport carries the clients whose home is target home: every dial
// goes to the home process; when it refuses the connection (the process
// died) the dial tries the next targets in turn. cur is the target the
// last successful dial reached.
type homeTransport struct {
	addrs []string // host:port of every target
	home  int
	cur   atomic.Int32
}

func newHomeClient(bases []string, home int) (*http.Client, *homeTransport, error) {
	ht := &homeTransport{home: home}
	for _, b := range bases {
		u, err := url.Parse(b)
		if err != nil {
			return nil, nil, err
		}
		host := u.Host
		if u.Port() == "" {
			port := "80"
			if u.Scheme == "https" {
				port = "443"
			}
			host = net.JoinHostPort(u.Hostname(), port)
		}
		ht.addrs = append(ht.addrs, host)
	}
	ht.cur.Store(int32(home))
	d := &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		Proxy: http.ProxyFromEnvironment,
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			var first error
			for k := range ht.addrs {
				i := (ht.home + k) % len(ht.addrs)
				c, err := d.DialContext(ctx, network, ht.addrs[i])
				if err == nil {
					ht.cur.Store(int32(i))
					return c, nil
				}
				if first == nil {
					first = err
				}
				if !errors.Is(err, syscall.ECONNREFUSED) {
					break
				}
			}
			return nil, first
		},
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
		TLSHandshakeTimeout: 10 * time.Second,
		ForceAttemptHTTP2:   false,
		TLSNextProto:        map[string]func(string, *tls.Conn) http.RoundTripper{}, // HTTP/1.1 only: WebSocket upgrades
	}
	return &http.Client{Transport: tr}, ht, nil
}
