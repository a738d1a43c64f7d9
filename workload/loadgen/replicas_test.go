package loadgen

import (
	"context"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tetra-messenger/tetra/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveBinary()
	os.Exit(code)
}

// Several processes need a shared store and index: refused up front,
// naming the flags, before anything starts.
func TestReplicasRefusedWithoutSharedStoreAndIndex(t *testing.T) {
	for _, tc := range []struct {
		name string
		mut  func(*Config)
		want string
	}{
		{"embedded default", func(c *Config) {}, "--replicas 2 needs --store postgres://... and --index redis://..."},
		{"memory index", func(c *Config) { c.Server.Store = "postgres://u:hunter2@127.0.0.1:1/db" }, "--replicas 2 needs --store postgres://... and --index redis://..."},
		{"sqlite store", func(c *Config) { c.Server.Index = "redis://127.0.0.1:1/0" }, "--replicas 2 needs --store postgres://... and --index redis://..."},
		{"in process", func(c *Config) {
			c.InProcess, c.Server.Store, c.Server.Index = true, "postgres://127.0.0.1:1/db", "redis://127.0.0.1:1/0"
		}, "--in-process"},
		{"url", func(c *Config) { c.URL, c.Secret = "http://127.0.0.1:1", "s" }, "--url"},
	} {
		cfg := DefaultConfig()
		cfg.Replicas = 2
		tc.mut(&cfg)
		_, err := Run(context.Background(), cfg)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want one containing %q", tc.name, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: the error leaks the password: %v", tc.name, err)
		}
	}
}

func TestSplitURLs(t *testing.T) {
	got := splitURLs(" http://a:1, http://b:2/ ,,")
	if len(got) != 2 || got[0] != "http://a:1" || got[1] != "http://b:2/" {
		t.Fatalf("splitURLs: %q", got)
	}
}

// TestTwoReplicasOnPostgresAndRedis drives two `tetra serve` processes
// sharing one PostgreSQL database and one Redis prefix. Pairs are split
// over the processes, so every delivery crosses processes (through the
// shared outbox: the poller or the cross-process wake-up). Nothing may be
// lost, both processes must have clients, and the run's Redis keys are
// gone afterwards. Latency is not asserted.
func TestTwoReplicasOnPostgresAndRedis(t *testing.T) {
	pg := testenv.Postgres(t)
	redisURL, prefix := testenv.Redis(t)
	cfg := DefaultConfig()
	cfg.ServerBinary = testenv.TetraBinary(t)
	cfg.Replicas = 2
	cfg.Server.Store, cfg.Server.Index, cfg.Server.IndexPrefix = pg, redisURL, prefix
	cfg.Clients, cfg.Rate, cfg.Duration, cfg.Drain = 20, 40, 3*time.Second, 30*time.Second
	cfg.Server.Tuning.GCGrace = 200 * time.Millisecond
	cfg.Server.Tuning.GCInterval = 100 * time.Millisecond
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", rep)
	if rep.Accepted < 60 || rep.Lost != 0 || rep.Expected != rep.Accepted {
		t.Fatalf("accepted %d, expected %d, lost %d", rep.Accepted, rep.Expected, rep.Lost)
	}
	if rep.Replicas != 2 || len(rep.Processes) != 2 {
		t.Fatalf("report names %d replicas, %d processes; want 2", rep.Replicas, len(rep.Processes))
	}
	for i, ps := range rep.Processes {
		if ps.Clients != cfg.Clients/2 {
			t.Errorf("process %d had %d clients, want %d", i, ps.Clients, cfg.Clients/2)
		}
		if ps.PeakRSS <= 0 || ps.CPUSeconds <= 0 {
			t.Errorf("process %d: no RSS/CPU (%d B, %.2f s)", i, ps.PeakRSS, ps.CPUSeconds)
		}
	}
	// Partners are on different processes: every live delivery crosses.
	if rep.CrossProcessDeliveries < rep.Accepted*9/10 || rep.SameProcessDeliveries != 0 {
		t.Errorf("cross-process deliveries %d, same-process %d; want about %d and 0", rep.CrossProcessDeliveries, rep.SameProcessDeliveries, rep.Accepted)
	}
	if !strings.Contains(rep.String(), "server processes") {
		t.Errorf("the report does not say how many processes:\n%s", rep)
	}
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(opt)
	defer rc.Close()
	keys, _, err := rc.Scan(context.Background(), 0, prefix+"lg*", 1000).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) > 0 {
		t.Errorf("the run left %d Redis keys under its prefix, e.g. %s", len(keys), keys[0])
	}
}

// TestKilledReplicaClientsMoveToTheOther kills one of two processes
// (SIGKILL) a second into the send phase: its clients reconnect to the
// other process, and nothing accepted is lost.
func TestKilledReplicaClientsMoveToTheOther(t *testing.T) {
	pg := testenv.Postgres(t)
	redisURL, prefix := testenv.Redis(t)
	cfg := DefaultConfig()
	cfg.ServerBinary = testenv.TetraBinary(t)
	cfg.Replicas = 2
	cfg.Server.Store, cfg.Server.Index, cfg.Server.IndexPrefix = pg, redisURL, prefix
	cfg.Clients, cfg.Rate, cfg.Duration, cfg.Drain = 20, 40, 4*time.Second, 30*time.Second
	cfg.connected = func(f *fleet) {
		time.AfterFunc(time.Second, func() { _ = f.targets[1].(*child).proc.Signal(syscall.SIGKILL) })
	}
	rep, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("\n%s", rep)
	if rep.Accepted < 80 || rep.Lost != 0 {
		t.Fatalf("accepted %d, lost %d", rep.Accepted, rep.Lost)
	}
	if rep.Reconnects < int64(cfg.Clients/2) {
		t.Errorf("%d reconnects, want at least the %d clients of the killed process", rep.Reconnects, cfg.Clients/2)
	}
	if len(rep.Processes) != 2 || rep.Processes[0].Clients != cfg.Clients || rep.Processes[1].Clients != 0 {
		t.Errorf("clients per process at the end: %+v; want all on process 0", rep.Processes)
	}
}
