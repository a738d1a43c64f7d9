package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetra-messenger/tetra/internal/testenv"
	"github.com/tetra-messenger/tetra/workload/auth"
)

// Unreachable stores at start: exit non-zero with an error naming which and
// where (and no password).
func TestServeRefusesUnreachableStores(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--store", "postgres://tetra:hunter2@127.0.0.1:1/db"}, []string{"PostgreSQL", "127.0.0.1:1"}},
		{[]string{"--index", "redis://:hunter2@127.0.0.1:1/0"}, []string{"Redis", "127.0.0.1:1"}},
		{[]string{"--store", "mysql://x"}, []string{"--store", "supported"}},
		{[]string{"--max-pending", "0"}, []string{"maxPending"}},
	} {
		var out, errb bytes.Buffer
		args := append([]string{"serve", "--addr", "127.0.0.1:0", "--data", t.TempDir()}, tc.args...)
		if code := run(args, &out, &errb); code == 0 {
			t.Errorf("%v: exit 0", tc.args)
		}
		msg := errb.String()
		for _, w := range tc.want {
			if !strings.Contains(msg, w) {
				t.Errorf("%v: error does not name %q:\n%s", tc.args, w, msg)
			}
		}
		if strings.Contains(msg, "hunter2") {
			t.Errorf("%v: the error leaks the password:\n%s", tc.args, msg)
		}
	}
}

// secretDir returns a data directory holding a secret, as one a server has
// run on does.
func secretDir(t *testing.T) string {
	dir := t.TempDir()
	if _, err := auth.LoadSecret("", dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// tetra token against a data directory without a secret refuses, naming
// the file and TETRA_JWT_SECRET, prints no token and creates nothing
// (issue 24, point 6). Before, it created a secret of its own and printed
// a token no server accepted.
func TestTokenRefusesWithoutASecret(t *testing.T) {
	t.Setenv("TETRA_JWT_SECRET", "")
	dir := filepath.Join(t.TempDir(), "data")
	var out, errb bytes.Buffer
	if code := run([]string{"token", "--user", "alice", "--data", dir}, &out, &errb); code == 0 || out.Len() != 0 {
		t.Fatalf("exit %d, stdout %q: want refused, no token", code, out.String())
	}
	for _, w := range []string{filepath.Join(dir, auth.SecretFile), "TETRA_JWT_SECRET", "--data"} {
		if !strings.Contains(errb.String(), w) {
			t.Errorf("the error does not name %q: %s", w, errb.String())
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("tetra token created %s", dir)
	}
	t.Setenv("TETRA_JWT_SECRET", "a-secret-from-the-environment")
	out.Reset()
	if code := run([]string{"token", "--user", "alice", "--data", dir}, &out, &errb); code != 0 || strings.Count(out.String(), ".") != 2 {
		t.Errorf("with TETRA_JWT_SECRET: exit %d, stdout %q", code, out.String())
	}
}

func TestTokenPrintsOnlyTheToken(t *testing.T) {
	dir := secretDir(t)
	var out, errb bytes.Buffer
	if code := run([]string{"token", "--user", "alice", "--data", dir}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	tok := strings.TrimSpace(out.String())
	if strings.Count(tok, ".") != 2 || strings.Contains(tok, " ") || strings.Count(out.String(), "\n") != 1 {
		t.Fatalf("stdout is not exactly one JWT line: %q", out.String())
	}
}

// An admin token has no user: --admin with --user (or TETRA_USER) is
// refused naming both, and prints no token (issue 13, point 7). Before, the
// --user was silently ignored and an admin token printed.
func TestTokenRefusesAdminWithUser(t *testing.T) {
	dir := secretDir(t)
	for _, tc := range []struct {
		name string
		args []string
		env  string
	}{
		{"flag", []string{"token", "--admin", "--user", "x", "--data", dir}, ""},
		{"environment", []string{"token", "--admin", "--data", dir}, "x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("TETRA_USER", tc.env)
			}
			var out, errb bytes.Buffer
			code := run(tc.args, &out, &errb)
			if code == 0 || out.Len() != 0 {
				t.Fatalf("exit %d, stdout %q: want refused, no token", code, out.String())
			}
			if msg := errb.String(); !strings.Contains(msg, "--admin") || !strings.Contains(msg, "--user") {
				t.Errorf("the error does not name --admin and --user: %q", msg)
			}
		})
	}
	var out, errb bytes.Buffer
	if code := run([]string{"token", "--admin", "--data", dir}, &out, &errb); code != 0 || strings.Count(out.String(), ".") != 2 {
		t.Errorf("--admin alone: exit %d, stdout %q, stderr %q", code, out.String(), errb.String())
	}
}

// serve --demo mints tokens for anyone who asks, so without an explicit
// address it listens on loopback only and says so; an explicit --addr (or
// TETRA_ADDR) is kept, and without --demo the default stays all interfaces
// (issue 13, point 7). Before, --demo listened on :8080.
func TestServeDemoDefaultsToLoopback(t *testing.T) {
	for _, tc := range []struct {
		name     string
		args     []string
		env      string
		want     string
		loopback bool // the log says the demo listens on loopback
	}{
		{"demo", []string{"--demo"}, "", "127.0.0.1:8080", true},
		{"demo with --addr", []string{"--demo", "--addr", ":9000"}, "", ":9000", false},
		{"demo with TETRA_ADDR", []string{"--demo"}, "0.0.0.0:9001", "0.0.0.0:9001", false},
		{"no demo", nil, "", ":8080", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.env != "" {
				t.Setenv("TETRA_ADDR", tc.env)
			}
			var errb bytes.Buffer
			cfg, _, _, err := serveConfig(append([]string{"--data", t.TempDir()}, tc.args...), &errb)
			if err != nil {
				t.Fatal(err)
			}
			if cfg.Addr != tc.want {
				t.Errorf("listen address %q, want %q", cfg.Addr, tc.want)
			}
			if said := strings.Contains(errb.String(), "loopback"); said != tc.loopback {
				t.Errorf("log says loopback: %v, want %v:\n%s", said, tc.loopback, errb.String())
			}
		})
	}
	var errb bytes.Buffer
	run([]string{"serve", "-h"}, io.Discard, &errb)
	if !strings.Contains(errb.String(), "127.0.0.1") {
		t.Errorf("serve -h does not say where --demo listens:\n%s", errb.String())
	}
}

// runMainEnv makes the test binary run `tetra` itself (TestMain) with the
// arguments it holds, separated by U+001F, so a test can watch the real
// process's stderr: libraries that print on os.Stderr by themselves write
// there, not to run's writer.
const runMainEnv = "TETRA_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if args, ok := os.LookupEnv(runMainEnv); ok {
		os.Exit(run(strings.Split(args, "\x1f"), os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// With --log-format json every line on stderr is one JSON object, the
// libraries' own included: go-redis printed "redis: 2026/12/01 ...
// pool.go:770: redis: connection pool: failed to dial ..." in plain text
// while its Redis was unreachable, and the final error was plain text too
// (issue 13, point 7).
func TestServeJSONLogsAreAllJSON(t *testing.T) {
	args := []string{"serve", "--addr", "127.0.0.1:0", "--data", t.TempDir(), "--log-format", "json",
		"--index", "redis://" + testenv.FreeAddr(t) + "/0"}
	cmd := exec.CommandContext(t.Context(), os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), runMainEnv+"="+strings.Join(args, "\x1f"))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err == nil {
		t.Fatal("serve with an unreachable Redis exited 0")
	}
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	sawRedis, sawExit := false, false
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Errorf("not a JSON line: %q", l)
			continue
		}
		msg, _ := rec["msg"].(string)
		sawRedis = sawRedis || strings.Contains(msg, "connection pool")
		sawExit = sawExit || (rec["level"] == "ERROR" && strings.Contains(fmt.Sprint(rec["err"]), "Redis index unreachable"))
	}
	if !sawRedis || !sawExit {
		t.Errorf("want go-redis's dial failure and the exit error among the JSON lines (saw %v, %v):\n%s", sawRedis, sawExit, stderr.String())
	}
}

