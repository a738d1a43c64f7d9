package server_test

import (
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/internal/testenv"
	"github.com/tetra-messenger/tetra/workload/server"
	"github.com/tetra-messenger/tetra/workload/waterline"
)

// Several processes on one PostgreSQL database and one Redis prefix, as
// the replicas of one Messenger run (issue 9). Each is a whole server in
// this test process with its own index owner and port; they share nothing
// but PostgreSQL and Redis.

// fleetPollInterval is long on purpose: a cross-process delivery that
// arrives within half of it came through the wake-up, not the poll (60
// deliveries in a row could not all be that lucky). It is not longer
// because the poller's hold, which GC respects, moves on its scans.
const fleetPollInterval = 5 * time.Second

// newFleet starts n servers on one database and one Redis prefix, with the
// suite's short timings except a long poll interval, and a 1 s owner TTL.
func newFleet(t *testing.T, n int, mutate func(*server.Config)) []*env {
	t.Helper()
	var pr backend
	for _, b := range backends(t) {
		if b.name == "postgres+redis" {
			pr = b
		}
	}
	first := newEnv(t, pr, func(c *server.Config) {
		c.IndexOwner = "pod-0"
		c.Tuning.PollInterval = fleetPollInterval
		c.Delivery.OwnerTTL = time.Second
		if mutate != nil {
			mutate(c)
		}
	})
	fleet := []*env{first}
	for i := 1; i < n; i++ {
		cfg := first.cfg
		cfg.IndexOwner = fmt.Sprintf("pod-%d", i)
		cfg.Addr = "127.0.0.1:0"
		logs := &testenv.LogBuffer{}
		cfg.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
		e := &env{t: t, cfg: cfg, secret: first.secret, http: &http.Client{Timeout: 20 * time.Second}}
		t.Cleanup(func() {
			e.http.CloseIdleConnections()
			if t.Failed() {
				t.Logf("%s log (tail):\n%s", cfg.IndexOwner, logs.Tail(80))
			}
		})
		e.srv = startServer(t, cfg)
		fleet = append(fleet, e)
	}
	return fleet
}

// TestFleetCrossProcessDelivery: six users spread over three processes
// write to partners on other processes; every message is pushed to its
// recipient long before the poll interval (the wake-up carries it across),
// and once everything is acknowledged the outbox drains.
func TestFleetCrossProcessDelivery(t *testing.T) {
	fleet := newFleet(t, 3, nil)
	const users, perUser = 6, 10
	clients := make([]*wsClient, users)
	for i := range clients {
		clients[i] = fleet[i%3].dial(fmt.Sprintf("u%d", i), dialOpts{})
	}
	chats := make([]string, users)
	for i := range users {
		chats[i] = fleet[i%3].createDirect(fmt.Sprintf("u%d", i), fmt.Sprintf("u%d", (i+1)%users)).ChatID
	}
	var slowest time.Duration
	for k := range perUser {
		for i := range users {
			j := (i + 1) % users // on the next process
			sent := time.Now()
			clients[i].sendOK(chats[i], fmt.Sprintf("c%d-%d", i, k), fmt.Sprintf("from u%d #%d", i, k))
			f, err := clients[j].nextE(isType("message"), fleetPollInterval/2)
			if err != nil {
				t.Fatalf("u%d -> u%d (process %d -> %d) #%d not pushed within %v (poll interval %v): %v",
					i, j, i%3, j%3, k, fleetPollInterval/2, fleetPollInterval, err)
			}
			slowest = max(slowest, time.Since(sent))
			if f.SenderID != fmt.Sprintf("u%d", i) {
				t.Fatalf("u%d got a message from %s, want u%d's", j, f.SenderID, i)
			}
			clients[j].ack(f.MessageID)
		}
	}
	t.Logf("%d cross-process deliveries, slowest send-to-push %v", users*perUser, slowest)
	// A read receipt crosses too: u1 (process 1) reads u0's chat; u0 is on
	// process 0.
	last := fleet[0].history("u0", chats[0], "")
	clients[1].write(map[string]string{"type": "read", "chatId": chats[0], "messageId": last[len(last)-1].MessageID})
	if f := clients[0].next("u1's read receipt on another process", isType("read")); !strings.Contains(f.String(), `"userId":"u1"`) {
		t.Fatalf("read frame %s, want u1's", f)
	}
	eventually(t, waitLong, "the outbox to drain through every process's acks", func() bool { return fleet[0].outboxDepth() == 0 })
}

