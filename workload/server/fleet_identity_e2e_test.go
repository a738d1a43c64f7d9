package server_test

import (
	"context"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tetra-messenger/tetra/internal/testenv"
	"github.com/tetra-messenger/tetra/workload/server"
)

// One PostgreSQL database is one fleet: its processes share one Redis, one
// --index-prefix and one token secret (issue 24, point 1). The store
// records the fleet's identity and a process that disagrees with a live
// fleet is refused at start, naming what differs.

// otherRedisDB returns redisURL with another database number, and deletes
// the keys under prefix there when the test ends.
func otherRedisDB(t *testing.T, redisURL, prefix string) string {
	t.Helper()
	u, err := url.Parse(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	db, _ := strconv.Atoi(strings.TrimPrefix(u.Path, "/"))
	u.Path = "/" + strconv.Itoa((db+1)%16)
	other := u.String()
	opt, err := redis.ParseURL(other)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c := redis.NewClient(opt)
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		testenv.DeletePrefix(ctx, c, prefix)
	})
	return other
}

// redisHostDB names a Redis URL's server and database as a fleet identity
// does: "host:port db N".
func redisHostDB(t *testing.T, redisURL string) string {
	t.Helper()
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	return opt.Addr + " db " + strconv.Itoa(opt.DB)
}

// startErr runs New and Start for cfg and returns the error; a server that
// started is shut down at once.
func startErr(t *testing.T, cfg server.Config) error {
	t.Helper()
	srv, err := server.New(t.Context(), cfg)
	if err == nil {
		err = srv.Start(t.Context())
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}
	return err
}

// TestFleetRefusesAnotherRedisOnOneDatabase: today's split. A process on
// the fleet's database and prefix but another Redis database number would
// keep a second waterline over the one outbox (its GC deleting rows the
// fleet's clients have not acknowledged) and none of the fleet's wake-ups,
// 4001s or chat events would reach it. It is refused, the error naming
// both Redis deployments and how to fix it; a process of the fleet's own
// configuration still joins.
func TestFleetRefusesAnotherRedisOnOneDatabase(t *testing.T) {
	fleet := newFleet(t, 1, nil)
	split := fleet[0].cfg
	split.Addr = "127.0.0.1:0"
	split.IndexOwner = "pod-split"
	split.Index = otherRedisDB(t, fleet[0].cfg.Index, fleet[0].cfg.IndexPrefix)
	err := startErr(t, split)
	if err == nil {
		t.Fatalf("a process on the fleet's database and prefix with another Redis (%s) started", split.Index)
	}
	for _, w := range []string{"Redis", redisHostDB(t, fleet[0].cfg.Index), redisHostDB(t, split.Index), "--index"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the refusal does not name %q: %v", w, err)
		}
	}
	t.Logf("refused: %v", err)
	same := fleet[0].cfg
	same.Addr, same.IndexOwner = "127.0.0.1:0", "pod-1"
	startServer(t, same) // the fleet's own configuration joins
}

// TestFleetRefusesAnotherJWTSecretOnOneDatabase: a process with another
// token secret would answer 401 to every token the rest of the fleet
// accepts. It is refused naming TETRA_JWT_SECRET, and the error carries no
// secret.
func TestFleetRefusesAnotherJWTSecretOnOneDatabase(t *testing.T) {
	fleet := newFleet(t, 1, nil)
	other := fleet[0].cfg
	other.Addr = "127.0.0.1:0"
	other.IndexOwner = "pod-other-secret"
	other.JWTSecret = "another-secret-0123456789abcdef"
	err := startErr(t, other)
	if err == nil {
		t.Fatal("a process with another TETRA_JWT_SECRET joined the fleet")
	}
	if !strings.Contains(err.Error(), "TETRA_JWT_SECRET") {
		t.Errorf("the refusal does not name TETRA_JWT_SECRET: %v", err)
	}
	for _, secret := range []string{other.JWTSecret, fleet[0].cfg.JWTSecret} {
		if strings.Contains(err.Error(), secret) {
			t.Fatalf("the refusal leaks a secret: %v", err)
		}
	}
	t.Logf("refused: %v", err)
}

// TestFleetIdentityChangesWhenTheFleetIsGone: the record binds only while
// a process of the fleet runs. Once every process has stopped, a fleet of
// another Redis, prefix or secret may take the database over (a move to a
// new Redis, a secret rotated with a full restart), and then the old
// configuration is the one refused.
func TestFleetIdentityChangesWhenTheFleetIsGone(t *testing.T) {
	fleet := newFleet(t, 1, nil)
	moved := fleet[0].cfg
	moved.Addr = "127.0.0.1:0"
	moved.Index = otherRedisDB(t, fleet[0].cfg.Index, fleet[0].cfg.IndexPrefix)
	moved.JWTSecret = "a-rotated-secret-0123456789abcdef"
	if err := fleet[0].srv.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	startServer(t, moved)
	old := fleet[0].cfg
	old.Addr, old.IndexOwner = "127.0.0.1:0", "pod-old"
	if err := startErr(t, old); err == nil || !strings.Contains(err.Error(), "Redis") || !strings.Contains(err.Error(), "TETRA_JWT_SECRET") {
		t.Fatalf("the old configuration next to the moved fleet: err = %v, want a refusal naming Redis and TETRA_JWT_SECRET", err)
	}
}
