package server_test

// Flow control toward the client (docs/design.md, "The push window"): a
// client that acknowledges promptly is never withdrawn, whatever burst the
// server itself pushes at it.

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/server"
)

// busyMember runs one member of a busy group on its own goroutine: it
// acknowledges every message frame the moment it arrives and, when it is a
// sender, sends msgs messages pipelined in windows of window sends (the
// next window leaves once every send of the last one is answered). It
// returns the message ids it received live (deduplicated) and an error if
// its connection ended or a send was refused.
func busyMember(c *wsClient, chatID string, msgs, window, want int, deadline time.Time) (map[string]bool, error) {
	got := map[string]bool{}
	sent, answered := 0, 0
	for answered < msgs || len(got) < want {
		if sent == answered && sent < msgs {
			for i := 0; i < window && sent < msgs; i++ {
				if err := c.writeE(sendFrame{Type: "send", ChatID: chatID, CorrelationID: fmt.Sprintf("%s-%d", c.name, sent), Body: "burst"}); err != nil {
					return got, fmt.Errorf("%s: send: %w", c.name, err)
				}
				sent++
			}
		}
		f, err := c.nextE(nil, time.Until(deadline))
		if err != nil {
			return got, fmt.Errorf("%s after %d of %d messages, %d of %d answers: %w", c.name, len(got), want, answered, msgs, err)
		}
		switch f.Type {
		case "message":
			if err := c.writeE(map[string]any{"type": "ack", "messageIds": []string{f.MessageID}}); err != nil {
				return got, fmt.Errorf("%s: ack: %w", c.name, err)
			}
			got[f.MessageID] = true
		case "accepted":
			answered++
		case "error":
			return got, fmt.Errorf("%s: send refused: %s", c.name, f)
		}
	}
	return got, nil
}

// A group of 12, every member connected and acknowledging each message the
// moment it arrives; six of them send 60 messages each in pipelined
// windows of 16. Before the push window, the server pushed every committed
// row at once and the overload reaper withdrew healthy members (4003) at
// its next tick: all 12 on PostgreSQL + Redis, 2 of 12 on the embedded
// default (issue 15). Now no member may be closed, and every member
// receives every message of the others live.
func TestE2EBusyGroupWithdrawsNoHealthyMember(t *testing.T) {
	t.Parallel()
	const members, senders, msgs, window = 12, 6, 60, 16
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, func(c *server.Config) {
			c.Tuning.SendsPerSecond = 1000 // the burst, not the rate limit, is under test
			c.Tuning.Lease = 10 * time.Second
		})
		names := make([]string, members)
		for i := range names {
			names[i] = fmt.Sprintf("m%02d", i)
		}
		chat := e.createGroup(names[0], "busy", names[1:]...)
		clients := make([]*wsClient, members)
		for i, n := range names {
			clients[i] = e.dial(n, dialOpts{})
		}
		total := senders * msgs
		deadline := time.Now().Add(waitLong + 15*time.Second)
		var wg sync.WaitGroup
		errs := make([]error, members)
		got := make([]map[string]bool, members)
		for i, c := range clients {
			n, want := 0, total
			if i < senders {
				n, want = msgs, total-msgs // a sender's own connection gets none of its own
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				got[i], errs[i] = busyMember(c, chat.ChatID, n, window, want, deadline)
			}()
		}
		wg.Wait()
		closed := 0
		for i, err := range errs {
			if err != nil {
				closed++
				t.Errorf("member %s: %v", names[i], err)
			}
		}
		if closed > 0 {
			t.Fatalf("%d of %d healthy members did not receive the burst live", closed, members)
		}
		// Every member's connection is still open and registered.
		for _, c := range clients {
			if err := c.syncE(); err != nil {
				t.Errorf("after the burst: %v", err)
			}
		}
		st := e.srv.Engine().Stats()
		for reason, n := range st.Withdrawals {
			if n > 0 {
				t.Errorf("withdrawals %s = %d, want none", reason, n)
			}
		}
		t.Logf("%s: %d messages x %d recipients: fast %d, poll %d, re-deliveries %d, withdrawals %v",
			b.name, total, members-1, st.FastDeliveries, st.PollDeliveries, st.Redeliveries, st.Withdrawals)
	})
}
