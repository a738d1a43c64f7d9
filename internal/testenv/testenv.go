package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/tetra-messenger/tetra/workload/config"
)

// Default service addresses.
const (
	DefaultPostgres = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	DefaultRedis    = "redis://127.0.0.1:6379/0"
)

// InCI reports whether skipping is forbidden (CI=true).
func InCI() bool { return os.Getenv("CI") == "true" }

// Unavailable skips the test loudly, or fails it under CI=true.
func Unavailable(t testing.TB, what, how string, err error) {
	t.Helper()
	msg := fmt.Sprintf("SKIPPED: %s is not reachable (%v). %s", what, err, how)
	if InCI() {
		t.Fatalf("CI=true forbids skipping: %s", msg)
	}
	fmt.Fprintf(os.Stderr, "\n!!! %s: %s\n\n", t.Name(), msg)
	t.Skip(msg)
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func randomSuffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Postgres creates a fresh database for the test and returns its URL; the
// database is dropped when the test ends.
func Postgres(t testing.TB) string {
	t.Helper()
	admin := env("TETRA_TEST_POSTGRES", DefaultPostgres)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		Unavailable(t, "PostgreSQL at "+config.RedactURL(admin), "Start it with `pg_ctlcluster --skip-systemctl-redirect 15 main start` or set TETRA_TEST_POSTGRES.", err)
	}
	defer conn.Close(context.Background())
	name := "tetra_test_" + randomSuffix()
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("testenv: create database %s: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, admin)
		if err != nil {
			t.Logf("testenv: drop database %s: %v", name, err)
			return
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)"); err != nil {
			t.Logf("testenv: drop database %s: %v", name, err)
		}
	})
	u, err := url.Parse(admin)
	if err != nil {
		t.Fatalf("testenv: parse %s: %v", config.RedactURL(admin), err)
	}
	u.Path = "/" + name
	return u.String()
}

// Redis returns the Redis URL and a key prefix unique to the test; every key
// under the prefix is deleted when the test ends.
func Redis(t testing.TB) (redisURL, prefix string) {
	t.Helper()
	redisURL = env("TETRA_TEST_REDIS", DefaultRedis)
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Fatalf("testenv: parse TETRA_TEST_REDIS: %v", err)
	}
	c := redis.NewClient(opt)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.Ping(ctx).Err(); err != nil {
		c.Close()
		Unavailable(t, "Redis at "+redisURL, "Start it with `redis-server --daemonize yes --port 6379 --save \"\" --appendonly no` or set TETRA_TEST_REDIS.", err)
	}
	prefix = "tetratest:" + randomSuffix() + ":"
	t.Cleanup(func() {
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		DeletePrefix(ctx, c, prefix)
	})
	return redisURL, prefix
}

// DeletePrefix deletes every key under prefix.
func DeletePrefix(ctx context.Context, c redis.UniversalClient, prefix string) {
	var cursor uint64
	for {
		keys, next, err := c.Scan(ctx, cursor, prefix+"*", 1000).Result()
		if err != nil {
			return
		}
		if len(keys) > 0 {
			c.Del(ctx, keys...)
		}
		if next == 0 {
			return
		}
		cursor = next
	}
}

// FreeAddr returns a free loopback TCP address.
func FreeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}
