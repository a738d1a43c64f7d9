package waterline

import (
	"context"
	"time"
)

// UserPresence is the deployment-wide record of which users are online
// (PROTOCOL.md §7.4): a user is online while it has at least one open
// connection on any process, and goes offline Grace after its last one
// closed, unless one opens again within Grace. It lives next to the index
// (the Redis index's keys for a fleet, a map for the in-process index)
// but is not part of the waterline: nothing the GC decides reads it.
// Every method is one round trip to the backing store whatever the number
// of users who watch the user. Methods are safe for concurrent use; every
// error wraps ErrUnavailable.
type UserPresence interface {
	// Up records connection conn of user as open until ttl from now (a
	// connection not refreshed by then stops counting: a crashed
	// process's). It reports whether user came online now (it was
	// offline or never seen; not when it was inside Grace after its last
	// connection closed: that changes nothing).
	Up(ctx context.Context, user, conn string, ttl time.Duration) (cameOnline bool, err error)
	// Down records that conn closed. It reports whether it was user's
	// last open connection: the caller then calls Settle after Grace.
	Down(ctx context.Context, user, conn string) (last bool, err error)
	// Settle makes user offline when it has had no open connection for
	// grace since its last one closed; it reports whether it did (once
	// per going offline) and the time the last connection closed.
	Settle(ctx context.Context, user string, grace time.Duration) (wentOffline bool, lastSeen time.Time, err error)
	// Refresh moves the expiry of conns (this process's open connections)
	// to ttl from now.
	Refresh(ctx context.Context, conns []PresenceConn, ttl time.Duration) error
	// Status reports each of users: online (an open connection, or inside
	// grace after the last one closed) or offline with the time its last
	// connection closed (zero when never seen or not known).
	Status(ctx context.Context, users []string, grace time.Duration) (map[string]PresenceStatus, error)
}

// PresenceConn is one open connection of a user.
type PresenceConn struct{ User, ID string }

// PresenceStatus is one user's presence.
type PresenceStatus struct {
	Online   bool
	LastSeen time.Time // when offline: when its last connection closed (zero: unknown)
}
