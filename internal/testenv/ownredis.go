package testenv

import (
	"context"
	"io"
	"net"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// OwnRedis is a redis-server started for one test on a free loopback port,
// without persistence, so that it can be killed and started again (a real
// Redis outage; the machine's shared Redis is never touched). It is killed
// when the test ends.
type OwnRedis struct {
	t    testing.TB
	addr string
	dir  string
	cmd  *exec.Cmd
}

// NewOwnRedis starts a redis-server of the test's own and waits until it
// answers. Without redis-server on PATH the test is skipped loudly (failed
// under CI=true).
func NewOwnRedis(t testing.TB) *OwnRedis {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		Unavailable(t, "redis-server", "Install the redis-server package.", err)
	}
	r := &OwnRedis{t: t, addr: FreeAddr(t), dir: t.TempDir()}
	t.Cleanup(r.Kill)
	r.Start()
	return r
}

// URL is the server's database 0.
func (r *OwnRedis) URL() string { return "redis://" + r.addr + "/0" }

// Start starts the server (again, empty) on its address and waits until it
// answers.
func (r *OwnRedis) Start() {
	r.t.Helper()
	_, port, _ := net.SplitHostPort(r.addr)
	r.cmd = exec.Command("redis-server", "--port", port, "--bind", "127.0.0.1", "--save", "",
		"--appendonly", "no", "--dir", r.dir, "--loglevel", "warning")
	r.cmd.Stdout, r.cmd.Stderr = io.Discard, io.Discard
	if err := r.cmd.Start(); err != nil {
		r.t.Fatalf("testenv: start redis-server on %s: %v", r.addr, err)
	}
	c := redis.NewClient(&redis.Options{Addr: r.addr, MaxRetries: -1})
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for c.Ping(context.Background()).Err() != nil {
		if time.Now().After(deadline) {
			r.Kill()
			r.t.Fatalf("testenv: redis-server on %s did not answer within 10 s", r.addr)
		}
		time.Sleep(20 * time.Millisecond) // a child's socket: no event to wait on
	}
}

// Kill SIGKILLs the server (nothing of it survives: no persistence).
// Idempotent.
func (r *OwnRedis) Kill() {
	if r.cmd != nil && r.cmd.Process != nil {
		_ = r.cmd.Process.Signal(os.Kill)
		_ = r.cmd.Wait()
	}
	r.cmd = nil
}
