package delivery

import (
	"errors"
	"sync"
)

// errStopped is returned by Register once the engine stopped.
var errStopped = errors.New("delivery: engine stopped")

// registry holds the connections registered for live delivery on this
// process: by connection id, by (user, device) (one connection per device,
// PROTOCOL.md §3), and the subset behind a full push window. It is the
// engine's only map of connections; the poller, the fast path, the reapers
// and the rebuild take snapshots of it. Every method is safe for concurrent
// use and none takes a Member's lock.
type registry struct {
	mu     sync.RWMutex
	byID   map[string]*Member
	byUser map[string]map[string]*Member // user -> device -> member
	closed bool

	// lagging are the members behind in some partition (Member.behind), so
	// the poller's catch-up and hold need not visit every connection.
	lagMu   sync.Mutex
	lagging map[*Member]struct{}
}

func newRegistry() *registry {
	return &registry{byID: map[string]*Member{}, byUser: map[string]map[string]*Member{}, lagging: map[*Member]struct{}{}}
}

// add registers m as its device's connection and returns the device's
// previous connection, which it unregisters (the caller withdraws it). It
// fails with ErrSuperseded, registering nothing, when the device's
// registered connection carries a newer claim than m (two connections of
// one device raced), and with errStopped after close.
func (r *registry) add(m *Member) (old *Member, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil, errStopped
	}
	u, d := m.client.User, m.client.Device
	devs := r.byUser[u]
	if devs == nil {
		devs = map[string]*Member{}
		r.byUser[u] = devs
	}
	old = devs[d]
	if old != nil && old.epoch > m.epoch {
		return nil, ErrSuperseded
	}
	if old != nil {
		delete(r.byID, old.client.ID)
		r.setLagging(old, false)
	}
	devs[d] = m
	r.byID[m.client.ID] = m
	return old, nil
}

// remove unregisters m and reports whether it was registered (false: it
// was superseded or removed already, so a verdict about it is stale).
func (r *registry) remove(m *Member) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byID[m.client.ID] != m {
		return false
	}
	delete(r.byID, m.client.ID)
	if devs := r.byUser[m.client.User]; devs != nil && devs[m.client.Device] == m {
		delete(devs, m.client.Device)
		if len(devs) == 0 {
			delete(r.byUser, m.client.User)
		}
	}
	r.setLagging(m, false)
	return true
}

// close refuses every later add.
func (r *registry) close() {
	r.mu.Lock()
	r.closed = true
	r.mu.Unlock()
}

// has reports whether m is the registered connection of its device.
func (r *registry) has(m *Member) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.byID[m.client.ID] == m
}

// get returns the member with connection id id, or nil.
func (r *registry) get(id string) *Member {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.byID[id]
}

// device returns the registered connection of (user, device), or nil.
func (r *registry) device(user, device string) *Member {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.byUser[user][device]
}

// ofUser returns the connections of user (one per device).
func (r *registry) ofUser(user string) []*Member { return r.appendOfUser(nil, user) }

// appendOfUser appends the connections of user to dst: the per-row form
// of ofUser, which reuses the caller's buffer instead of allocating a
// slice per outbox row (Handoff, the poller's scan).
func (r *registry) appendOfUser(dst []*Member, user string) []*Member {
	r.mu.RLock()
	defer r.mu.RUnlock()
	for _, m := range r.byUser[user] {
		dst = append(dst, m)
	}
	return dst
}

// ofUsers returns the connections of every user in users except skip.
func (r *registry) ofUsers(users []string, skip *Member) []*Member {
	r.mu.RLock()
	defer r.mu.RUnlock()
	var out []*Member
	for _, u := range users {
		for _, m := range r.byUser[u] {
			if m != skip {
				out = append(out, m)
			}
		}
	}
	return out
}

// all is a snapshot of the registered connections.
func (r *registry) all() []*Member {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]*Member, 0, len(r.byID))
	for _, m := range r.byID {
		out = append(out, m)
	}
	return out
}

// count is the number of registered connections.
func (r *registry) count() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.byID)
}

// setLagging adds m to, or removes it from, the members behind; the caller
// holds r.mu.
func (r *registry) setLagging(m *Member, lagging bool) {
	r.lagMu.Lock()
	defer r.lagMu.Unlock()
	if lagging {
		r.lagging[m] = struct{}{}
	} else {
		delete(r.lagging, m)
	}
}

// markLagging adds m to the members behind if it is still registered (a
// member removed meanwhile must not hold the outbox through the poller's
// hold).
func (r *registry) markLagging(m *Member) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	if r.byID[m.client.ID] == m {
		r.setLagging(m, true)
	}
}

// caughtUp removes m from the members behind.
func (r *registry) caughtUp(m *Member) {
	r.lagMu.Lock()
	defer r.lagMu.Unlock()
	delete(r.lagging, m)
}

// laggingMembers is a snapshot of the members behind.
func (r *registry) laggingMembers() []*Member {
	r.lagMu.Lock()
	defer r.lagMu.Unlock()
	out := make([]*Member, 0, len(r.lagging))
	for m := range r.lagging {
		out = append(out, m)
	}
	return out
}

// laggingCount is the number of members behind.
func (r *registry) laggingCount() int {
	r.lagMu.Lock()
	defer r.lagMu.Unlock()
	return len(r.lagging)
}

// hasUser reports whether user has a registered connection.
func (r *registry) hasUser(user string) bool {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.byUser[user]) > 0
}
