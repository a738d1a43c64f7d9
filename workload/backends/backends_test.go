package backends

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tetra-messenger/tetra/internal/testenv"
	"github.com/tetra-messenger/tetra/workload/auth"
)

// The embedded default: SQLite in DataDir with its outbox, the in-process
// index with a presence map and no fleet presence for the nudge, a write
// probe; Close is idempotent and lets the next Open take the directory.
func TestOpenEmbeddedDefault(t *testing.T) {
	dir := t.TempDir()
	b, err := Open(t.Context(), Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if b.StoreKind != "sqlite" || b.OutboxKind != "sqlite" || b.IndexKind != "memory" {
		t.Errorf("kinds %s/%s/%s, want sqlite/sqlite/memory", b.StoreKind, b.OutboxKind, b.IndexKind)
	}
	if b.Store == nil || b.Outbox == nil || b.Feed == nil || b.Index == nil || b.Presence == nil || b.Signer == nil || b.Prober == nil {
		t.Errorf("a backend is missing: %+v", b)
	}
	if b.NudgePresence != nil {
		t.Errorf("NudgePresence %T with the in-process index, want nil", b.NudgePresence)
	}
	if r, err := b.NewRelay(nil); r != nil || err != nil {
		t.Errorf("NewRelay without Kafka = %v, %v; want nil, nil", r, err)
	}
	if _, err := Open(t.Context(), Config{DataDir: dir}); !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("second Open on %s: %v, want ErrAlreadyRunning", dir, err)
	}
	first := b.Close()
	if again := b.Close(); !errors.Is(again, first) && again != first {
		t.Errorf("second Close = %v, first %v", again, first)
	}
	b2, err := Open(t.Context(), Config{DataDir: dir})
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	b2.Close()
}

// Every step of Open that fails after the store is open closes the store
// and releases the data directory's lock: a later Open of the same
// directory succeeds. A failure before the store (the outbox URL) touches
// nothing, not even the secret.
func TestOpenFailureClosesWhatItOpened(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		cfg        Config
		touches    bool // the secret file exists after the failure
	}{
		{"outbox scheme", "--outbox", Config{Outbox: "nats://127.0.0.1:4222/x"}, false},
		{"index kind", "--index", Config{Index: "bogus"}, true},
		{"redis unreachable", "Redis index unreachable", Config{Index: "redis://127.0.0.1:1/0"}, true},
		{"sentinel master url", "--index-sentinel-master-url", Config{Index: "sentinel", IndexSentinelAddrs: []string{"127.0.0.1:1"}, IndexSentinelMasterURL: "http://x"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			cfg := tc.cfg
			cfg.DataDir = dir
			if _, err := Open(t.Context(), cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open = %v, want an error naming %s", err, tc.want)
			}
			if _, err := os.Stat(filepath.Join(dir, auth.SecretFile)); (err == nil) != tc.touches {
				t.Errorf("secret file after the failure: %v (want it there: %v)", err, tc.touches)
			}
			b, err := Open(t.Context(), Config{DataDir: dir})
			if err != nil {
				t.Fatalf("Open after the failed one: %v", err)
			}
			if err := b.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
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
	if _, err := Open(context.Background(), Config{DataDir: dir}); !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("Open on a locked data directory: %v, want ErrAlreadyRunning", err)
	}
	if _, err := os.Stat(filepath.Join(dir, auth.SecretFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused Open touched %s: %v", auth.SecretFile, err)
	}
}

// On PostgreSQL with a Redis index the locks are steps of Open and Close
// releases them: while one process is open, another with a different token
// secret is refused as another fleet; once the first is closed, the other
// opens (and records its identity).
func TestOpenPostgresRedisLocks(t *testing.T) {
	pg := testenv.Postgres(t)
	redisURL, prefix := testenv.Redis(t)
	cfg := Config{DataDir: t.TempDir(), Store: pg, Index: redisURL, IndexPrefix: prefix, IndexOwner: "pod-a",
		JWTSecret: "0123456789abcdef0123456789abcdef"}
	a, err := Open(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	if a.StoreKind != "postgres" || a.IndexKind != "redis" || a.NudgePresence == nil || a.Presence == nil {
		t.Errorf("kinds %s/%s, nudge presence %v", a.StoreKind, a.IndexKind, a.NudgePresence)
	}
	other := cfg
	other.IndexOwner, other.JWTSecret = "pod-b", "fedcba9876543210fedcba9876543210"
	if _, err := Open(t.Context(), other); err == nil || !strings.Contains(err.Error(), "token secret") {
		t.Fatalf("Open with another secret beside a running process: %v, want the fleet refusal naming the token secret", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := Open(t.Context(), other)
	if err != nil {
		t.Fatalf("Open with another secret once the first closed: %v", err)
	}
	b.Close()
}
