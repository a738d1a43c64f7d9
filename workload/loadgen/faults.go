package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Index faults (Config.IndexFault): the waterline index lost or replaced
// under load, as a Redis flush, crash or failover does in production.
//
//   - flush: every key of the run's prefix is deleted (the run's keys are
//     all FLUSHALL would take from this deployment; other users of a
//     shared Redis keep theirs).
//   - restart: the run starts its own redis-server (no persistence) and
//     SIGKILLs it at the fault, then starts it again, empty, on the same
//     port.
//   - stale: the run starts two redis-servers, a master and its replica,
//     and a TCP proxy that is the servers' only address (a Service, or a
//     Sentinel-managed name). IndexFaultLag before the fault the replica
//     stops replicating; at the fault it is promoted and the proxy moves to
//     it, so the processes find an older copy of the index that still says
//     it is primed. The next fault swaps the roles back.

// ownRedis is the run's own Redis for the restart and stale faults.
type ownRedis struct {
	servers []*redisProc // [0] serves first; stale has a replica in [1]
	proxy   *tcpProxy    // stale only
	active  int          // index of the server the proxy reaches
}

// url is the address the servers of the run use.
func (o *ownRedis) url() string {
	if o.proxy != nil {
		return "redis://" + o.proxy.addr() + "/0"
	}
	return "redis://" + o.servers[0].addr + "/0"
}

func (o *ownRedis) stop() {
	if o.proxy != nil {
		o.proxy.close()
	}
	for _, s := range o.servers {
		s.kill()
		os.RemoveAll(s.dir)
	}
}

// startOwnRedis starts the Redis processes a restart or stale fault needs.
func startOwnRedis(ctx context.Context, fault string) (*ownRedis, error) {
	if _, err := exec.LookPath("redis-server"); err != nil {
		return nil, fmt.Errorf("--index-fault %s starts its own redis-server, which is not on PATH: %w", fault, err)
	}
	o := &ownRedis{}
	n := 1
	if fault == "stale" {
		n = 2
	}
	for range n {
		s, err := startRedisProc(ctx, 0)
		if err != nil {
			o.stop()
			return nil, err
		}
		o.servers = append(o.servers, s)
	}
	if fault == "stale" {
		if err := o.servers[1].replicate(ctx, o.servers[0]); err != nil {
			o.stop()
			return nil, err
		}
		p, err := newTCPProxy(o.servers[0].addr)
		if err != nil {
			o.stop()
			return nil, err
		}
		o.proxy = p
	}
	return o, nil
}

// redisProc is one redis-server child process.
type redisProc struct {
	addr string
	port int
	dir  string
	cmd  *exec.Cmd
}

func startRedisProc(ctx context.Context, port int) (*redisProc, error) {
	if port == 0 {
		var err error
		if port, err = freePort(); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp("", "tetra-loadgen-redis-")
	if err != nil {
		return nil, err
	}
	s := &redisProc{addr: "127.0.0.1:" + strconv.Itoa(port), port: port, dir: dir}
	if err := s.start(ctx); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

func (s *redisProc) start(ctx context.Context) error {
	s.cmd = exec.Command("redis-server", "--port", strconv.Itoa(s.port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", s.dir, "--repl-diskless-sync-delay", "0", "--loglevel", "warning")
	s.cmd.Stdout, s.cmd.Stderr = io.Discard, io.Discard
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server on %s: %w", s.addr, err)
	}
	c := s.client()
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(ctx).Err() != nil {
		if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("redis-server on %s did not answer within 10 s", s.addr)
		}
		time.Sleep(20 * time.Millisecond) // a child's socket: there is no event to wait on
	}
	return nil
}

func (s *redisProc) client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.addr, MaxRetries: -1})
}

func (s *redisProc) kill() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		_ = s.cmd.Wait()
	}
	s.cmd = nil
}

