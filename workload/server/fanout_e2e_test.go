package server_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/server"
)

// One user's sends write at most fanoutPerSecond outbox rows a second
// (one per member of the chat), over all its connections; a send over the
// budget is answered rate_limited and not stored, and hello.limits says
// the budget (issue 13, point 7). Before, one connection pipelined 50
// sends to a 1,000-member group: all 50 accepted, 50,000 outbox rows in a
// fraction of a second.
func TestE2EFanoutBudget(t *testing.T) {
	t.Parallel()
	const members, budget, sends = 1000, 1000, 50
	e := newEnv(t, backends(t)[0], func(c *server.Config) {
		c.Tuning.SendsPerSecond = 1000 // the send rate is not under test
		c.Tuning.FanoutPerSecond = budget
	})
	others := make([]string, members-1)
	for i := range others {
		others[i] = fmt.Sprintf("m%04d", i)
	}
	group := e.createGroup("alice", "everyone", others...)
	direct := e.createDirect("alice", "bob")
	alice := e.dial("alice", dialOpts{})
	if got := limitsOf(t, alice.hello).FanoutPerSecond; got != budget {
		t.Errorf("hello.limits.fanoutPerSecond %d, want %d", got, budget)
	}
	tablet := e.dial("alice", dialOpts{device: "tablet"})
	depth0 := e.outboxDepth()

	start := time.Now()
	for i := range sends {
		alice.send(group.ChatID, fmt.Sprint("g-", i), "to everyone")
	}
	accepted, limited := 0, 0
	for i := range sends {
		f := alice.next("an answer", answers(fmt.Sprint("g-", i)))
		switch {
		case f.Type == "accepted":
			accepted++
		case f.Code == "rate_limited" && strings.Contains(f.Message, "fanoutPerSecond"):
			limited++
		default:
			t.Errorf("send g-%d answered %s, want accepted or rate_limited naming fanoutPerSecond", i, f)
		}
	}
	// The user's other device shares the budget.
	tablet.send(group.ChatID, "t-1", "from the tablet")
	if f := tablet.next("the tablet's answer", answers("t-1")); f.Type == "accepted" {
		accepted++
	} else if f.Code == "rate_limited" {
		limited++
	}
	elapsed := time.Since(start)
	// Each send costs the whole budget: one now, then one a second.
	if max := 1 + int(elapsed/time.Second); accepted < 1 || accepted > max || limited == 0 {
		t.Errorf("%d accepted, %d rate_limited in %v; want 1..%d accepted, the rest limited", accepted, limited, elapsed, max)
	}
	if rows := e.outboxDepth() - depth0; rows != int64(accepted*members) {
		t.Errorf("%d outbox rows written, want %d (one per member of each accepted send)", rows, accepted*members)
	}
	// A small chat costs little: a direct send (2 rows) goes once the
	// bucket has 2 rows again.
	eventually(t, waitLong, "a direct send within the budget", func() bool {
		corr := fmt.Sprint("d-", time.Now().UnixNano())
		alice.send(direct.ChatID, corr, "to bob")
		return alice.next("an answer", answers(corr)).Type == "accepted"
	})
}
