//go:build unix

package postgres

import (
	"errors"
	"net"
	"syscall"

	"github.com/jackc/pgx/v5"
)

// hasPending reports whether the socket under an idle pooled connection
// has bytes to read or is closed, looking without consuming and without
// waiting (one recv(2) with MSG_PEEK|MSG_DONTWAIT). An idle connection is
// sent nothing in the normal course, so either means the session is
// ending or has ended: a backend ended by a restart, a failover or
// pg_terminate_backend sends FATAL (SQLSTATE 57P01) and closes, and one
// that crashed leaves a closed socket. The pool then pings the connection
// before handing it out (DB.shouldPing), which fails on it and makes the
// pool replace it, so no statement is sent on a dead session. It reports
// false when the socket cannot be reached (a wrapper that hides it).
func hasPending(c *pgx.Conn) bool {
	nc := c.PgConn().Conn()
	if u, ok := nc.(interface{ NetConn() net.Conn }); ok { // *tls.Conn
		nc = u.NetConn()
	}
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	pending := false
	var b [1]byte
	// Control, not Read: Read takes the descriptor's read lock, which
	// pgx's background reader can hold on an idle connection (it starts
	// when a write is slow, over 15 ms, and may be left blocked in one
	// more read after it is stopped, until the next reply), so a look
	// through Read could wait for data that only the next statement
	// brings: the acquire would hang. A non-blocking peek needs no lock;
	// bytes the background reader took are then not seen, and the
	// statement fails as it would without the look.
	err = rc.Control(func(fd uintptr) {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// n > 0: bytes wait; n == 0 without error: the peer closed;
		// an error other than EAGAIN: the socket is broken.
		pending = n > 0 || (n == 0 && err == nil) || (err != nil && !errors.Is(err, syscall.EAGAIN))
	})
	return pending || err != nil
}
