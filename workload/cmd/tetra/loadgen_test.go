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
