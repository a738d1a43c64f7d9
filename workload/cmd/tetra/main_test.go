package main

import (
	"bytes"
	"strings"
	"testing"
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

func TestTokenPrintsOnlyTheToken(t *testing.T) {
	dir := t.TempDir()
	var out, errb bytes.Buffer
	if code := run([]string{"token", "--user", "alice", "--data", dir}, &out, &errb); code != 0 {
		t.Fatalf("exit %d: %s", code, errb.String())
	}
	tok := strings.TrimSpace(out.String())
	if strings.Count(tok, ".") != 2 || strings.Contains(tok, " ") || strings.Count(out.String(), "\n") != 1 {
		t.Fatalf("stdout is not exactly one JWT line: %q", out.String())
	}
}
