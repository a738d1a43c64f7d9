package delivery

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tetra-messenger/tetra/workload/waterline"
)

// maxPos marks a horizon not yet known: nothing is delivered to it.
const maxPos = math.MaxInt64

type pkey struct {
	p   int32
	pos int64
}

// Member is a registered connection. The server keeps it to ack and touch.
type Member struct {
	conn        Conn
	client      waterline.Client
	connectedAt time.Time
	epoch       int64        // the device claim's epoch in a shared index; 0 without one
	lastSeen    atomic.Int64 // unix nanos

	mu sync.Mutex
	// horizon is, per partition, the member's own horizon: rows at or
	// below were examined by the poller for it (or precede the
	// connection). The poller also passes every member that follows its
	// scan at once, through its floor (poller.floorOf), which stands for
	// the horizon of each member not behind whose own horizon is lower,
	// from the first floor set after since[p]: horizonLocked is the
	// horizon every check uses.
	horizon map[int32]int64
	// since is, per partition, the poller's floor when the member began
	// to follow the scan (its start became known, or it caught up): a
	// floor no higher was set before and does not count for it.
	since map[int32]int64
	// ahead holds the positions above the horizon the fast path sent;
	// marks at or below the horizon are stale and dropped in passing
	// (markAheadLocked) once there are aheadLimit of them, or by the
	// poller as it passes them.
	ahead      map[pkey]struct{}
	aheadLimit int
	// shed is the lowest position the fast path left to the poller for
	// this member (per partition), or absent. While set, later fast-path
	// items are left to the poller too, so the member still receives
	// commit order; the poller clears it once its horizon passes.
	shed map[int32]int64
	// behind holds the partitions where rows for this member wait above
	// its horizon because its push window was full when the poller came
	// to them, each with the acceptance time of the oldest message
	// waiting; the poller's catch-up delivers them in order as
	// acknowledgements free the window (see catchUp). While a partition is
	// behind, the poller's hold stays at or below horizon+1, so GC keeps
	// those rows.
	behind map[int32]time.Time
	// While the member is behind, the time its window spends full is the
	// client's to answer for (the server has sent all it may), the time it
	// has room is the server's (it owes the next frames). The overload
	// reaper judges only the client's time: fullSince is when the window
	// last became full (zero while it has room or the member is not
	// behind), heldFull the full time accumulated before that since the
	// member fell behind (noteWindowLocked keeps both).
	fullSince time.Time
	heldFull  time.Duration
	// behindSince is when the member last fell behind (from not behind
	// anywhere); the overload reaper compares heldFull with it.
	behindSince time.Time
	shard       int
	// out is the push window: every message frame sent to this connection
	// (or about to be) and not acknowledged, by message id. It never holds
	// more than max-pending entries. It is this process's own record of
	// what its connection holds: the index mirrors it (Sent, Ack), and a
	// rebuild restores the index from it.
	out map[string]*outstanding
	// excluded maps a chat the member's user was removed from to the
	// removal's cutoff Seq (Engine.Exclude): messages of that chat at or
	// below it are not delivered to this connection. Messages above it
	// have outbox rows for the user only if it was added again.
	excluded map[string]int64
}

// excludedLocked reports whether a message of chat with Seq seq is not to
// be delivered to m (Engine.Exclude); the caller holds m.mu.
func (m *Member) excludedLocked(chat string, seq int64) bool {
	cut, ok := m.excluded[chat]
	return ok && seq <= cut
}

// outstanding is one message in a member's push window.
type outstanding struct {
	entry      waterline.Entry
	frame      []byte
	chat       string // the message's chat and Seq, for Engine.Exclude
	seq        int64
	attempts   int       // sends so far; 0 while the first send is on its way
	leaseUntil time.Time // when it is due again; zero before the first send
}

// ID is the member's connection id.
func (m *Member) ID() string { return m.client.ID }

// slot is the outcome of asking a member's window for room.
type slot int

const (
	slotTaken   slot = iota // reserved: send it
	slotHeld                // already outstanding: sent before, nothing to do
	slotRefused             // the window is full
)

// reserveLocked takes a window slot for it, recording its frame; the caller
// holds m.mu. window is max-pending.
func (m *Member) reserveLocked(it item, window int) slot {
	if _, ok := m.out[it.entry.MessageID]; ok {
		return slotHeld
	}
	if len(m.out) >= window {
		return slotRefused
	}
	m.out[it.entry.MessageID] = &outstanding{entry: it.entry, frame: it.frame, chat: it.chat, seq: it.seq}
	return slotTaken
}

