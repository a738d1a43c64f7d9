package server

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/ingest"
	"github.com/tetra-messenger/tetra/workload/protocol"
)

// The fan-out budget (issue 13, point 7; config.Tuning.FanoutPerSecond): a
// send writes one outbox row per member of its chat, so the send rate
// alone let one connection write 50,000 rows in 0.3 s to a 1,000-member
// group. Each user has one token bucket of rows per process, shared by its
// connections (held while it has one), refilled at FanoutPerSecond with a
// burst of one second's worth.

// fanoutBudgets holds the users' buckets. The zero value is ready.
type fanoutBudgets struct {
	mu sync.Mutex
	m  map[string]*fanoutBudget
}

type fanoutBudget struct {
	lim   *rate.Limiter
	conns int
}

// acquire returns user's bucket, creating it full at perSecond; each
// acquire is paired with a release.
func (b *fanoutBudgets) acquire(user string, perSecond int) *rate.Limiter {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[string]*fanoutBudget{}
	}
	u := b.m[user]
	if u == nil {
		u = &fanoutBudget{lim: rate.NewLimiter(rate.Limit(perSecond), perSecond)}
		b.m[user] = u
	}
	u.conns++
	return u.lim
}

// release forgets user's bucket with its last connection.
func (b *fanoutBudgets) release(user string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if u := b.m[user]; u != nil {
		if u.conns--; u.conns <= 0 {
			delete(b.m, user)
		}
	}
}

// chargeFanout takes the rows a send to chatID will write from the
// session's user's bucket: one per member (the chat cache's count),
// capped at the burst. It returns "" when the send may go, else the error
// code and message to answer it with (nothing is stored): rate_limited
// over the budget (with retryMs, when the bucket will hold the cost:
// PROTOCOL.md §7.7), overloaded when the member count cannot be read. An
// unknown chat costs one row: its commit answers not_found.
func (c *session) chargeFanout(ctx context.Context, chatID string, perSecond int) (code, msg string, retryMs int64) {
	if c.fanout.Limit() != rate.Limit(perSecond) {
		c.fanout.SetLimit(rate.Limit(perSecond))
		c.fanout.SetBurst(perSecond)
	}
	n, err := c.srv.chats.size(ctx, chatID, c.srv.storeTimeout())
	switch {
	case errors.Is(err, history.ErrNotFound):
		n = 1
	case err != nil:
		return protocol.CodeOverloaded, "not stored: the store is unavailable; resend with the same correlationId", 0
	}
	cost := min(n, perSecond)
	if !c.fanout.AllowN(time.Now(), cost) {
		return protocol.CodeRateLimited, fmt.Sprintf("fan-out over fanoutPerSecond: this send writes %d outbox rows (one per member), the budget is %d rows a second per user; resend later with the same correlationId", n, perSecond),
			retryAfterMs(c.fanout, cost)
	}
	return "", "", 0
}

// storeTimeout is the send's store timeout (Config.StoreTimeout).
func (s *Server) storeTimeout() time.Duration {
	if t := s.cfg.Ingest.StoreTimeout; t > 0 {
		return t
	}
	return ingest.DefaultStoreTimeout
}

// chatDownFor is how long a failed member count makes size answer
// unavailable at once, so a hung store costs a connection's pipelined
// sends one store timeout in all, not one each.
const chatDownFor = time.Second

// errChatsDown is size's answer while a recent lookup failed.
var errChatsDown = fmt.Errorf("chat cache: a member lookup failed less than %v ago: %w", chatDownFor, history.ErrUnavailable)

// size returns the number of members of chatID: from the cache while the
// entry is fresh, else from the store within timeout. A failed lookup
// makes the next ones fail at once for chatDownFor.
func (c *chatCache) size(ctx context.Context, chatID string, timeout time.Duration) (int, error) {
	c.mu.Lock()
	e, ok := c.m[chatID]
	down := time.Now().Before(c.downUntil)
	c.mu.Unlock()
	if ok && time.Since(e.at) < c.ttl {
		return len(e.members), nil
	}
	if down {
		return 0, errChatsDown
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	members, err := c.members(ctx, chatID)
	if err != nil && !errors.Is(err, history.ErrNotFound) {
		c.mu.Lock()
		c.downUntil = time.Now().Add(chatDownFor)
		c.mu.Unlock()
	}
	return len(members), err
}

// noteMembers records chatID's members as a commit saw them
// (history.Result.Members), so a chat in use keeps its entry fresh without
// a lookup.
func (c *chatCache) noteMembers(chatID string, members []string) {
	if len(members) == 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.m) > 100000 {
		c.m = map[string]cachedChat{}
	}
	e := c.m[chatID] // what is known of the chat's history setting stays
	e.members, e.at = members, time.Now()
	c.m[chatID] = e
}
