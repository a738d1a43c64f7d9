package server_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/server"
)

// A client that stops reading must not hold a session forever: once the
// socket's buffers are full, the server's write blocks, and after
// Config.WriteTimeout the write's watchdog closes the socket, which ends
// the session (its registration included). The client floods pings (each
// answered with a pong frame) on a socket with a tiny receive buffer and
// reads nothing; pings are slow (1 min) so the idle reaper cannot be what
// ends it.
func TestE2EWriteTimeoutEndsAStuckSession(t *testing.T) {
	t.Parallel()
	b := backends(t)[0] // the writer is the same for every backend
	e := newEnv(t, b, func(c *server.Config) {
		c.WriteTimeout = 500 * time.Millisecond
		c.Tuning.PingInterval = time.Minute
		c.Tuning.PingTimeout = time.Minute
	})
	// A 4 KiB receive buffer from before the connection exists keeps the
	// window it advertises small, so a little of the server's output fills
	// the path.
	raw := e.dialRawWith("dave", &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) {
			_ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
		})
	}})
	eventually(t, waitLong, "the stuck client to be registered", func() bool {
		return e.srv.Engine().Stats().Connected == 1
	})
	// Masked text frames of {"type":"ping"} until the server stops reading.
	ping := []byte(`{"type":"ping"}`)
	frame := make([]byte, 0, 2+4+len(ping))
	frame = append(frame, 0x81, 0x80|byte(len(ping)))
	var mask [4]byte
	binary.BigEndian.PutUint32(mask[:], 0x5a5a5a5a)
	frame = append(frame, mask[:]...)
	for i, c := range ping {
		frame = append(frame, c^mask[i%4])
	}
	var flood []byte
	for range 1000 {
		flood = append(flood, frame...)
	}
	// The server stops reading once its outbound queue is full, so writes
	// time out now and then: keep flooding until the socket is closed or
	// the test ends.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = raw.conn.SetWriteDeadline(time.Now().Add(time.Second))
			if _, err := raw.conn.Write(flood); err != nil {
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					continue
				}
				return
			}
		}
	}()
	start := time.Now()
	// Filling the path takes megabytes of pongs on loopback (7-8 s under
	// -race on 2 cores); without the watchdog the session never ends.
	eventually(t, time.Minute, "the session of the client that reads nothing to end", func() bool {
		return e.srv.Engine().Stats().Connected == 0
	})
	t.Logf("the stuck session ended %v after the flood began (write timeout 500ms)", time.Since(start).Round(10*time.Millisecond))
}

// A client that stays within credits larger than the outbound queue's
// reserve of 64 is never closed for its answers: it writes 400 sends at
// once (512 credits) while reading normally, eight times, and gets 400
// accepted each time. With the answers sharing the fixed reserve, a group
// commit answering more than 64 sends at once overflowed the queue and
// closed the client with 1008 (found by a fresh tester, about one burst in
// three).
func TestE2EBurstWithinLargeCreditsIsAnswered(t *testing.T) {
	t.Parallel()
	b := backends(t)[0] // the queue is the same for every backend
	e := newEnv(t, b, func(c *server.Config) {
		c.Tuning.MaxInFlightSends = 512
		c.Tuning.SendsPerSecond = 100_000
		c.Tuning.FanoutPerSecond = 1_000_000
	})
	chat := e.createDirect("erin", "frank")
	erin := e.dial("erin", dialOpts{})
	for round := range 8 {
		for i := range 400 {
			erin.send(chat.ChatID, fmt.Sprintf("r%d-%d", round, i), "burst")
		}
		accepted := 0
		for accepted < 400 {
			f, err := erin.nextE(func(f frame) bool { return f.Type == "accepted" || f.Type == "error" }, waitLong)
			if err != nil {
				t.Fatalf("round %d: after %d accepted: %v", round, accepted, err)
			}
			switch f.Type {
			case "accepted":
				accepted++
			case "error":
				t.Fatalf("round %d: error frame %+v after %d accepted", round, f, accepted)
			}
		}
	}
}
