package fleet_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/protocol"
)

// Three processes, 12 users (4 per process) in direct chats with a partner
// on another process. Two users on p2 leave their first 3 messages
// unacknowledged (the lease is 60 s, so nothing is redelivered): p2's pins
// hold those outbox rows, and every row after them, through many GC passes.
// p2 is SIGKILLed under load. Its Redis heartbeat lapses after the owner
// TTL (2 s), the survivors' GC reaps its state, and the outbox drains to
// 0 (without the reaping the pins would hold it until the 26 h backstop).
// p2's clients reconnect to a survivor and recover everything from history.
func TestFleetKillOneProcess(t *testing.T) {
	f := newFleet(t, 3)
	l := newLoad(t, f)
	tag := fmt.Sprintf("%04x", rand.IntN(1<<16))
	u := make([][]*user, 3)
	var nonAckers []*user
	for p := range 3 {
		for k := range 4 {
			skip := 0
			if p == 2 && k < 2 {
				skip = 3
			}
			us := l.addUser(fmt.Sprintf("u%s-p%d-%d", tag, p, k), p, skip, false)
			if skip > 0 {
				nonAckers = append(nonAckers, us)
			}
			u[p] = append(u[p], us)
		}
	}
	// Every pair spans two processes; each non-acker's partner is elsewhere.
	l.pair(u[0][0], u[1][0])
	l.pair(u[0][1], u[2][0])
	l.pair(u[1][1], u[2][1])
	l.pair(u[1][2], u[0][2])
	l.pair(u[2][2], u[0][3])
	l.pair(u[2][3], u[1][3])
	for _, us := range l.users {
		if got := int(us.target.Load()); got != us.home {
			t.Fatalf("%s connected to p%d, want its home p%d", us.name, got, us.home)
		}
	}

	l.run(150 * time.Millisecond)

	// The non-ackers have left their first messages unacknowledged.
	var skipped, nonAckerNames []string
	for _, us := range nonAckers {
		nonAckerNames = append(nonAckerNames, us.name)
	}
	if !eventually(15*time.Second, func() bool {
		skipped = skipped[:0]
		for _, us := range nonAckers {
			us.mu.Lock()
			if len(us.skipped) < us.skip {
				us.mu.Unlock()
				return false
			}
			skipped = append(skipped, us.skipped...)
			us.mu.Unlock()
		}
		return true
	}) {
		t.Fatal("the non-acking users on p2 did not receive 3 messages each within 15 s")
	}
	// The pins hold: the unacknowledged rows (and the outbox) stay for 2.5 s,
	// about 12 GC passes of each process.
	held := time.Now()
	for time.Since(held) < 2500*time.Millisecond {
		if n := f.outboxRowsOf(skipped, nonAckerNames); n != len(skipped) {
			t.Fatalf("before the kill, %d of the %d unacknowledged messages' outbox rows are left: p2's pins did not hold them", n, len(skipped))
		}
		if n := f.outboxCount(); n == 0 {
			t.Fatal("before the kill, the outbox emptied although p2's pins hold it")
		}
		time.Sleep(200 * time.Millisecond)
	}
	before := f.outboxCount()
	acceptedBefore := l.acceptedCount()

	killed := time.Now()
	f.procs[2].kill()
	t.Logf("SIGKILLed p2 with %d outbox rows held, %d messages accepted so far", before, acceptedBefore)

	// The survivors reap p2 once its heartbeat lapses (owner TTL 2 s): the
	// rows its pins held go while the traffic goes on.
	if !eventually(2*time.Second+8*time.Second, func() bool { return f.outboxRowsOf(skipped, nonAckerNames) == 0 }) {
		t.Fatalf("%s after the kill, %d of p2's unacknowledged outbox rows are still held (owner TTL 2 s, GC every 200 ms): the dead owner was not reaped",
			time.Since(killed).Round(time.Millisecond), f.outboxRowsOf(skipped, nonAckerNames))
	}
	reapedAfter := time.Since(killed)
	// p2's clients are on survivors now.
	if !eventually(10*time.Second, func() bool {
		for _, us := range u[2] {
			if us.target.Load() == 2 {
				return false
			}
		}
		return true
	}) {
		t.Error("p2's clients did not reconnect to a surviving process")
	}
	time.Sleep(time.Second) // traffic across the reconnections
	l.finish()
	stopped := time.Now()
	if !eventually(10*time.Second, func() bool { return f.outboxCount() == 0 }) {
		t.Errorf("the outbox holds %d rows 10 s after the traffic stopped (everyone alive acks): %s", f.outboxCount(), f.holders())
	}
	t.Logf("p2's pinned rows reaped %s after the kill; outbox empty %s after the traffic stopped",
		reapedAfter.Round(time.Millisecond), time.Since(stopped).Round(time.Millisecond))
	for _, us := range u[2] {
		if got := us.target.Load(); got == 2 {
			t.Errorf("%s still on p2", us.name)
		}
	}
	l.reconcile()
	if l.acceptedCount() <= acceptedBefore {
		t.Errorf("no message was accepted after the kill (%d before, %d in all)", acceptedBefore, l.acceptedCount())
	}
}

