package client

import (
	"context"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/protocol"
)

// TestSendHonoursRetryAfter: a send answered rate_limited with
// retryAfterMs is resent no sooner (PROTOCOL.md §7.7), whatever
// LimitRetryWait says; with ReturnLimitErrors the error carries it.
func TestSendHonoursRetryAfter(t *testing.T) {
	fs := newFakeServer(t)
	fs.addChat("c1", "alice")
	var first time.Time
	var resent time.Duration
	fs.onSend = func(ev sendEvent) sendReply {
		if ev.n == 1 {
			first = time.Now()
			return sendReply{code: protocol.CodeRateLimited, retry: 300}
		}
		resent = time.Since(first)
		return sendReply{}
	}
	cfg := newRecorder().config(fs, "alice")
	cfg.LimitRetryWait = 5 * time.Millisecond
	c := dial(t, cfg)
	if _, err := c.SendWithID(context.Background(), "c1", "k", "hi"); err != nil {
		t.Fatal(err)
	}
	if resent < 300*time.Millisecond {
		t.Errorf("resent after %v, want at least the server's retryAfterMs (300 ms)", resent)
	}

	fs2 := newFakeServer(t)
	fs2.addChat("c1", "alice")
	fs2.onSend = func(sendEvent) sendReply { return sendReply{code: protocol.CodeRateLimited, retry: 250} }
	cfg2 := newRecorder().config(fs2, "alice")
	cfg2.ReturnLimitErrors = true
	c2 := dial(t, cfg2)
	_, err := c2.SendWithID(context.Background(), "c1", "k", "hi")
	if e, ok := err.(*Error); !ok || e.Code != protocol.CodeRateLimited || e.RetryAfter != 250*time.Millisecond {
		t.Errorf("ReturnLimitErrors: %#v, want rate_limited with RetryAfter 250ms", err)
	}
}
