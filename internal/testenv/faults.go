package testenv

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Real faults, on instances of the test's own: a PostgreSQL server that can
// be frozen (SIGSTOP) and thawed, and a small filesystem that can be filled.
// The shared PostgreSQL and Redis of the machine are never touched.

// OwnPostgres is a PostgreSQL server started for one test: initdb into a
// temporary directory, the postgres binary of the machine on a free
// loopback port, run as the postgres system user (PostgreSQL refuses to run
// as root). It is stopped and removed when the test ends.
type OwnPostgres struct {
	t    testing.TB
	dir  string
	port int
	cmd  *exec.Cmd
	done chan struct{} // closed when the postmaster exited

	mu     sync.Mutex
	frozen []int // pids stopped by Freeze
}

// pgBin finds a PostgreSQL server binary (initdb, postgres) of the machine.
func pgBin(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/" + name)
	sort.Strings(matches)
	if len(matches) == 0 {
		return "", fmt.Errorf("%s not found on PATH or in /usr/lib/postgresql/*/bin", name)
	}
	return matches[len(matches)-1], nil
}

// NewOwnPostgres starts a PostgreSQL server of the test's own and waits
// until it accepts connections (its log says so).
func NewOwnPostgres(t testing.TB) *OwnPostgres {
	t.Helper()
	how := "Install the PostgreSQL server package (postgresql) and run the test as root, so it can start a server as the postgres user."
	initdb, err := pgBin("initdb")
	if err != nil {
		Unavailable(t, "a PostgreSQL server binary", how, err)
	}
	postgres, err := pgBin("postgres")
	if err != nil {
		Unavailable(t, "a PostgreSQL server binary", how, err)
	}
	cred, err := postgresUser()
	if err != nil {
		Unavailable(t, "the postgres system user", how, err)
	}
	dir, err := os.MkdirTemp("", "tetra-own-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
		Unavailable(t, "a directory owned by the postgres user", how, err)
	}
	data := filepath.Join(dir, "data")
	init := exec.Command(initdb, "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-locale", "--no-sync")
	init.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := init.CombinedOutput(); err != nil {
		t.Fatalf("testenv: initdb: %v\n%s", err, out)
	}
	_, p, _ := net.SplitHostPort(FreeAddr(t))
	port, _ := strconv.Atoi(p)
	cmd := exec.Command(postgres, "-D", data, "-p", p, "-k", dir, "-c", "listen_addresses=127.0.0.1",
		"-c", "shared_buffers=16MB", "-c", "max_connections=60", "-c", "log_min_messages=warning",
		"-c", "log_min_error_statement=panic")
	// Its own process group: Freeze stops the postmaster and its children,
	// nothing of the test's.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("testenv: start postgres: %v", err)
	}
	pg := &OwnPostgres{t: t, dir: dir, port: port, cmd: cmd, done: make(chan struct{})}
	ready := make(chan struct{})
	var logTail []string
	var logMu sync.Mutex
	go func() {
		sc := bufio.NewScanner(stderr)
		once := sync.Once{}
		for sc.Scan() {
			line := sc.Text()
			logMu.Lock()
			logTail = append(logTail, line)
			if len(logTail) > 40 {
				logTail = logTail[1:]
			}
			logMu.Unlock()
			if strings.Contains(line, "ready to accept connections") {
				once.Do(func() { close(ready) })
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	go func() { _ = cmd.Wait(); close(pg.done) }()
	t.Cleanup(pg.stop)
	select {
	case <-ready:
	case <-pg.done:
		logMu.Lock()
		defer logMu.Unlock()
		t.Fatalf("testenv: postgres exited at start:\n%s", strings.Join(logTail, "\n"))
	case <-time.After(60 * time.Second):
		t.Fatal("testenv: postgres did not get ready within 60 s")
	}
	return pg
}

// postgresUser returns the credentials of the postgres system user; the
// test must run as root to use them.
func postgresUser() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("not running as root")
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, err
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// URL is the server's postgres database, for the trust-authenticated
// postgres user.
func (pg *OwnPostgres) URL() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", pg.port)
}

// Addr is the server's host:port.
func (pg *OwnPostgres) Addr() string { return fmt.Sprintf("127.0.0.1:%d", pg.port) }

// Freeze stops every process of the server (the postmaster first, so it
// forks no new backend, then every backend and auxiliary process) with
// SIGSTOP: connections stay open and nothing answers, as when the database
// host stalls. Thaw resumes them; the test's end does too.
func (pg *OwnPostgres) Freeze() {
	pg.t.Helper()
	pg.mu.Lock()
	defer pg.mu.Unlock()
	pid := pg.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		pg.t.Fatalf("testenv: SIGSTOP postgres: %v", err)
	}
	pg.frozen = append(pg.frozen, pid)
	for _, c := range childrenOf(pid) {
		if syscall.Kill(c, syscall.SIGSTOP) == nil {
			pg.frozen = append(pg.frozen, c)
		}
	}
}

