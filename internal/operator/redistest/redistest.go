// Package redistest starts throwaway redis-server processes on loopback for
// the operator's tests: a server on a free port (never the shared
// 127.0.0.1:6379), a replacement on the same port (a new run_id), and
// Sentinels. Each process is stopped by the test's cleanup.
package redistest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/internal/redisinfo"
)

// Server is a running redis-server (or Sentinel).
type Server struct {
	Port int
	cmd  *exec.Cmd
	done chan struct{}
}

// Addr is 127.0.0.1:Port.
func (s *Server) Addr() string { return "127.0.0.1:" + strconv.Itoa(s.Port) }

// URL is redis://127.0.0.1:Port/0.
func (s *Server) URL() string { return "redis://" + s.Addr() + "/0" }

// Available reports whether redis-server is installed; with CI=true its
// absence fails the test instead of skipping it.
func Available(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server not installed (CI=true: no skipping): %v", err)
		}
		t.Skipf("SKIP: redis-server not installed: %v", err)
	}
}

// FreePort returns a loopback port that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Start runs redis-server on port (0: a free one) with extra arguments
// ("--replicaof", "127.0.0.1", "6390", ...), waits until it answers PING
// and stops it at cleanup.
func Start(t testing.TB, port int, extra ...string) *Server {
	t.Helper()
	Available(t)
	if port == 0 {
		port = FreePort(t)
	}
	args := append([]string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--protected-mode", "no", "--loglevel", "warning", "--dir", t.TempDir()}, extra...)
	return start(t, port, exec.Command("redis-server", args...))
}

// StartSentinel runs a Sentinel on a free port that monitors master at
// masterAddr under name, and stops it at cleanup.
func StartSentinel(t testing.TB, name, masterAddr string) *Server {
	t.Helper()
	Available(t)
	port := FreePort(t)
	host, mport, _ := strings.Cut(masterAddr, ":")
	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	body := fmt.Sprintf("port %d\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\nloglevel warning\n"+
		"sentinel monitor %s %s %s 1\nsentinel down-after-milliseconds %s 60000\n", port, name, host, mport, name)
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return start(t, port, exec.Command("redis-server", conf, "--sentinel"))
}

// SentinelOptions configure StartSentinelWith.
type SentinelOptions struct {
	Name       string // the master's name
	MasterAddr string // host:port the Sentinel monitors
	Quorum     int    // Sentinels that must agree the master is down; default 1
	// DownAfter is down-after-milliseconds; default 60 s (only forced
	// failovers, SENTINEL FAILOVER, happen within a test then).
	DownAfter time.Duration
	// Bind lists the addresses to listen on; default 127.0.0.1.
	Bind []string
	// AnnounceIP is the address this Sentinel announces to the others
	// (sentinel announce-ip); empty: none.
	AnnounceIP string
}

// StartSentinelWith runs a Sentinel on a free port as o says, and stops it
// at cleanup.
func StartSentinelWith(t testing.TB, o SentinelOptions) *Server {
	t.Helper()
	Available(t)
	port := FreePort(t)
	host, mport, _ := strings.Cut(o.MasterAddr, ":")
	if o.Quorum <= 0 {
		o.Quorum = 1
	}
	if o.DownAfter <= 0 {
		o.DownAfter = time.Minute
	}
	if len(o.Bind) == 0 {
		o.Bind = []string{"127.0.0.1"}
	}
	body := fmt.Sprintf("port %d\nbind %s\nprotected-mode no\ndaemonize no\nloglevel warning\n"+
		"sentinel monitor %s %s %s %d\nsentinel down-after-milliseconds %s %d\nsentinel failover-timeout %s 20000\n",
		port, strings.Join(o.Bind, " "), o.Name, host, mport, o.Quorum, o.Name, o.DownAfter.Milliseconds(), o.Name)
	if o.AnnounceIP != "" {
		body += "sentinel announce-ip " + o.AnnounceIP + "\n"
	}
	conf := filepath.Join(t.TempDir(), "sentinel.conf")
	if err := os.WriteFile(conf, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return start(t, port, exec.Command("redis-server", conf, "--sentinel"))
}

func start(t testing.TB, port int, cmd *exec.Cmd) *Server {
	t.Helper()
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %v: %v", cmd.Args, err)
	}
	s := &Server{Port: port, cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); close(s.done) }()
	t.Cleanup(s.Stop)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := s.Do("PING"); err == nil {
			return s
		}
		select {
		case <-s.done:
			t.Fatalf("%v exited before answering", cmd.Args)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%v did not answer PING within 10s", cmd.Args)
		}
		time.Sleep(20 * time.Millisecond) // polling a child process's socket; there is no event to wait on
	}
}

// Stop kills the server and waits for it to exit. Idempotent.
func (s *Server) Stop() {
	if s.cmd.Process != nil {
		s.cmd.Process.Kill()
	}
	<-s.done
}

// Do sends one inline command and returns the first line of the reply (for
// bulk replies, the payload). Enough for PING, REPLICAOF and INFO fields.
func (s *Server) Do(args ...string) (string, error) {
	c, err := net.DialTimeout("tcp", s.Addr(), time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", err
	}
	r := bufio.NewReader(c)
	line, err := r.ReadString('\n')
	if err != nil {
		return "", err
	}
	line = strings.TrimRight(line, "\r\n")
	switch {
	case strings.HasPrefix(line, "-"):
		return "", fmt.Errorf("redis: %s", line[1:])
	case strings.HasPrefix(line, "$"):
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			return "", nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return "", err
		}
		return string(buf[:n]), nil
	}
	return line[1:], nil
}

// Info returns one field of INFO (run_id, master_replid, role, ...).
func (s *Server) Info(field string) (string, error) {
	text, err := s.Do("INFO")
	if err != nil {
		return "", err
	}
	if v, ok := redisinfo.Parse(text)[field]; ok {
		return v, nil
	}
	return "", fmt.Errorf("INFO has no %s", field)
}

// WaitFor polls cond until it is true or ctx ends.
func WaitFor(ctx context.Context, cond func() bool) bool {
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-time.After(25 * time.Millisecond):
		}
	}
	return true
}
