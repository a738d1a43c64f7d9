package crash_test

import (
	"context"
	"math/rand/v2"
	"net"
	"net/url"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/tetra-messenger/tetra/internal/testenv"
)

const secret = "crash-test-secret-0123456789abcdef"

// killLoop SIGKILLs the server `kills` times at random moments spread over
// about `span`, restarting it on the same data, secret and port each time,
// and re-sends a few already accepted correlation ids after each restart.
func killLoop(t *testing.T, p *proc, l *load, kills int, span time.Duration, between func(i int)) {
	slot := span / time.Duration(kills)
	for i := range kills {
		time.Sleep(slot/3 + time.Duration(rand.Int64N(int64(slot*2/3))))
		p.kill()
		if between != nil {
			between(i)
		}
		time.Sleep(time.Duration(rand.IntN(300)) * time.Millisecond) // clients retry against a closed port
		p.start()
		l.resendSome(5)
	}
}

// SQLite (the embedded default): 4 SIGKILLs over ~16 s under load. Every
// accepted message is in history exactly once (G1, idempotent send across a
// crash), recipients recover everything (G3).
func TestCrashSQLiteKill9(t *testing.T) {
	addr := testenv.FreeAddr(t)
	p := newProc(t, addr, secret, "--data", t.TempDir())
	p.start()
	l := newLoad(t, "http://"+addr, secret, 10)
	l.run(80 * time.Millisecond)
	killLoop(t, p, l, 4, 16*time.Second, nil)
	time.Sleep(time.Second)
	l.finish()
	l.reconcile()
}

// PostgreSQL + Redis: SIGKILLs, the test's Redis keys deleted under load
// (a FLUSHDB of this test's prefix only: the Redis is shared), PostgreSQL
// and then Redis made unreachable for 2 s each through TCP proxies (the
// shared servers are never stopped).
func TestCrashPostgresRedis(t *testing.T) {
	pgURL := testenv.Postgres(t)
	redisURL, prefix := testenv.Redis(t)
	u, err := url.Parse(pgURL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := testenv.NewProxy(t, u.Host)
	u.Host = proxy.Addr()
	opt, err := redis.ParseURL(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	rc := redis.NewClient(opt)
	defer rc.Close()
	redisProxy := testenv.NewProxy(t, opt.Addr) // the server reaches Redis through it
	ru, err := url.Parse(redisURL)
	if err != nil {
		t.Fatal(err)
	}
	ru.Host = redisProxy.Addr()

	addr := testenv.FreeAddr(t)
	p := newProc(t, addr, secret, "--data", t.TempDir(), "--store", u.String(),
		"--index", ru.String(), "--index-prefix", prefix, "--index-owner", "crash-"+prefix,
		// A restart under the same owner waits for the killed run's
		// liveness record to lapse (at most the owner TTL).
		"--owner-ttl", "2s")
	p.start()
	l := newLoad(t, "http://"+addr, secret, 10)
	l.run(80 * time.Millisecond)

	time.Sleep(2 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	testenv.DeletePrefix(ctx, rc, prefix) // Redis "flushed" under load
	cancel()
	time.Sleep(1500 * time.Millisecond)
	proxy.Cut() // PostgreSQL unreachable under load
	time.Sleep(2 * time.Second)
	proxy.Restore()
	time.Sleep(1500 * time.Millisecond)
	redisProxy.Cut() // Redis unreachable under load (a killed Redis, seen from tetra)
	time.Sleep(2 * time.Second)
	redisProxy.Restore()
	time.Sleep(time.Second)

	killLoop(t, p, l, 2, 6*time.Second, func(i int) {
		if i == 0 { // the index lost while the process is down, too
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			testenv.DeletePrefix(ctx, rc, prefix)
			cancel()
		}
	})
	time.Sleep(time.Second)
	l.finish()
	l.reconcile()
}

// SIGTERM under load: the server stops, commits what is in flight (every
// accepted send is in history after a restart), closes the sockets with
// 1001 and exits 0 within 10 s.
func TestGracefulSIGTERM(t *testing.T) {
	addr := testenv.FreeAddr(t)
	p := newProc(t, addr, secret, "--data", t.TempDir())
	p.start()
	l := newLoad(t, "http://"+addr, secret, 10)
	l.run(50 * time.Millisecond)
	time.Sleep(3 * time.Second)

	took, err := p.signal(syscall.SIGTERM, 15*time.Second)
	if err != nil {
		t.Errorf("tetra serve exited with %v after SIGTERM, want status 0", err)
	}
	if took >= 10*time.Second {
		t.Errorf("SIGTERM took %s to exit, want < 10 s", took)
	}
	// It stopped accepting: nothing listens any more.
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Errorf("%s still accepts connections after the exit", addr)
	}
	time.Sleep(300 * time.Millisecond)
	l.mu.Lock()
	n1001 := l.closes[1001]
	l.mu.Unlock()
	if n1001 < len(l.users)/2 {
		t.Errorf("only %d of %d clients saw close 1001 (codes %v)", n1001, len(l.users), l.closes)
	}
	t.Logf("SIGTERM: exit in %s, %d clients saw 1001", took, n1001)

	p.start() // same data: the sends in flight complete, then reconcile
	l.finish()
	l.reconcile()
}
