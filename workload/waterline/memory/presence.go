package memory

import (
	"context"
	"sync"
	"time"

	"github.com/tetra-messenger/tetra/workload/waterline"
)

// Presence is waterline.UserPresence for one process (the in-process
// index mode): every connection of the deployment is on this process.
type Presence struct {
	mu    sync.Mutex
	users map[string]*userState
	now   func() time.Time
}

type userState struct {
	conns    map[string]time.Time // conn -> expiry
	online   bool                 // announced online (also while leaving)
	leaving  bool                 // no connection since lastSeen, inside grace
	lastSeen time.Time
}

var _ waterline.UserPresence = (*Presence)(nil)

// NewPresence returns an empty presence.
func NewPresence() *Presence { return &Presence{users: map[string]*userState{}, now: time.Now} }

func (p *Presence) state(user string) *userState {
	u := p.users[user]
	if u == nil {
		u = &userState{conns: map[string]time.Time{}}
		p.users[user] = u
	}
	return u
}

// live drops u's expired connections and returns how many are left.
func (u *userState) live(now time.Time) int {
	for c, until := range u.conns {
		if !now.Before(until) {
			delete(u.conns, c)
		}
	}
	return len(u.conns)
}

// Up implements waterline.UserPresence.
func (p *Presence) Up(_ context.Context, user, conn string, ttl time.Duration) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	u := p.state(user)
	u.conns[conn] = p.now().Add(ttl)
	u.leaving = false
	if u.online {
		return false, nil
	}
	u.online = true
	return true, nil
}

// Down implements waterline.UserPresence.
func (p *Presence) Down(_ context.Context, user, conn string) (bool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	u := p.state(user)
	delete(u.conns, conn)
	now := p.now()
	if u.live(now) > 0 || !u.online {
		return false, nil
	}
	u.leaving, u.lastSeen = true, now
	return true, nil
}

// Settle implements waterline.UserPresence.
func (p *Presence) Settle(_ context.Context, user string, grace time.Duration) (bool, time.Time, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	u, ok := p.users[user]
	now := p.now()
	if !ok || !u.leaving || u.live(now) > 0 || now.Sub(u.lastSeen) < grace {
		return false, time.Time{}, nil
	}
	u.leaving, u.online = false, false
	return true, u.lastSeen, nil
}

// Refresh implements waterline.UserPresence.
func (p *Presence) Refresh(_ context.Context, conns []waterline.PresenceConn, ttl time.Duration) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	until := p.now().Add(ttl)
	for _, c := range conns {
		if u, ok := p.users[c.User]; ok {
			if _, open := u.conns[c.ID]; open {
				u.conns[c.ID] = until
			}
		}
	}
	return nil
}

// Status implements waterline.UserPresence.
func (p *Presence) Status(_ context.Context, users []string, grace time.Duration) (map[string]waterline.PresenceStatus, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.now()
	out := make(map[string]waterline.PresenceStatus, len(users))
	for _, user := range users {
		u, ok := p.users[user]
		switch {
		case !ok:
			out[user] = waterline.PresenceStatus{}
		case u.live(now) > 0 || (u.leaving && now.Sub(u.lastSeen) < grace):
			out[user] = waterline.PresenceStatus{Online: true}
		default:
			out[user] = waterline.PresenceStatus{LastSeen: u.lastSeen}
		}
	}
	return out, nil
}