// Thaw resumes what Freeze stopped (SIGCONT).
func (pg *OwnPostgres) Thaw() {
	pg.mu.Lock()
	defer pg.mu.Unlock()
	for _, p := range pg.frozen {
		_ = syscall.Kill(p, syscall.SIGCONT)
	}
	pg.frozen = nil
}

// Backends returns how many child processes the postmaster has (backends
// and auxiliary processes).
func (pg *OwnPostgres) Backends() int { return len(childrenOf(pg.cmd.Process.Pid)) }

func (pg *OwnPostgres) stop() {
	pg.Thaw()
	select {
	case <-pg.done:
		return
	default:
	}
	_ = pg.cmd.Process.Signal(syscall.SIGINT) // fast shutdown
	select {
	case <-pg.done:
	case <-time.After(30 * time.Second):
		_ = syscall.Kill(-pg.cmd.Process.Pid, syscall.SIGKILL)
		<-pg.done
	}
}

// childrenOf lists the processes whose parent is pid (from /proc).
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces; it ends at the
		// last ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:])
		if len(f) > 1 {
			if ppid, _ := strconv.Atoi(f[1]); ppid == pid {
				out = append(out, p)
			}
		}
	}
	return out
}

// SmallFS is a filesystem of the test's own, size bytes large (a tmpfs
// mounted on a temporary directory; it needs root), for disk-full faults:
// Fill takes every free byte, Free gives them back. It is unmounted when
// the test ends.
type SmallFS struct {
	t    testing.TB
	Dir  string
	fill string
}

// NewSmallFS mounts a tmpfs of size bytes and returns it.
func NewSmallFS(t testing.TB, size int64) *SmallFS {
	t.Helper()
	dir, err := os.MkdirTemp("", "tetra-small-fs-")
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d,mode=0700", size), "tmpfs", dir).CombinedOutput()
	if err != nil {
		os.Remove(dir)
		Unavailable(t, "a small tmpfs (mount -t tmpfs)", "Run the test as root on a machine that allows mounts.",
			fmt.Errorf("%v: %s", err, strings.TrimSpace(string(out))))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Logf("testenv: umount %s: %v %s", dir, err, out)
		}
		os.Remove(dir)
	})
	return &SmallFS{t: t, Dir: dir, fill: filepath.Join(dir, "filler")}
}

// Fill writes a file until the filesystem is full (ENOSPC).
func (fs *SmallFS) Fill() {
	fs.t.Helper()
	f, err := os.OpenFile(fs.fill, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		fs.t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 64<<10)
	for {
		if _, err := f.Write(buf); err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				break
			}
			fs.t.Fatalf("testenv: fill %s: %v", fs.Dir, err)
		}
	}
	for len(buf) > 1 { // the last pages
		buf = buf[:len(buf)/2]
		for {
			if _, err := f.Write(buf); err != nil {
				break
			}
		}
	}
}

// Free removes what Fill wrote.
func (fs *SmallFS) Free() {
	fs.t.Helper()
	if err := os.Remove(fs.fill); err != nil && !errors.Is(err, os.ErrNotExist) {
		fs.t.Fatal(err)
	}
}
