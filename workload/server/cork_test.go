package server

import (
	"bytes"
	"io"
	"net"
	"testing"
)

// countConn counts the writes that reach the connection.
type countConn struct {
	net.Conn
	writes int
	buf    bytes.Buffer
}

func (c *countConn) Write(p []byte) (int, error) { c.writes++; return c.buf.Write(p) }

// Corked writes leave in one write, in order; uncorked ones pass at once.
func TestCorkConnBatchesInOrder(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	under := &countConn{Conn: a}
	c := &corkConn{Conn: under}
	_, _ = c.Write([]byte("0"))
	c.cork()
	for _, s := range []string{"1", "22", "333"} {
		if n, err := c.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("corked write: %d, %v", n, err)
		}
	}
	if got := c.held(); got != 6 || under.writes != 1 {
		t.Fatalf("held %d bytes after %d writes below; want 6 held and only the uncorked write through", got, under.writes)
	}
	if err := c.uncork(); err != nil {
		t.Fatal(err)
	}
	_, _ = c.Write([]byte("4"))
	if under.writes != 3 || under.buf.String() != "0122333"+"4" {
		t.Fatalf("%d writes carried %q; want 3 carrying 01223334", under.writes, under.buf.String())
	}
	if err := c.uncork(); err != nil || under.writes != 3 {
		t.Fatalf("an empty uncork wrote (%d writes, %v)", under.writes, err)
	}
	var _ io.Writer = c
}
