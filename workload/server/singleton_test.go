package server

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/tetra-messenger/tetra/workload/auth"
)

// The embedded default is one process only: a second server on the same
// data directory is refused, naming the directory; after the first stops,
// a new one starts.
func TestEmbeddedDefaultIsSingleInstance(t *testing.T) {
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.Addr, cfg.DataDir = "127.0.0.1:0", dir
	first, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(context.Background(), cfg); !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("second server on %s: %v, want ErrAlreadyRunning", dir, err)
	}
	if err := first.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := first.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	again, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("after the first stopped: %v", err)
	}
	again.Start(context.Background())
	again.Shutdown(context.Background())
}

// The embedded default reads (and creates) its secret only once it holds
// the data directory's lock: a second process refused by the lock leaves
// the directory as it found it (issue 24, point 6). Before, the secret was
// created before the lock was taken.
func TestSecretIsCreatedOnlyUnderTheDataDirLock(t *testing.T) {
	dir := t.TempDir()
	unlock, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer unlock()
	cfg := DefaultConfig()
	cfg.Addr, cfg.DataDir = "127.0.0.1:0", dir
	if _, err := New(context.Background(), cfg); !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("server on a locked data directory: %v, want ErrAlreadyRunning", err)
	}
	if _, err := os.Stat(filepath.Join(dir, auth.SecretFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused server touched %s: %v", auth.SecretFile, err)
	}
}
