package loadgen

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetra-messenger/tetra/workload/client"
	"github.com/tetra-messenger/tetra/workload/protocol"
)

// Typing load (PROTOCOL.md §7.4; docs/benchmarks.md, "Typing"): with
// Config.TypingMembers N > 0 the run adds N clients of their own (users
// lg<run>-t<i>, spread over the targets like the others) in one group,
// and each sends a typing frame into it every Config.TypingInterval (default
// protocol.TypingInterval, 2 s: what a client does while its user keeps
// typing, the web page's pace, so the server forwards each one) from the
// start to the end of the send phase, alongside the message load. They
// send no messages and are not part of the reconciliation; the report
// counts the typing frames sent and received.

// typists are the typing group's clients.
type typists struct {
	clients  []*client.Client
	chat     string
	sent     atomic.Int64
	received atomic.Int64
}

// connectTypists creates the typing group's clients and the group, and
// waits until they are connected; nil when the run has none.
func (r *run) connectTypists(ctx context.Context) (*typists, error) {
	n := r.cfg.TypingMembers
	if n == 0 {
		return nil, nil
	}
	ty := &typists{}
	signer := r.target.signer()
	nt := len(r.target.targets)
	users := make([]string, n)
	for i := range n {
		users[i] = fmt.Sprintf("lg%s-t%04d", r.runID, i)
		tok, err := signer.Issue(users[i], 0)
		if err != nil {
			return ty, err
		}
		c, err := client.New(client.Config{
			URL: r.target.targets[i%nt].url(), Token: tok,
			OnTyping:   func(protocol.Typing) { ty.received.Add(1) },
			BackoffMin: 50 * time.Millisecond, BackoffMax: 2 * time.Second,
		})
		if err != nil {
			return ty, err
		}
		ty.clients = append(ty.clients, c)
		go func() { _ = c.Run(ctx) }()
	}
	chat, err := ty.clients[0].CreateGroup(ctx, "load typing group", users[1:])
	if err != nil {
		return ty, fmt.Errorf("loadgen: create the typing group: %w", err)
	}
	ty.chat = chat.ChatID
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for i, c := range ty.clients {
		if err := c.WaitConnected(wctx); err != nil {
			return ty, fmt.Errorf("loadgen: typist %s did not connect: %w", users[i], err)
		}
	}
	return ty, nil
}

// run sends every typist's typing frames until ctx is done, their phases
// spread over one interval; it returns at once, wg counts the senders.
func (ty *typists) run(ctx context.Context, every time.Duration, wg *sync.WaitGroup) {
	if ty == nil {
		return
	}
	for i, c := range ty.clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Duration(int64(every) * int64(i) / int64(len(ty.clients)))):
			}
			tick := time.NewTicker(every)
			defer tick.Stop()
			for {
				if c.Typing(ctx, ty.chat) == nil {
					ty.sent.Add(1)
				}
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
			}
		}()
	}
}

// close closes the typists' clients.
func (ty *typists) close() {
	if ty == nil {
		return
	}
	var wg sync.WaitGroup
	for _, c := range ty.clients {
		wg.Add(1)
		go func() { defer wg.Done(); _ = c.Close() }()
	}
	wg.Wait()
}
