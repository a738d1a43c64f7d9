package auth_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/tetra-messenger/tetra/workload/auth"
)

// A fresh data directory gets one complete secret file, mode 0600, and no
// temporary file is left behind (issue 24, point 6).
func TestLoadSecretCreatesOneCompleteFile(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	b, err := auth.LoadSecret("", dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(b) != 64 {
		t.Fatalf("secret of %d bytes, want 64 hex characters", len(b))
	}
	path := filepath.Join(dir, auth.SecretFile)
	raw, err := os.ReadFile(path)
	if err != nil || string(raw) != string(b)+"\n" {
		t.Fatalf("file holds %q (%v), want the secret and a newline", raw, err)
	}
	if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", fi.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("data directory holds %v, want only %s", entries, auth.SecretFile)
	}
	again, err := auth.LoadSecret("", dir)
	if err != nil || !bytes.Equal(again, b) {
		t.Fatalf("second load: %q, %v; want the same secret", again, err)
	}
}

// Processes creating the secret at once all end up with the one in the
// file: none reads a file another has created but not yet written. Before,
// the file was created empty and written afterwards, and a concurrent
// reader could find it empty ("shorter than 16 bytes").
func TestLoadSecretConcurrentCreatorsAgree(t *testing.T) {
	for round := 0; round < 50; round++ {
		dir := t.TempDir()
		const n = 8
		got := make([][]byte, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Add(1)
			go func() { defer wg.Done(); got[i], errs[i] = auth.LoadSecret("", dir) }()
		}
		wg.Wait()
		for i := range n {
			if errs[i] != nil {
				t.Fatalf("round %d, creator %d: %v", round, i, errs[i])
			}
			if !bytes.Equal(got[i], got[0]) {
				t.Fatalf("round %d: creators disagree: %q vs %q", round, got[i], got[0])
			}
		}
		file, err := auth.ReadSecret("", dir)
		if err != nil || !bytes.Equal(file, got[0]) {
			t.Fatalf("round %d: the file holds %q (%v), the creators use %q", round, file, err, got[0])
		}
	}
}

// An empty secret file, what a crash between create and write left behind
// before the file was written atomically, is replaced by a new secret
// instead of failing every later start.
func TestLoadSecretReplacesAnEmptyFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, auth.SecretFile)
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := auth.LoadSecret("", dir)
	if err != nil {
		t.Fatalf("start after an empty secret file: %v", err)
	}
	if raw, _ := os.ReadFile(path); string(raw) != string(b)+"\n" {
		t.Fatalf("file holds %q, want the new secret", raw)
	}
	// A short but not empty file is someone's secret: refused, not replaced.
	if err := os.WriteFile(path, []byte("short\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := auth.LoadSecret("", dir); err == nil {
		t.Fatal("a 5-byte secret was accepted")
	}
	if raw, _ := os.ReadFile(path); string(raw) != "short\n" {
		t.Fatalf("the short secret was replaced: %q", raw)
	}
}

// ReadSecret never creates a secret: without one it fails with ErrNoSecret,
// naming the file and TETRA_JWT_SECRET, and leaves the directory alone.
func TestReadSecretDoesNotCreate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	_, err := auth.ReadSecret("", dir)
	if !errors.Is(err, auth.ErrNoSecret) {
		t.Fatalf("err = %v, want ErrNoSecret", err)
	}
	for _, w := range []string{filepath.Join(dir, auth.SecretFile), "TETRA_JWT_SECRET"} {
		if !bytes.Contains([]byte(err.Error()), []byte(w)) {
			t.Errorf("error %q does not name %q", err, w)
		}
	}
	if _, serr := os.Stat(dir); !errors.Is(serr, os.ErrNotExist) {
		t.Errorf("ReadSecret created %s", dir)
	}
	if b, err := auth.ReadSecret("from-the-environment-123", dir); err != nil || string(b) != "from-the-environment-123" {
		t.Errorf("with TETRA_JWT_SECRET: %q, %v", b, err)
	}
}