// TestFleetSupersedeAcrossProcesses: a device that connects to another
// process closes its older connection there with 4001, its pending state
// goes with it, and the new connection gets what follows.
func TestFleetSupersedeAcrossProcesses(t *testing.T) {
	fleet := newFleet(t, 2, nil)
	bob := fleet[0].dial("bob", dialOpts{})
	chat := fleet[0].createDirect("bob", "alice")
	old := fleet[0].dial("alice", dialOpts{device: "phone"})
	bob.sendOK(chat.ChatID, "k1", "before")
	old.next("the first message on the old connection", isType("message")) // pending there, not acknowledged
	cur := fleet[1].dial("alice", dialOpts{device: "phone"})
	old.expectClose(4001)
	eventually(t, waitLong, "pod-0 to withdraw the superseded connection", func() bool {
		st := fleet[0].srv.Engine().Stats()
		return st.Withdrawals["superseded"] == 1 && st.Connected == 1 // bob only
	})
	bob.sendOK(chat.ChatID, "k2", "after")
	f := cur.next("the second message on the new connection", isType("message"))
	if f.Body != "after" {
		t.Fatalf("new connection got %q, want \"after\"", f.Body)
	}
	cur.ack(f.MessageID)
	// The old connection's pending entry went with it: once the new one
	// acknowledged, nothing pins the outbox.
	eventually(t, waitLong, "the outbox to drain", func() bool { return fleet[0].outboxDepth() == 0 })

	// And back: the device returns to pod-0; pod-1 closes its connection.
	back := fleet[0].dial("alice", dialOpts{device: "phone"})
	cur.expectClose(4001)
	bob.sendOK(chat.ChatID, "k3", "back")
	if f := back.next("a message on the returning connection", isType("message")); f.Body != "back" {
		t.Fatalf("returning connection got %q, want \"back\"", f.Body)
	}
	// Another device of the same user is not superseded.
	laptop := fleet[1].dial("alice", dialOpts{device: "laptop"})
	back.expectNone("a close after another device connected", func(f frame) bool { return false }, quiet)
	bob.sendOK(chat.ChatID, "k4", "both")
	back.next("k4 on the phone", isType("message"))
	laptop.next("k4 on the laptop", isType("message"))
}

// TestFleetGCKeepsRowsPinnedOnAnyProcess: a recipient on one process that
// does not acknowledge keeps its rows in the outbox against every other
// process's GC (the safe line is global), until it acknowledges.
func TestFleetGCKeepsRowsPinnedOnAnyProcess(t *testing.T) {
	fleet := newFleet(t, 2, nil)
	alice := fleet[0].dial("alice", dialOpts{})
	bob := fleet[1].dial("bob", dialOpts{})
	chat := fleet[0].createDirect("alice", "bob")
	var ids []string
	for k := range 5 {
		alice.sendOK(chat.ChatID, fmt.Sprintf("k%d", k), "unacknowledged")
		ids = append(ids, bob.next("a message", isType("message")).MessageID)
	}
	// Both GCs run every 50 ms without grace; give them many passes (and
	// the owner TTL window) to do the wrong thing.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if d := fleet[0].outboxDepth(); d < 5 {
			t.Fatalf("outbox depth %d: a process deleted rows its peer's client has not acknowledged", d)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if p0 := fleet[0].srv.Engine().Stats().GCPasses; p0 == 0 {
		t.Fatal("pod-0's GC never ran")
	}
	bob.ack(ids...)
	eventually(t, waitLong, "the outbox to drain after the ack", func() bool { return fleet[0].outboxDepth() == 0 })
}

