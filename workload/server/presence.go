package server

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/protocol"
	"github.com/tetra-messenger/tetra/workload/text"
	"github.com/tetra-messenger/tetra/workload/waterline"
)

// Presence (PROTOCOL.md §7.4): a user is online while it has at least one
// open connection anywhere in the deployment, and goes offline
// PresenceGrace after its last one closed (a connection opened within the
// grace changes nothing). The record is a waterline.UserPresence: the
// Redis index's keys in a fleet (one script per connection event: one
// round trip per change, however many users watch), a map with the
// in-process index. Every change is announced as {"type":"presence",
// "userId","online"[,"lastSeen"]} to the connections of the users who
// share a chat with the user (read from the store at the change), on
// every process: one fleet PUBLISH per change (Engine.BroadcastNow); the
// watchers are one store query (history.CoMembers). The
// process that saw the last connection close settles the user after the
// grace; if that process dies first, no offline frame is sent, and GET
// /api/presence reports the user offline once the grace has passed (its
// connections also stop counting presenceConnTTL after their last refresh).

// PresenceGrace is how long after its last connection closed a user stays
// online (PROTOCOL.md §7.4).
const PresenceGrace = 10 * time.Second

// presenceConnTTL is how long a connection counts without a refresh; the
// tracker refreshes its own every third of it.
const presenceConnTTL = 60 * time.Second

// MaxPresenceUsers bounds the users of one GET /api/presence.
const MaxPresenceUsers = 500

type presenceEvent struct {
	kind       int // presenceUp, presenceDown, presenceSettle
	user, conn string
}

const (
	presenceUp = iota
	presenceDown
	presenceSettle
)

// presenceTracker applies connection events to the record, in order, on
// one goroutine, and announces the changes.
type presenceTracker struct {
	s      *Server
	store  waterline.UserPresence
	grace  time.Duration
	events chan presenceEvent

	mu    sync.Mutex
	local map[string]string // this process's open connections: id -> user
}

func newPresenceTracker(s *Server) *presenceTracker {
	grace := s.cfg.PresenceGrace
	if grace <= 0 {
		grace = PresenceGrace
	}
	return &presenceTracker{s: s, store: s.backends.Presence, grace: grace, events: make(chan presenceEvent, 1<<16), local: map[string]string{}}
}

// up and down are called by the session when its connection registers
// and ends; they never wait for the record.
func (p *presenceTracker) up(user, conn string) {
	p.mu.Lock()
	p.local[conn] = user
	p.mu.Unlock()
	p.events <- presenceEvent{presenceUp, user, conn}
}

func (p *presenceTracker) down(user, conn string) {
	p.mu.Lock()
	delete(p.local, conn)
	p.mu.Unlock()
	p.events <- presenceEvent{presenceDown, user, conn}
}

// run applies events until ctx ends, and refreshes this process's
// connections every third of presenceConnTTL.
func (p *presenceTracker) run(ctx context.Context) {
	defer p.s.bg.Done()
	refresh := time.NewTicker(presenceConnTTL / 3)
	defer refresh.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-p.events:
			p.apply(ctx, ev)
		case <-refresh.C:
			p.mu.Lock()
			conns := make([]waterline.PresenceConn, 0, len(p.local))
			for id, u := range p.local {
				conns = append(conns, waterline.PresenceConn{User: u, ID: id})
			}
			p.mu.Unlock()
			cctx, cancel := context.WithTimeout(ctx, p.s.storeTimeout())
			if err := p.store.Refresh(cctx, conns, presenceConnTTL); err != nil {
				p.s.log.Warn("presence: refresh the open connections", "connections", len(conns), "err", err)
			}
			cancel()
		}
	}
}

func (p *presenceTracker) apply(ctx context.Context, ev presenceEvent) {
	cctx, cancel := context.WithTimeout(ctx, p.s.storeTimeout())
	defer cancel()
	switch ev.kind {
	case presenceUp:
		came, err := p.store.Up(cctx, ev.user, ev.conn, presenceConnTTL)
		if err != nil {
			p.s.log.Warn("presence: record a connection", "user", ev.user, "err", err)
		} else if came {
			p.announce(cctx, ev.user, true, time.Time{})
		}
	case presenceDown:
		last, err := p.store.Down(cctx, ev.user, ev.conn)
		if err != nil {
			p.s.log.Warn("presence: record a closed connection", "user", ev.user, "err", err)
		} else if last {
			time.AfterFunc(p.grace+50*time.Millisecond, func() {
				select {
				case p.events <- presenceEvent{kind: presenceSettle, user: ev.user}:
				case <-ctx.Done():
				}
			})
		}
	case presenceSettle:
		gone, seen, err := p.store.Settle(cctx, ev.user, p.grace)
		if err != nil {
			p.s.log.Warn("presence: settle", "user", ev.user, "err", err)
		} else if gone {
			p.announce(cctx, ev.user, false, seen)
		}
	}
}

