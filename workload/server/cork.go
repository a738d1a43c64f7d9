package server

import (
	"context"
	"net"
	"sync"
)

// The writer of a session sends every frame in a write(2) of its own:
// coder/websocket flushes its buffer at the end of each message. When a
// group commit answers several sends of one connection, or pushes it
// several messages at once (a group's members, a burst), those frames
// can leave in one write instead (issue 22: one write per frame was
// about a fifth of the server's CPU). A corkConn is the connection
// under the WebSocket: while the writer has it corked, the library's
// flushes collect in memory, and uncork writes them in one call. Nothing
// waits for more frames to come: the writer corks only when frames are
// queued already, and uncorks as soon as the queue is empty (or a batch
// is full), so no frame is delayed.

// maxCorkBytes bounds what one uncork writes; the writer uncorks when a
// batch reaches it.
const maxCorkBytes = 64 << 10

// corkListener makes every accepted connection a *corkConn.
type corkListener struct{ net.Listener }

func (l corkListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &corkConn{Conn: c}, nil
}

// corkConn is a net.Conn whose writes can be held and sent together. It
// is safe for concurrent use: writes from other goroutines (a ping) while
// it is corked join the batch, in order.
type corkConn struct {
	net.Conn
	mu     sync.Mutex
	corked bool
	buf    []byte
}

func (c *corkConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.corked {
		c.buf = append(c.buf, p...)
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// CloseWrite half-closes the connection when the one beneath can
// (net/http uses it on a TCP connection it closes).
func (c *corkConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// cork holds the writes from now on until uncork.
func (c *corkConn) cork() {
	c.mu.Lock()
	c.corked = true
	c.mu.Unlock()
}

// held is how many bytes wait for uncork.
func (c *corkConn) held() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.buf)
}

// uncork writes what was held, in one write, and lets later writes
// through.
func (c *corkConn) uncork() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.corked = false
	if len(c.buf) == 0 {
		return nil
	}
	_, err := c.Conn.Write(c.buf)
	if cap(c.buf) > 2*maxCorkBytes {
		c.buf = nil // a burst of large frames: do not keep its buffer
	} else {
		c.buf = c.buf[:0]
	}
	return err
}

type corkKey struct{}

// connContext records the accepted connection in the request's context,
// so a WebSocket session finds its corkConn (http.Server.ConnContext).
func connContext(ctx context.Context, c net.Conn) context.Context {
	if cc, ok := c.(*corkConn); ok {
		return context.WithValue(ctx, corkKey{}, cc)
	}
	return ctx
}