// TestFleetOneDatabaseOneInProcessIndex: the in-process index serves one
// process; a second process on the same PostgreSQL database is refused,
// whichever index it brings, and a process on the shared index refuses an
// in-process one next to it.
func TestFleetOneDatabaseOneInProcessIndex(t *testing.T) {
	var pr backend
	for _, b := range backends(t) {
		if b.name == "postgres+redis" {
			pr = b
		}
	}
	var cfg server.Config
	first := pr.start(t, func(c *server.Config) { c.Index, c.IndexPrefix = "memory", ""; cfg = *c })
	second := cfg
	second.Addr = "127.0.0.1:0"
	if _, err := server.New(t.Context(), second); err == nil || !strings.Contains(err.Error(), "--index memory") {
		t.Fatalf("a second in-process-index server on the same database: err = %v, want a refusal naming --index memory", err)
	}
	shared := second
	shared.Index, shared.IndexPrefix = testenv.Redis(t)
	if _, err := server.New(t.Context(), shared); err == nil || !strings.Contains(err.Error(), "must be the only one") {
		t.Fatalf("a Redis-index server next to an in-process one: err = %v, want a refusal", err)
	}
	if err := first.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	a := startServer(t, shared)
	shared.IndexOwner = "other"
	b := startServer(t, shared) // several on the shared index: fine
	_, _ = a, b
	if _, err := server.New(t.Context(), second); err == nil || !strings.Contains(err.Error(), "--index memory") {
		t.Fatalf("an in-process-index server next to Redis-index ones: err = %v, want a refusal", err)
	}
	// Another key prefix on the same database: a second waterline that
	// the first would not see.
	other := shared
	other.IndexOwner, other.IndexPrefix = "elsewhere", shared.IndexPrefix+"other:"
	if _, err := server.New(t.Context(), other); err == nil || !strings.Contains(err.Error(), "--index-prefix") {
		t.Fatalf("a Redis-index server with another prefix on the same database: err = %v, want a refusal naming --index-prefix", err)
	}
}

// TestFleetRefusesADuplicateOwner: a second process with the owner name of
// a live one would wipe its registrations (its clients would silently stop
// getting pushes); it is refused once the owner TTL shows the other is
// alive. A graceful stop releases the name at once.
func TestFleetRefusesADuplicateOwner(t *testing.T) {
	fleet := newFleet(t, 1, nil)
	dup := fleet[0].cfg
	dup.Addr = "127.0.0.1:0"
	start := time.Now()
	srv, err := server.New(t.Context(), dup)
	if err == nil {
		err = srv.Start(t.Context())
		defer srv.Shutdown(t.Context())
	}
	if err == nil || !strings.Contains(err.Error(), "--index-owner") {
		t.Fatalf("a second live process as %s: err = %v, want a refusal naming --index-owner", dup.IndexOwner, err)
	}
	t.Logf("refused after %v: %v", time.Since(start).Round(time.Millisecond), err)
	if err := fleet[0].srv.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	startServer(t, dup) // the name is free again
	if took := time.Since(start); took > dup.Delivery.OwnerTTL {
		t.Errorf("a start after a graceful stop waited %v for the name", took)
	}
}

// TestFleetRefusesASharedPrefixAcrossOutboxes: two deployments (each its
// own PostgreSQL database) on one Redis database with the same key prefix
// would compute one waterline over two outboxes, each GC deleting rows the
// other's clients have not acknowledged (issue 15). The second is refused
// while the first is alive, naming --index-prefix; once the first is gone
// the prefix may be reused, and another prefix always works.
func TestFleetRefusesASharedPrefixAcrossOutboxes(t *testing.T) {
	fleet := newFleet(t, 1, nil)
	other := fleet[0].cfg
	other.Addr = "127.0.0.1:0"
	other.Store = testenv.Postgres(t) // another deployment's database
	other.IndexOwner = "other-deployment-0"
	srv, err := server.New(t.Context(), other)
	if err == nil {
		err = srv.Start(t.Context())
		_ = srv.Shutdown(t.Context())
	}
	if !errors.Is(err, waterline.ErrPrefixTaken) || !strings.Contains(err.Error(), "--index-prefix") {
		t.Fatalf("a second deployment on the same prefix: err = %v, want ErrPrefixTaken naming --index-prefix", err)
	}
	own := other
	own.IndexPrefix += "own:"
	mine := startServer(t, own) // its own prefix: fine
	if err := mine.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := fleet[0].srv.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	startServer(t, other) // the first deployment is gone: the prefix is free
}