func TestServeNudgeSecret(t *testing.T) {
	var errb bytes.Buffer
	if _, _, _, err := serveConfig([]string{"--data", t.TempDir(), "--nudge-url", "http://127.0.0.1:9/nudge"}, &errb); err == nil || !strings.Contains(err.Error(), "TETRA_NUDGE_SECRET") {
		t.Errorf("--nudge-url without a secret: %v, want an error naming TETRA_NUDGE_SECRET", err)
	}
	t.Setenv("TETRA_NUDGE_SECRET", "short")
	if _, _, _, err := serveConfig([]string{"--data", t.TempDir(), "--nudge-url", "http://127.0.0.1:9/nudge"}, &errb); err == nil || !strings.Contains(err.Error(), "16 bytes") {
		t.Errorf("a 5-byte secret: %v, want refused", err)
	}
	if _, _, _, err := serveConfig([]string{"--data", t.TempDir(), "--nudge-url", "ftp://x/nudge"}, &errb); err == nil || !strings.Contains(err.Error(), "--nudge-url") {
		t.Errorf("an ftp URL: %v, want refused naming --nudge-url", err)
	}
	t.Setenv("TETRA_NUDGE_SECRET", "")
	f := t.TempDir() + "/secret"
	if err := os.WriteFile(f, []byte("0123456789abcdef-from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, _, _, err := serveConfig([]string{"--data", t.TempDir(), "--nudge-url", "https://push.example.com/n", "--nudge-secret-file", f, "--nudge-batch-size", "7"}, &errb)
	if err != nil {
		t.Fatal(err)
	}
	if string(cfg.Nudge.Secret) != "0123456789abcdef-from-file" || cfg.Nudge.BatchSize != 7 || cfg.Nudge.URL != "https://push.example.com/n" {
		t.Errorf("nudge config %+v", cfg.Nudge)
	}
	if cfg, _, _, err := serveConfig([]string{"--data", t.TempDir()}, &errb); err != nil || cfg.Nudge.URL != "" {
		t.Errorf("default: nudge %q, err %v; want off", cfg.Nudge.URL, err)
	}
}
