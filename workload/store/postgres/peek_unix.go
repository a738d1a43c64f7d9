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
	err = rc.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// n > 0: bytes wait; n == 0 without error: the peer closed;
		// an error other than EAGAIN: the socket is broken.
		pending = n > 0 || (n == 0 && err == nil) || (err != nil && !errors.Is(err, syscall.EAGAIN))
		return true // never wait for readiness
	})
	return pending || err != nil
}
