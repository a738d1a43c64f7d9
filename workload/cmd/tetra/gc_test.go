package main

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
)

// The server and the load generator raise GOGC (defaultGC) unless GOGC or
// GOMEMLIMIT says otherwise.
func TestDefaultGC(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	serve := func() {
		if err := serveGC(slog.New(slog.DiscardHandler)); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name           string
		set            func()
		gogc, memlimit string
		want           int
	}{
		{"loadgen", loadgenGC, "", "", loadgenGCPercent},
		{"loadgen", loadgenGC, "100", "", 100},
		{"loadgen", loadgenGC, "", "1GiB", 100},
		{"serve", serve, "", "", serveGCPercent},
		{"serve", serve, "50", "", 100},
		{"serve", serve, "", "1GiB", 100},
	} {
		t.Setenv("GOGC", tc.gogc)
		t.Setenv("GOMEMLIMIT", tc.memlimit)
		debug.SetGCPercent(100)
		tc.set()
		if got := debug.SetGCPercent(100); got != tc.want {
			t.Errorf("%s: GOGC=%q GOMEMLIMIT=%q: GC percent %d, want %d", tc.name, tc.gogc, tc.memlimit, got, tc.want)
		}
	}
}

// A bad AUTOMEMLIMIT stops serve with an error naming it, and changes
// nothing; "off" and a share in (0, 1] are accepted.
func TestServeGCRefusesBadAutomemlimit(t *testing.T) {
	old := debug.SetGCPercent(100)
	defer debug.SetGCPercent(old)
	t.Setenv("GOGC", "")
	t.Setenv("GOMEMLIMIT", "")
	for _, v := range []string{"abc", "0", "1.5", "-0.2", "NaN", "OFF"} {
		t.Setenv("AUTOMEMLIMIT", v)
		err := serveGC(slog.New(slog.DiscardHandler))
		if err == nil || !strings.Contains(err.Error(), "AUTOMEMLIMIT") {
			t.Errorf("AUTOMEMLIMIT=%q: err %v, want one naming AUTOMEMLIMIT", v, err)
		}
		if got := debug.SetGCPercent(100); got != 100 {
			t.Errorf("AUTOMEMLIMIT=%q: GC percent %d after the refusal, want 100", v, got)
		}
	}
	for _, v := range []string{"off", "0.5", "1", ""} {
		t.Setenv("AUTOMEMLIMIT", v)
		if err := serveGC(slog.New(slog.DiscardHandler)); err != nil {
			t.Errorf("AUTOMEMLIMIT=%q: %v", v, err)
		}
	}
}

// serveGC sets a soft memory limit of 90 % of the memory limit of the
// process's cgroup: a real cgroup (v1 or v2, whichever this machine
// mounts) with a 512 MiB limit, and this test binary run inside it.
func TestServeGCMemoryLimitFromCgroup(t *testing.T) {
	if os.Getenv("TETRA_GC_CHILD") == "1" {
		var buf bytes.Buffer
		if err := serveGC(slog.New(slog.NewTextHandler(&buf, nil))); err != nil {
			t.Fatal(err)
		}
		fmt.Print(buf.String())
		return
	}
	dir, limitFile := memoryCgroup(t)
	const limit = 512 << 20
	if err := os.WriteFile(filepath.Join(dir, limitFile), []byte(strconv.Itoa(limit)), 0o644); err != nil {
		t.Fatalf("set the cgroup's memory limit: %v", err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The shell joins the cgroup, then becomes the test binary.
	cmd := exec.Command("sh", "-c", `echo $$ > "$1/cgroup.procs" && exec "$2" -test.run '^TestServeGCMemoryLimitFromCgroup$'`, "sh", dir, self)
	cmd.Env = []string{"TETRA_GC_CHILD=1"}
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); k != "GOGC" && k != "GOMEMLIMIT" && k != "AUTOMEMLIMIT" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	want := fmt.Sprintf("memory_limit_bytes=%d", limit*9/10)
	if !strings.Contains(string(out), want) || !strings.Contains(string(out), "gogc=200") {
		t.Errorf("child logged:\n%s\nwant gogc=200 and %s", out, want)
	}
}

// memoryCgroup creates a memory cgroup for one test and returns its
// directory and the name of its limit file; it skips, saying why, where
// the test cannot create one (not root, no writable cgroup mount).
func memoryCgroup(t *testing.T) (dir, limitFile string) {
	t.Helper()
	for _, c := range []struct{ root, limit string }{
		{"/sys/fs/cgroup/memory", "memory.limit_in_bytes"}, // v1
		{"/sys/fs/cgroup", "memory.max"},                   // v2 (unified)
	} {
		if _, err := os.Stat(filepath.Join(c.root, "cgroup.procs")); err != nil {
			continue
		}
		if c.limit == "memory.max" {
			if b, err := os.ReadFile(filepath.Join(c.root, "cgroup.subtree_control")); err != nil || !strings.Contains(string(b), "memory") {
				continue
			}
		}
		d := filepath.Join(c.root, fmt.Sprintf("tetra-gc-test-%d", os.Getpid()))
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Skipf("SKIPPED: cannot create a memory cgroup under %s: %v", c.root, err)
		}
		t.Cleanup(func() { os.Remove(d) })
		return d, c.limit
	}
	t.Skip("SKIPPED: no writable memory cgroup on this machine")
	return "", ""
}