// Two processes, owner TTL 1 s. p1 is SIGSTOPped for 4 s while its clients
// are connected and p0's clients keep sending to them. p0's GC reaps p1
// while it is stopped: the outbox rows for p1's clients stop being pinned
// and go. On SIGCONT, p1 learns at its next heartbeat that it was reaped and
// closes its sockets with 1001; its clients reconnect and recover
// everything from history. p1 keeps serving new connections afterwards.
func TestFleetStalledProcessIsReaped(t *testing.T) {
	// Long pings: a process stopped for 4 s must not close its sockets as
	// idle (4004) on resuming, before its heartbeat says it was reaped.
	f := newFleet(t, 2, "--owner-ttl", "1s", "--ping-interval", "10s", "--ping-timeout", "10s")
	l := newLoad(t, f)
	tag := fmt.Sprintf("%04x", rand.IntN(1<<16))
	var on1 []*user
	var names1 []string
	for k := range 4 {
		a := l.addUser(fmt.Sprintf("u%s-p0-%d", tag, k), 0, 0, false)
		b := l.addUser(fmt.Sprintf("u%s-p1-%d", tag, k), 1, 0, false)
		l.pair(a, b)
		on1 = append(on1, b)
		names1 = append(names1, b.name)
	}
	l.run(100 * time.Millisecond)
	time.Sleep(2 * time.Second)

	stoppedAt := time.Now()
	f.procs[1].signal(syscall.SIGSTOP)
	// Rows for p1's clients committed on p0 after the stop: p1 cannot have
	// acknowledged them, so its pins hold them until it is reaped. Its
	// last heartbeat (every TTL/3) keeps it alive for at least 2/3 of the
	// TTL after the stop: sample before that.
	time.Sleep(400 * time.Millisecond)
	pinned := f.outboxIDs(names1...)
	if len(pinned) == 0 {
		f.procs[1].signal(syscall.SIGCONT)
		t.Fatal("no outbox rows for p1's clients 400 ms into the stop, though p0's clients send to them")
	}
	if !eventually(3*time.Second, func() bool { return f.countOf(pinned) == 0 }) {
		n := f.countOf(pinned)
		f.procs[1].signal(syscall.SIGCONT)
		t.Fatalf("%s into p1's stop (owner TTL 1 s), %d of the %d outbox rows for its clients are still pinned: p0 did not reap it",
			time.Since(stoppedAt).Round(time.Millisecond), n, len(pinned))
	}
	reapedAfter := time.Since(stoppedAt)
	time.Sleep(4*time.Second - time.Since(stoppedAt))
	f.procs[1].signal(syscall.SIGCONT)
	resumed := time.Now()
	t.Logf("p1 stopped for %s; its pinned rows were reaped %s into the stop",
		resumed.Sub(stoppedAt).Round(time.Millisecond), reapedAfter.Round(time.Millisecond))

	// Within a few seconds every p1 client saw 1001.
	if !eventually(6*time.Second, func() bool {
		for _, us := range on1 {
			us.mu.Lock()
			n := us.closes[protocol.CloseGoingAway]
			us.mu.Unlock()
			if n == 0 {
				return false
			}
		}
		return true
	}) {
		for _, us := range on1 {
			us.mu.Lock()
			t.Errorf("%s: close codes %v 6 s after SIGCONT, want 1001 (p1 learns it was reaped)", us.name, us.closes)
			us.mu.Unlock()
		}
	} else {
		t.Logf("p1's clients closed with 1001 within %s of SIGCONT", time.Since(resumed).Round(time.Millisecond))
	}
	time.Sleep(time.Second) // traffic across the reconnections
	l.finish()
	l.reconcile()

	// p1 still serves: a fresh client connects to it (only to it) and
	// receives a message sent from p0.
	fresh := l.addUser("fresh-"+tag, 1, 0, true)
	sender := l.addUser("sender-"+tag, 0, 0, true)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	chat, err := sender.c.Load().CreateDirect(ctx, fresh.name)
	if err != nil {
		t.Fatal(err)
	}
	acc, err := sender.c.Load().SendWithID(ctx, chat.ChatID, "after-"+tag, "to p1 after it was reaped")
	if err != nil {
		t.Fatal(err)
	}
	if !eventually(10*time.Second, func() bool {
		fresh.mu.Lock()
		defer fresh.mu.Unlock()
		_, ok := fresh.got[acc.MessageID]
		return ok
	}) {
		t.Errorf("a fresh client of p1 did not receive %s within 10 s", acc.MessageID)
	}
	if got := fresh.target.Load(); got != 1 {
		t.Errorf("the fresh client is on p%d, want p1", got)
	}
}
