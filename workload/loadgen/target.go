package loadgen

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tetra-messenger/tetra/internal/serveproc"
	"github.com/tetra-messenger/tetra/workload/config"
	"github.com/tetra-messenger/tetra/workload/server"
)

// startTargets returns the run's servers: the --url list, one in-process
// server, or cfg.Replicas child processes sharing one store, outbox and
// index. On error nothing it started is left running.
func startTargets(ctx context.Context, cfg Config, runID string) (*fleet, error) {
	if cfg.URL != "" {
		f := &fleet{}
		for _, u := range splitURLs(cfg.URL) {
			rem, err := newRemote(u, cfg.Secret)
			if err != nil {
				return nil, err
			}
			f.targets = append(f.targets, rem)
		}
		return f, nil
	}
	if cfg.InProcess {
		dir, err := os.MkdirTemp("", "tetra-loadgen-")
		if err != nil {
			return nil, err
		}
		sc := cfg.Server
		sc.Addr, sc.DataDir, sc.Logger = "127.0.0.1:0", dir, cfg.Logger
		srv, err := server.New(ctx, sc)
		if err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("loadgen: start in-process server: %w", err)
		}
		if err := srv.Start(ctx); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("loadgen: start in-process server: %w", err)
		}
		f := &fleet{targets: []target{&cleanup{target: &local{srv: srv}, dir: dir}}}
		if isRedisIndex(sc.Index, nil) {
			// For the flush fault; the keys are the caller's prefix.
			f.redisURL, f.redisPrefix, f.keepKeys = sc.Index, sc.IndexPrefix, true
		}
		return f, nil
	}
	secret := randomSecret()
	f := &fleet{}
	for i := range max(cfg.Replicas, 1) {
		dir, err := os.MkdirTemp("", "tetra-loadgen-")
		if err != nil {
			f.stop()
			return nil, err
		}
		c, err := startChild(ctx, cfg, dir, secret, childArgs(cfg, runID, i))
		if err != nil {
			os.RemoveAll(dir)
			f.stop()
			if cfg.Replicas > 1 {
				return nil, fmt.Errorf("replica %d: %w", i, err)
			}
			return nil, err
		}
		f.targets = append(f.targets, c)
	}
	if idx := cfg.Server.Index; strings.HasPrefix(idx, "redis://") || strings.HasPrefix(idx, "rediss://") {
		f.redisURL, f.redisPrefix = idx, runPrefix(cfg, runID)
	}
	return f, nil
}

// splitURLs splits a comma-separated --url list, dropping empty entries.
func splitURLs(s string) []string {
	var out []string
	for _, u := range strings.Split(s, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// runPrefix is the Redis key prefix of one run's children: the configured
// prefix plus lg<runid>:, so no run sees another's index keys (owners,
// waterlines, client registrations) even on a shared Redis and a fresh
// store.
func runPrefix(cfg Config, runID string) string {
	return cfg.Server.IndexPrefix + "lg" + runID + ":"
}

// childArgs are the index flags of replica i: its own --index-owner and
// the run's shared --index-prefix.
func childArgs(cfg Config, runID string, i int) []string {
	if cfg.Server.Index == "" || cfg.Server.Index == "memory" {
		return nil
	}
	return []string{"--index-prefix", runPrefix(cfg, runID), "--index-owner", fmt.Sprintf("loadgen-%s-%d", runID, i)}
}

// cleanup removes the run's data directory after stopping the target.
type cleanup struct {
	target
	dir string
}

func (c *cleanup) stop() {
	c.target.stop()
	os.RemoveAll(c.dir)
}

// child is a `tetra serve` child process started from this binary.
type child struct {
	*remote
	proc *serveproc.Proc
	dir  string
}

// TuningArgs renders t as `tetra serve` flags (config.Tuning.Args).
func TuningArgs(t config.Tuning) []string { return t.Args() }

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func startChild(ctx context.Context, cfg Config, dir, secret string, extra []string) (*child, error) {
	exe := cfg.ServerBinary
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	// --drain 0: no load balancer routes to a child, nothing to wait for.
	args := append([]string{"serve", "--addr", addr, "--data", dir, "--log-level", "warn", "--drain", "0",
		"--max-conns-per-user", "64", "--max-conns", strconv.Itoa(max(cfg.Clients*2, 20000))}, TuningArgs(cfg.Server.Tuning)...)
	if cfg.Server.Store != "" {
		args = append(args, "--store", cfg.Server.Store)
	}
	if cfg.Server.Outbox != "" {
		args = append(args, "--outbox", cfg.Server.Outbox)
	}
	if cfg.Server.Index != "" {
		args = append(args, "--index", cfg.Server.Index)
	}
	if len(cfg.Server.IndexSentinelAddrs) > 0 {
		args = append(args, "--index-sentinel-addrs", strings.Join(cfg.Server.IndexSentinelAddrs, ","),
			"--index-sentinel-master", cfg.Server.IndexSentinelMaster)
	}
	args = append(args, extra...)
	rem, err := newRemote("http://"+addr, secret)
	if err != nil {
		return nil, err
	}
	p := &serveproc.Proc{Bin: exe, Args: args, Addr: addr, Env: append(os.Environ(), "TETRA_JWT_SECRET="+secret),
		LogPath: filepath.Join(dir, "server.log"), DieWithParent: true}
	if err := p.Start(ctx, 30*time.Second); err != nil {
		return nil, fmt.Errorf("loadgen: %w", err)
	}
	return &child{remote: rem, proc: p, dir: dir}, nil
}

// finish reads the child's peak RSS (VmHWM) and CPU time from /proc before
// it is stopped (nothing when it already exited).
func (c *child) finish(rep *Report) {
	ps := c.procStats()
	rep.ServerPeakRSS, rep.ServerCPUSeconds = ps.PeakRSS, ps.CPUSeconds
}

func (c *child) procStats() ProcessStats {
	var ps ProcessStats
	pid := c.proc.Pid()
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "VmHWM:") {
				f := strings.Fields(line)
				if len(f) >= 2 {
					kb, _ := strconv.ParseInt(f[1], 10, 64)
					ps.PeakRSS = kb * 1024
				}
			}
		}
	}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i > 0 {
			f := strings.Fields(s[i+1:])
			// utime and stime are fields 14 and 15 of stat, 12 and 13 here.
			if len(f) > 13 {
				ut, _ := strconv.ParseFloat(f[11], 64)
				st, _ := strconv.ParseFloat(f[12], 64)
				ps.CPUSeconds = (ut + st) / 100 // USER_HZ is 100 on Linux
			}
		}
	}
	return ps
}

// childStopTimeout is how long a child gets after SIGTERM before SIGKILL.
const childStopTimeout = 30 * time.Second

func (c *child) stop() {
	_, _ = c.proc.Stop(syscall.SIGTERM, childStopTimeout)
	os.RemoveAll(c.dir)
}