// replicate makes s a replica of master and waits for the link.
func (s *redisProc) replicate(ctx context.Context, master *redisProc) error {
	c := s.client()
	defer c.Close()
	if err := c.Do(ctx, "REPLICAOF", "127.0.0.1", strconv.Itoa(master.port)).Err(); err != nil {
		return fmt.Errorf("replicaof: %w", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, _ := c.Info(ctx, "replication").Result()
		if containsLine(info, "master_link_status:up") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server on %s did not replicate %s within 10 s", s.addr, master.addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func containsLine(info, line string) bool {
	for i := 0; i+len(line) <= len(info); i++ {
		if info[i:i+len(line)] == line && (i == 0 || info[i-1] == '\n') {
			return true
		}
	}
	return false
}

// startFaults starts the fault schedule of the run, if any, for the send
// phase (ctx); the returned func waits for it to end.
func (r *run) startFaults(ctx context.Context) func() {
	cfg := r.cfg
	if cfg.IndexFault == "" {
		return nil
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		at := cfg.IndexFaultAt
		start := time.Now()
		for {
			if cfg.IndexFault == "stale" {
				// The replica falls behind IndexFaultLag before the fault.
				if !sleepUntil(ctx, start.Add(at-cfg.IndexFaultLag)) {
					return
				}
				r.detachStaleReplica(ctx)
			}
			if !sleepUntil(ctx, start.Add(at)) {
				return
			}
			if err := r.fault(ctx); err != nil {
				r.cfg.Logger.Warn("loadgen: index fault failed", "fault", cfg.IndexFault, "err", err)
			} else {
				r.faults.Add(1)
				if cfg.Progress != nil {
					fmt.Fprintf(cfg.Progress, "t=%3.0fs index fault: %s\n", time.Since(start).Seconds(), cfg.IndexFault)
				}
			}
			if cfg.IndexFaultEvery <= 0 {
				return
			}
			at += cfg.IndexFaultEvery
		}
	}()
	return func() { <-done }
}

func sleepUntil(ctx context.Context, t time.Time) bool {
	timer := time.NewTimer(time.Until(t))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
		return true
	}
}

// detachStaleReplica stops the standby from replicating: from now on it
// keeps an older copy of the index.
func (r *run) detachStaleReplica(ctx context.Context) {
	o := r.own
	standby := o.servers[1-o.active]
	c := standby.client()
	defer c.Close()
	if err := c.Do(ctx, "REPLICAOF", "NO", "ONE").Err(); err != nil {
		r.cfg.Logger.Warn("loadgen: detach the replica", "err", err)
	}
}

// fault hits the index once.
func (r *run) fault(ctx context.Context) error {
	switch r.cfg.IndexFault {
	case "flush":
		if r.target.redisURL == "" {
			return errors.New("no Redis index to flush")
		}
		deleteRedisPrefix(r.target.redisURL, r.target.redisPrefix)
		return nil
	case "restart":
		s := r.own.servers[0]
		s.kill()
		return s.start(ctx)
	case "stale":
		o := r.own
		old := o.servers[o.active]
		o.active = 1 - o.active
		o.proxy.switchTo(o.servers[o.active].addr)
		// The old master becomes the replica the next fault promotes.
		return old.replicate(ctx, o.servers[o.active])
	}
	return nil
}

// tcpProxy forwards every connection to its current target; switchTo cuts
// the open connections and sends new ones to another target.
type tcpProxy struct {
	ln     net.Listener
	target atomic.Value // string
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
}

func newTCPProxy(target string) (*tcpProxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	p := &tcpProxy{ln: ln, conns: map[net.Conn]struct{}{}}
	p.target.Store(target)
	go p.serve()
	return p, nil
}

func (p *tcpProxy) addr() string { return p.ln.Addr().String() }

func (p *tcpProxy) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		go p.handle(c)
	}
}

func (p *tcpProxy) handle(c net.Conn) {
	up, err := net.DialTimeout("tcp", p.target.Load().(string), 5*time.Second)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, c)
		delete(p.conns, up)
		p.mu.Unlock()
		c.Close()
		up.Close()
	}()
	go func() { _, _ = io.Copy(up, c); up.Close() }()
	_, _ = io.Copy(c, up)
}

func (p *tcpProxy) switchTo(target string) {
	p.target.Store(target)
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
}

func (p *tcpProxy) close() {
	p.ln.Close()
	p.switchTo("")
}
