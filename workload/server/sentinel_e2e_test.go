package server_test

import (
	"strings"
	"testing"

	goredis "github.com/redis/go-redis/v9"

	"github.com/tetra-messenger/tetra/internal/operator/redistest"
	"github.com/tetra-messenger/tetra/workload/server"
)

// In Sentinel mode the master's credentials and database come from
// IndexSentinelMasterURL (TETRA_INDEX_SENTINEL_MASTER_URL, which the
// operator fills from the Messenger's Redis Secret): a password-protected
// master is refused without it, naming Redis, and serves with it; the URL's
// host is not used to connect.
func TestSentinelMasterCredentials(t *testing.T) {
	t.Parallel()
	master := redistest.Start(t, 0)
	sentinel := redistest.StartSentinel(t, "mymaster", master.Addr())
	if _, err := master.Do("CONFIG", "SET", "requirepass", "s3cret"); err != nil {
		t.Fatal(err)
	}
	cfg := server.DefaultConfig()
	cfg.Addr, cfg.DataDir, cfg.Store = "127.0.0.1:0", t.TempDir(), "sqlite"
	cfg.Index, cfg.IndexSentinelAddrs, cfg.IndexSentinelMaster = "sentinel", []string{sentinel.Addr()}, "mymaster"
	if srv, err := server.New(t.Context(), cfg); err == nil {
		srv.Shutdown(t.Context())
		t.Fatal("a password-protected Sentinel master without credentials: server.New succeeded")
	} else if !strings.Contains(err.Error(), "Redis") {
		t.Fatalf("error does not name Redis: %v", err)
	}
	cfg.IndexSentinelMasterURL = "redis://:s3cret@not-this-host.invalid:1/2"
	startServer(t, cfg)
	// The index lives in database 2 of the master Sentinel named.
	for db, want := range map[int]bool{2: true, 0: false} {
		c := goredis.NewClient(&goredis.Options{Addr: master.Addr(), Password: "s3cret", DB: db})
		keys, err := c.Keys(t.Context(), "tetra:*").Result()
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if (len(keys) > 0) != want {
			t.Errorf("database %d holds %d index keys, want some: %v", db, len(keys), want)
		}
	}
}

// The URL applies only with Sentinel.
func TestSentinelMasterURLNeedsSentinel(t *testing.T) {
	t.Parallel()
	cfg := server.DefaultConfig()
	cfg.Addr, cfg.DataDir = "127.0.0.1:0", t.TempDir()
	cfg.IndexSentinelMasterURL = "redis://:x@h/0"
	if _, err := server.New(t.Context(), cfg); err == nil || !strings.Contains(err.Error(), "--index-sentinel-master-url") {
		t.Fatalf("err = %v, want a refusal naming --index-sentinel-master-url", err)
	}
}