// horizonLocked returns m's horizon in p given the poller's floor for p
// (poller.floorOf): its own horizon, or the floor where that is higher,
// the member follows the scan (its start is known and it is not behind)
// and the floor was set after it began to (since). The caller holds m.mu.
func (m *Member) horizonLocked(p int32, floor int64) int64 {
	h := m.horizon[p]
	if h == maxPos || floor <= h || floor <= m.since[p] || m.isBehind(p) {
		return h
	}
	return floor
}

// followLocked records that m follows the poller's scan in p from now on,
// whose floor is floor: its start became known or it caught up. The
// caller holds m.mu.
func (m *Member) followLocked(p int32, floor int64) {
	m.since[p] = floor
}

// sheddingLocked reports whether the fast path leaves m's items in p to
// the poller (see Member.shed), dropping a mark the horizon has passed;
// the caller holds m.mu.
func (m *Member) sheddingLocked(p int32, floor int64) bool {
	at, ok := m.shed[p]
	if ok && at <= m.horizonLocked(p, floor) {
		delete(m.shed, p)
		return false
	}
	return ok
}

// minAheadLimit is the number of fast-path marks a member holds before
// it first drops the stale ones (markAheadLocked).
const minAheadLimit = 32

// markAheadLocked records that the fast path sent position k, and drops
// the stale marks once there are aheadLimit of them; floorOf gives the
// poller's floors. The caller holds m.mu.
func (m *Member) markAheadLocked(k pkey, floorOf func(int32) int64) {
	m.ahead[k] = struct{}{}
	if len(m.ahead) < max(m.aheadLimit, minAheadLimit) {
		return
	}
	for a := range m.ahead {
		if a.pos <= m.horizonLocked(a.p, floorOf(a.p)) {
			delete(m.ahead, a)
		}
	}
	// Marks still above the horizon are live (the poller has not come to
	// them): look again only when their number has doubled, so a poller
	// far behind costs each mark O(1) on average.
	m.aheadLimit = 2 * len(m.ahead)
}

// waitingLocked reports whether rows wait in the outbox for m: it is
// behind somewhere, or the fast path left it items (shed) its horizon has
// not passed. The caller holds m.mu.
func (m *Member) waitingLocked(floorOf func(int32) int64) bool {
	if len(m.behind) > 0 {
		return true
	}
	for p := range m.shed {
		if m.sheddingLocked(p, floorOf(p)) {
			return true
		}
	}
	return false
}

// isBehind reports whether rows of partition p wait for m's window; the
// caller holds m.mu.
func (m *Member) isBehind(p int32) bool {
	_, ok := m.behind[p]
	return ok
}

// fallBehindLocked records that the message accepted at oldest, and what
// follows it in partition p, wait for m's window; floor is the poller's
// floor for p. The caller holds m.mu.
func (m *Member) fallBehindLocked(p int32, floor int64, oldest, now time.Time, window int) {
	// From here the catch-up starts at the horizon: the floor that stood
	// for it becomes its own.
	m.horizon[p] = m.horizonLocked(p, floor)
	if len(m.behind) == 0 {
		m.heldFull, m.fullSince, m.behindSince = 0, time.Time{}, now
	}
	m.behind[p] = oldest
	m.noteWindowLocked(now, window)
}

// catchUpLocked clears partition p's behind mark; the caller holds m.mu.
func (m *Member) catchUpLocked(p int32, now time.Time, window int) {
	delete(m.behind, p)
	m.noteWindowLocked(now, window)
}

// noteWindowLocked updates the window-full clock after the window or the
// behind marks changed (window is max-pending); the caller holds m.mu.
// The clock runs while the member is behind and its window is full.
func (m *Member) noteWindowLocked(now time.Time, window int) {
	full := len(m.behind) > 0 && len(m.out) >= window
	switch {
	case full && m.fullSince.IsZero():
		m.fullSince = now
	case !full && !m.fullSince.IsZero():
		m.heldFull += now.Sub(m.fullSince)
		m.fullSince = time.Time{}
	}
	if len(m.behind) == 0 {
		m.heldFull = 0
	}
}

// heldLocked returns how long the window has now been full without an
// acknowledgement freeing a slot (stalled; 0 when it has room), the total
// time it was full since the member fell behind (held), and how long ago
// that was (behind); the caller holds m.mu.
func (m *Member) heldLocked(now time.Time) (stalled, held, behind time.Duration) {
	if !m.fullSince.IsZero() {
		stalled = now.Sub(m.fullSince)
	}
	return stalled, m.heldFull + stalled, now.Sub(m.behindSince)
}

type item struct {
	entry  waterline.Entry
	frame  []byte
	chat   string    // the message's chat
	seq    int64     // the message's Seq
	sentAt time.Time // the message's acceptance time; zero for re-deliveries
}
