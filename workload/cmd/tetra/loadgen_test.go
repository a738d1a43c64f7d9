package main

import (
	"bytes"
	"strings"
	"testing"
)

// --replicas 2 on the embedded default (SQLite, in-process index) is
// refused naming the flags it needs; TETRA_REPLICAS works like the flag.
func TestLoadgenReplicasNeedPostgresAndRedis(t *testing.T) {
	want := "--replicas 2 needs --store postgres://... and --index redis://..."
	var out, errb bytes.Buffer
	if code := run([]string{"loadgen", "--replicas", "2", "--quiet"}, &out, &errb); code == 0 || !strings.Contains(errb.String(), want) {
		t.Errorf("flag: exit %d, stderr %q; want non-zero naming %q", code, errb.String(), want)
	}
	t.Setenv("TETRA_REPLICAS", "2")
	errb.Reset()
	if code := run([]string{"loadgen", "--quiet"}, &out, &errb); code == 0 || !strings.Contains(errb.String(), want) {
		t.Errorf("env: exit %d, stderr %q; want non-zero naming %q", code, errb.String(), want)
	}
}

// --replicas 0 (or negative) is refused, not taken as 1.
func TestLoadgenRefusesZeroReplicas(t *testing.T) {
	for _, n := range []string{"0", "-1"} {
		var out, errb bytes.Buffer
		if code := run([]string{"loadgen", "--replicas", n, "--quiet"}, &out, &errb); code == 0 || !strings.Contains(errb.String(), "replicas must be >= 1, got "+n) {
			t.Errorf("--replicas %s: exit %d, stderr %q; want refused", n, code, errb.String())
		}
	}
}

// --demo has no environment variable: the usage shows none for it.
func TestServeUsageShowsNoEnvForDemo(t *testing.T) {
	var out, errb bytes.Buffer
	if code := run([]string{"serve", "-h"}, &out, &errb); code != 0 {
		t.Fatalf("serve -h: exit %d", code)
	}
	u := errb.String()
	if strings.Contains(u, "TETRA_DEMO") || !strings.Contains(u, "  --demo\n") || !strings.Contains(u, "[TETRA_ADDR]") {
		t.Errorf("usage:\n%s", u)
	}
}