// watchers returns the users who share a chat with user, not user.
func (p *presenceTracker) watchers(ctx context.Context, user string) ([]string, error) {
	if cm, ok := p.s.store.(history.CoMembers); ok {
		return cm.CoMembers(ctx, user)
	}
	chats, err := p.s.store.ChatsOf(ctx, user)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, c := range chats {
		for _, m := range c.Members {
			if m != user {
				out = append(out, m)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

func (p *presenceTracker) announce(ctx context.Context, user string, online bool, lastSeen time.Time) {
	users, err := p.watchers(ctx, user)
	if err != nil {
		p.s.log.Warn("presence: read the user's chats; change not announced", "user", user, "err", err)
		return
	}
	p.s.metrics.PresenceChanged()
	if len(users) == 0 {
		return
	}
	f := protocol.Presence{Type: protocol.TypePresence, UserID: user, Online: online}
	if !online && !lastSeen.IsZero() {
		at := lastSeen.UTC()
		f.LastSeen = &at
	}
	if err := p.s.engine.BroadcastNow(ctx, users, protocol.Encode(f)); err != nil {
		p.s.log.Warn("presence change not published to the other processes", "user", user, "err", err)
	}
}

// presenceJSON is one user's entry in GET /api/presence.
type presenceJSON struct {
	Online   bool       `json:"online"`
	LastSeen *time.Time `json:"lastSeen,omitempty"`
}

// presenceUsers reads the users of GET /api/presence from q, or says in
// msg what is wrong with q. users given once is split at its commas
// (PROTOCOL.md §7.4: users=bob,carol); users given more than once is one
// user id per value, each taken whole, commas included
// (users=a,b&users=c asks for "a,b" and "c"; one such id alone is asked
// for by repeating it: users=a,b&users=a,b). Every name must be a user id
// (text.User: 1..128 bytes of UTF-8 without control characters), so an
// empty one, as in users=bob,,carol, is refused; at most
// MaxPresenceUsers names.
func presenceUsers(q url.Values) (names []string, msg string) {
	for k := range q {
		if k != "users" {
			return nil, fmt.Sprintf("unknown query parameter %q; this call takes \"users\"", k)
		}
	}
	switch v := q["users"]; {
	case len(v) == 0 || len(v) == 1 && v[0] == "":
		return nil, "users is required: a comma-separated list of user ids, or users repeated with one user id each"
	case len(v) == 1:
		names = strings.Split(v[0], ",")
	default:
		names = v
	}
	if len(names) > MaxPresenceUsers {
		return nil, fmt.Sprintf("at most %d users per request", MaxPresenceUsers)
	}
	for _, n := range names {
		if err := text.User("user id", n); err != nil {
			return nil, "users: " + clientMessage(err)
		}
	}
	return names, ""
}

// handlePresence is GET /api/presence?users=bob,carol (PROTOCOL.md §7.4):
// {"presence":{"bob":{"online":true},"carol":{"online":false,"lastSeen":...}}}
// for the named users who share a chat with the caller; the others are
// left out, never reported.
//
// The users are presenceUsers' list: one users parameter is a
// comma-separated list (§7.4); users repeated is one user id per value,
// taken whole, so an id holding a comma (user ids may, PROTOCOL.md §1)
// can be asked for. 400 for a query string that does not parse
// (queryValues), no users, more than MaxPresenceUsers, a name that is no
// user id, or any other query parameter (strict as bodies are, PROTOCOL.md
// §7.7); 503 when the store or the record is unavailable.
func (s *Server) handlePresence(w http.ResponseWriter, r *http.Request, user string) {
	q, ok := queryValues(w, r)
	if !ok {
		return
	}
	names, msg := presenceUsers(q)
	if msg != "" {
		writeError(w, protocol.CodeInvalid, msg)
		return
	}
	known, err := s.presence.watchers(r.Context(), user)
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	var ask []string
	for _, n := range names {
		if _, ok := slices.BinarySearch(known, n); ok {
			ask = append(ask, n)
		}
	}
	slices.Sort(ask)
	ask = slices.Compact(ask)
	st, err := s.presence.store.Status(r.Context(), ask, s.presence.grace)
	if err != nil {
		writeError(w, protocol.CodeUnavailable, "presence is unavailable; retry")
		return
	}
	out := make(map[string]presenceJSON, len(st))
	for u, v := range st {
		e := presenceJSON{Online: v.Online}
		if !v.Online && !v.LastSeen.IsZero() {
			at := v.LastSeen.UTC()
			e.LastSeen = &at
		}
		out[u] = e
	}
	writeJSON(w, http.StatusOK, map[string]any{"presence": out})
}
