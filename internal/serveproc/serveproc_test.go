package serveproc_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/internal/serveproc"
	"github.com/tetra-messenger/tetra/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveBinary()
	os.Exit(code)
}

// A server that starts is healthy when Start returns, stops on SIGTERM
// (exit 0), and starts again on the same address.
func TestStartStopRestart(t *testing.T) {
	addr := testenv.FreeAddr(t)
	p := &serveproc.Proc{Bin: testenv.TetraBinary(t), Addr: addr,
		Args:    []string{"serve", "--addr", addr, "--data", t.TempDir()},
		LogPath: filepath.Join(t.TempDir(), "serve.log")}
	for run := range 2 {
		if err := p.Start(t.Context(), 30*time.Second); err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
		if !p.Running() || p.Pid() == 0 {
			t.Fatalf("run %d: not running after Start", run)
		}
		if _, err := p.Stop(syscall.SIGTERM, 20*time.Second); err != nil {
			t.Fatalf("run %d: stop: %v", run, err)
		}
		if p.Running() {
			t.Fatalf("run %d: still running after Stop", run)
		}
	}
	if !strings.Contains(p.LogTail(100000), "tetra serving") {
		t.Fatalf("log lacks the start line: %s", p.LogTail(2000))
	}
}

// A server that exits at start fails Start with its log.
func TestStartReportsAnEarlyExit(t *testing.T) {
	addr := testenv.FreeAddr(t)
	p := &serveproc.Proc{Bin: testenv.TetraBinary(t), Addr: addr,
		Args:    []string{"serve", "--addr", addr, "--data", t.TempDir(), "--store", "nosuch://x"},
		LogPath: filepath.Join(t.TempDir(), "serve.log")}
	err := p.Start(context.Background(), 30*time.Second)
	if err == nil || !strings.Contains(err.Error(), "exited at start") || !strings.Contains(err.Error(), "nosuch") {
		t.Fatalf("Start = %v; want an early exit quoting the server's error", err)
	}
}
