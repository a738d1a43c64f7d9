package server_test

import (
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/internal/testenv"
	"github.com/tetra-messenger/tetra/workload/server"
	"github.com/tetra-messenger/tetra/workload/waterline"
	redisidx "github.com/tetra-messenger/tetra/workload/waterline/redis"
)

// throughProxy rewrites a service URL to go through a proxy.
func throughProxy(t *testing.T, raw string) (string, *testenv.Proxy) {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	p := testenv.NewProxy(t, u.Host)
	u.Host = p.Addr()
	return u.String(), p
}

// PostgreSQL and Redis become unreachable while the server runs: sends are
// answered overloaded (never accepted without a commit), GC deletes nothing
// while the index is away, and the server recovers by itself when they
// return. Issue: "Production backends", Faults.
func TestE2EStoreAndIndexOutageWhileRunning(t *testing.T) {
	t.Parallel()
	pgURL, pg := throughProxy(t, testenv.Postgres(t))
	redisURL, prefix := testenv.Redis(t)
	redisURL, rd := throughProxy(t, redisURL)
	e := newEnv(t, customBackend("postgres+redis via proxies", func(cfg *server.Config) {
		cfg.Store, cfg.Index, cfg.IndexPrefix = pgURL, redisURL, prefix
		cfg.Ingest.StoreTimeout = 2 * time.Second
		cfg.Delivery.StoreTimeout = time.Second
	}), nil)
	chat := e.createDirect("alice", "bob")
	alice := e.dial("alice", dialOpts{})
	bob := e.dial("bob", dialOpts{})
	var accepted []string
	acc := alice.sendOK(chat.ChatID, "before", "before the outage")
	accepted = append(accepted, acc.MessageID)
	bob.next("message before", messageID(acc.MessageID))
	bob.ack(acc.MessageID)

	// PostgreSQL goes away: the send is refused, not accepted.
	pg.Cut()
	f := alice.sendErr(chat.ChatID, "during-pg", "while postgres is down", "overloaded")
	t.Logf("send during the PostgreSQL outage: %s", f)
	// A genuine outage is the one case that answers 5xx: 503, retry later.
	req, _ := http.NewRequest(http.MethodGet, e.srv.URL()+"/api/chats/"+chat.ChatID+"/messages", nil)
	req.Header.Set("Authorization", "Bearer "+e.token("alice"))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("history during the outage: %v %v, want 503", resp, err)
	} else {
		resp.Body.Close()
	}
	// It comes back: the same correlationId is now accepted and delivered.
	pg.Restore()
	var back frame
	eventually(t, 30*time.Second, "a send accepted after PostgreSQL returns", func() bool {
		f, err := alice.sendOKE(chat.ChatID, "during-pg", "while postgres is down")
		back = f
		return err == nil
	})
	accepted = append(accepted, back.MessageID)
	bob.next("message after the PostgreSQL outage", messageID(back.MessageID))
	bob.ack(back.MessageID)

	// Redis goes away: commits still work (history is the truth), live
	// delivery continues untracked, and GC deletes nothing.
	// Everything so far is acknowledged: let GC drain it first, so a GC
	// pass that read its line just before the cut cannot be mistaken for a
	// delete without the index.
	eventually(t, 20*time.Second, "the outbox drains before the Redis outage", func() bool { return e.outboxDepth() == 0 })
	rd.Cut()
	before := e.outboxDepth()
	acc = alice.sendOK(chat.ChatID, "during-redis", "while redis is down")
	accepted = append(accepted, acc.MessageID)
	bob.next("message during the Redis outage", messageID(acc.MessageID))
	time.Sleep(500 * time.Millisecond) // ten GC passes at 50 ms
	if d := e.outboxDepth(); d < before+2 {
		t.Errorf("outbox depth %d during the Redis outage, want at least %d: GC deleted without its index", d, before+2)
	}
	rd.Restore()
	// New connections register again and everything drains.
	carol := e.dial("carol", dialOpts{})
	carol.sync()
	bob.ack(acc.MessageID)
	for i := 0; i < 3; i++ {
		a := alice.sendOK(chat.ChatID, fmt.Sprint("after-", i), "after both outages")
		accepted = append(accepted, a.MessageID)
		bob.next("message after recovery", messageID(a.MessageID))
		bob.ack(a.MessageID)
	}
	eventually(t, 30*time.Second, "the outbox drains after recovery", func() bool { return e.outboxDepth() == 0 })
	got := ids(e.history("bob", chat.ChatID, ""))
	if fmt.Sprint(got) != fmt.Sprint(accepted) {
		t.Fatalf("history %v, want every accepted message once, in order: %v", got, accepted)
	}
}

// A process that crashed left its clients and pins in Redis under its owner
// name. The next start with the same owner (the pod name) wipes them, so
// they cannot hold the safe-delete line down until the age backstop.
func TestE2ERestartWipesTheCrashedOwnersPins(t *testing.T) {
	t.Parallel()
	pgURL := testenv.Postgres(t)
	redisURL, prefix := testenv.Redis(t)
	ctx := t.Context()
	stale, err := redisidx.New(ctx, redisidx.Config{URL: redisURL, Prefix: prefix, Owner: "pod-1"})
	if err != nil {
		t.Fatal(err)
	}
	defer stale.Close()
	if err := stale.Connect(ctx, waterline.Client{ID: "ghost", User: "bob", Device: "d", Start: map[int32]int64{0: 0}}); err != nil {
		t.Fatal(err)
	}
	if _, err := stale.Sent(ctx, "ghost", []waterline.Entry{{MessageID: "m", Partition: 0, Pos: 1}}, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	// It was a running process: primed, at the current server identity.
	id, err := stale.Identity(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := stale.MarkPrimed(ctx, id); err != nil {
		t.Fatal(err)
	}
	if line, ok, _ := stale.SafeLine(ctx, 0, id); !ok || line != 1 {
		t.Fatalf("setup: ghost pin not in place (line %d, %v)", line, ok)
	}
	e := newEnv(t, customBackend("postgres+redis", func(cfg *server.Config) {
		cfg.Store, cfg.Index, cfg.IndexPrefix, cfg.IndexOwner = pgURL, redisURL, prefix, "pod-1"
	}), nil)
	chat := e.createDirect("alice", "bob")
	alice := e.dial("alice", dialOpts{})
	for i := 0; i < 3; i++ {
		alice.sendOK(chat.ChatID, fmt.Sprint("k", i), "nobody online")
	}
	// Nobody is connected: without the ghost, GC drains everything.
	eventually(t, 20*time.Second, "the outbox drains despite the crashed predecessor's pin", func() bool { return e.outboxDepth() == 0 })
}
