package serveproc

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Proc is one `tetra serve` child process, or the description of one not
// running yet. Set the fields, then Start; a Proc that exited may be
// started again. Methods are safe for concurrent use.
type Proc struct {
	// Bin is the tetra binary.
	Bin string
	// Args are the arguments after the binary ("serve", "--addr", Addr,
	// ...). They must make it listen on Addr.
	Args []string
	// Addr is the host:port it listens on; Start waits for
	// http://Addr/healthz to answer 200.
	Addr string
	// Env is its environment; nil inherits this process's.
	Env []string
	// LogPath receives its stdout and stderr, appended (created when
	// missing); every start appends to the file named at that start.
	LogPath string
	// DieWithParent has the kernel send it SIGTERM if this process dies
	// without stopping it (Linux only), so no server is orphaned.
	DieWithParent bool

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Start launches the process and waits up to timeout for /healthz to
// answer 200. It fails with the log's tail when the process exits first,
// when timeout passes (the process is killed) or when ctx ends (likewise).
func (p *Proc) Start(ctx context.Context, timeout time.Duration) error {
	logf, err := os.OpenFile(p.LogPath, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("serveproc: log file: %w", err)
	}
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Env = p.Env
	cmd.Stdout, cmd.Stderr = logf, logf
	if p.DieWithParent {
		setParentDeathSignal(cmd)
	}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("serveproc: start %s: %w", p.Bin, err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done, p.err = cmd, done, nil
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		logf.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	hc := &http.Client{Timeout: time.Second}
	for {
		if resp, err := hc.Get("http://" + p.Addr + "/healthz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-done:
			return fmt.Errorf("serveproc: tetra serve on %s exited at start (%v): %s", p.Addr, p.Err(), p.LogTail(4000))
		case <-ctx.Done():
			_, _ = p.Stop(syscall.SIGKILL, 10*time.Second)
			return ctx.Err()
		case <-deadline.C:
			_, _ = p.Stop(syscall.SIGKILL, 10*time.Second)
			return fmt.Errorf("serveproc: tetra serve on %s not healthy within %v: %s", p.Addr, timeout, p.LogTail(4000))
		case <-time.After(50 * time.Millisecond): // a child's HTTP port: there is no event to wait on
		}
	}
}

// Running reports whether the last started process has not exited.
func (p *Proc) Running() bool {
	p.mu.Lock()
	done := p.done
	p.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Pid is the process id of the last started process (0 before Start).
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Err is the last process's exit error (nil while it runs or when it
// exited 0).
func (p *Proc) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Signal sends sig to the running process without waiting.
func (p *Proc) Signal(sig os.Signal) error {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return errors.New("serveproc: not started")
	}
	return cmd.Process.Signal(sig)
}

// ErrKilled is returned by Stop when the process did not exit within its
// timeout and was killed.
var ErrKilled = errors.New("serveproc: killed after the stop timeout")

// Stop sends sig and waits up to timeout for the exit, then SIGKILLs and
// waits (returning ErrKilled). It returns how long the exit took and the
// exit error; a process that is not running returns at once.
func (p *Proc) Stop(sig os.Signal, timeout time.Duration) (time.Duration, error) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil || done == nil {
		return 0, nil
	}
	t0 := time.Now()
	select {
	case <-done:
		return 0, p.Err()
	default:
	}
	_ = cmd.Process.Signal(sig)
	select {
	case <-done:
		return time.Since(t0), p.Err()
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
		return time.Since(t0), ErrKilled
	}
}

// LogTail returns up to the last n bytes of the log file.
func (p *Proc) LogTail(n int) string {
	b, _ := os.ReadFile(p.LogPath)
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return strings.TrimSpace(string(b))
}
