package redisid_test

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/internal/operator/redisid"
	"github.com/tetra-messenger/tetra/internal/operator/redistest"
	"github.com/tetra-messenger/tetra/internal/redisinfo"
)

func probe(t *testing.T, tgt redisid.Target) (redisinfo.Identity, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return redisid.Prober{Timeout: time.Second}.Probe(ctx, tgt)
}

func TestIdentityFollowsRestartAndPromotion(t *testing.T) {
	t.Parallel()
	a := redistest.Start(t, 0)
	id1, err := probe(t, redisid.Target{URL: a.URL()})
	if err != nil {
		t.Fatal(err)
	}
	if id1.RunID == "" || id1.MasterReplID == "" || id1.Addr != a.Addr() {
		t.Fatalf("identity %+v", id1)
	}
	again, err := probe(t, redisid.Target{URL: a.URL()})
	if err != nil || !again.Same(id1) {
		t.Fatalf("a quiet server changed identity: %v %+v", err, again)
	}

	// A replica reports itself as one: no master.
	b := redistest.Start(t, 0, "--replicaof", "127.0.0.1", itoa(a.Port))
	if _, err := probe(t, redisid.Target{URL: b.URL()}); !errors.Is(err, redisid.ErrNoMaster) {
		t.Fatalf("replica: got %v, want ErrNoMaster", err)
	}
	// Promoted once in sync, it is a master with a new replication id
	// whose previous one (master_replid2) is a's: a promotion, although b
	// is another process (another run_id), as with a Sentinel failover.
	deadline := time.Now().Add(10 * time.Second)
	for {
		if v, _ := b.Info("master_link_status"); v == "up" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("replica never in sync")
		}
		time.Sleep(50 * time.Millisecond) // polling a child process's replication state; no event to wait on
	}
	// a's first replica made a create its backlog, with a fresh
	// replication ID: the same data, not a failover.
	idA, err := probe(t, redisid.Target{URL: a.URL()})
	if err != nil {
		t.Fatal(err)
	}
	if !idA.Renewed(id1) || idA.PromotedFrom(id1) {
		t.Fatalf("a's replication ID renewed for its first replica: Renewed %v PromotedFrom %v (%+v, before %+v)",
			idA.Renewed(id1), idA.PromotedFrom(id1), idA, id1)
	}
	if _, err := b.Do("REPLICAOF", "NO", "ONE"); err != nil {
		t.Fatal(err)
	}
	idB, err := probe(t, redisid.Target{URL: b.URL()})
	if err != nil {
		t.Fatal(err)
	}
	if idB.MasterReplID == id1.MasterReplID {
		t.Fatalf("promotion kept master_replid %s", idB.MasterReplID)
	}
	if idB.RunID == idA.RunID || !idB.PromotedFrom(idA) || idB.Renewed(idA) {
		t.Fatalf("b promoted after following a: PromotedFrom = false (b %+v, a %+v)", idB, idA)
	}

	// A restart on the same address: a new run_id.
	port := a.Port
	a.Stop()
	if _, err := probe(t, redisid.Target{URL: a.URL()}); !errors.Is(err, redisid.ErrUnreachable) {
		t.Fatalf("stopped server: got %v, want ErrUnreachable", err)
	}
	a2 := redistest.Start(t, port)
	id2, err := probe(t, redisid.Target{URL: a2.URL()})
	if err != nil {
		t.Fatal(err)
	}
	if id2.RunID == id1.RunID || id2.Same(id1) {
		t.Fatalf("restart kept the identity: %+v vs %+v", id2, id1)
	}
	if id2.PromotedFrom(idA) || id2.PromotedFrom(idB) || id2.Renewed(idA) {
		t.Fatalf("a restarted server with a history of its own counts as a promotion: %+v", id2)
	}
}

func TestSentinelsMustAgree(t *testing.T) {
	t.Parallel()
	m1 := redistest.Start(t, 0)
	m2 := redistest.Start(t, 0)
	s1 := redistest.StartSentinel(t, "tetra", m1.Addr())
	s2 := redistest.StartSentinel(t, "tetra", m1.Addr())
	s3 := redistest.StartSentinel(t, "tetra", m2.Addr())
	want, err := probe(t, redisid.Target{URL: m1.URL()})
	if err != nil {
		t.Fatal(err)
	}

	// Two agree: the master they name, reached with the URL's options.
	id, err := probe(t, redisid.Target{URL: "redis://ignored.invalid:1/0", MasterName: "tetra", SentinelAddrs: []string{s1.Addr(), s2.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	if !id.Same(want) || id.Addr != m1.Addr() {
		t.Fatalf("sentinel master %+v, want %+v", id, want)
	}
	// They disagree: several masters, nothing to act on.
	_, err = probe(t, redisid.Target{URL: m1.URL(), MasterName: "tetra", SentinelAddrs: []string{s1.Addr(), s3.Addr()}})
	if !errors.Is(err, redisid.ErrSeveralMasters) {
		t.Fatalf("disagreeing sentinels: got %v, want ErrSeveralMasters", err)
	}
	// One of two answers: not enough to agree.
	dead := redistest.FreePort(t)
	_, err = probe(t, redisid.Target{URL: m1.URL(), MasterName: "tetra", SentinelAddrs: []string{s1.Addr(), "127.0.0.1:" + itoa(dead)}})
	if !errors.Is(err, redisid.ErrNoMaster) {
		t.Fatalf("one sentinel of two: got %v, want ErrNoMaster", err)
	}
	// A master name the Sentinels do not know.
	_, err = probe(t, redisid.Target{URL: m1.URL(), MasterName: "other", SentinelAddrs: []string{s1.Addr(), s2.Addr()}})
	if !errors.Is(err, redisid.ErrNoMaster) {
		t.Fatalf("unknown master: got %v, want ErrNoMaster", err)
	}
}

func TestBadURL(t *testing.T) {
	if _, err := probe(t, redisid.Target{URL: "http://x"}); err == nil {
		t.Fatal("an http URL was accepted")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
