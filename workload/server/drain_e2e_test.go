package server_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/tetra-messenger/tetra/workload/server"
)

// Drain (what `tetra serve` does on SIGTERM before Shutdown): /readyz fails
// at once while the API, new sockets and open sockets keep being served for
// the whole drain; only Shutdown then closes the sockets, with 1001.
func TestE2EDrainFailsReadyzAndKeepsServing(t *testing.T) {
	t.Parallel()
	b := backends(t)[0] // the embedded default: drain is backend-independent
	e := newEnv(t, b, func(c *server.Config) {})
	chat := e.createDirect("alice", "bob")
	alice := e.dial("alice", dialOpts{})
	bob := e.dial("bob", dialOpts{})
	if st := readyz(t, e); st != http.StatusOK {
		t.Fatalf("/readyz before the drain: %d", st)
	}

	const drain = 1500 * time.Millisecond
	done := make(chan struct{})
	start := time.Now()
	go func() { e.srv.Drain(context.Background(), drain); close(done) }()
	eventually(t, 2*time.Second, "/readyz 503 draining", func() bool {
		return readyz(t, e) == http.StatusServiceUnavailable
	})
	// Still serving: liveness, the API, a new socket, a message between the
	// open sockets, all within the drain.
	if st, body := e.call(http.MethodGet, "/healthz", "", nil); st != http.StatusOK {
		t.Errorf("/healthz during the drain: %d %s", st, body)
	}
	if st, body := e.call(http.MethodGet, "/api/chats", e.token("alice"), nil); st != http.StatusOK {
		t.Errorf("GET /api/chats during the drain: %d %s", st, body)
	}
	carol := e.dial("carol", dialOpts{})
	carol.close()
	acc := alice.sendOK(chat.ChatID, "during-drain", "still served")
	bob.next("the message sent during the drain", messageID(acc.MessageID))
	bob.ack(acc.MessageID)
	if time.Since(start) >= drain {
		t.Fatalf("the checks took %v, longer than the drain (%v): they prove nothing", time.Since(start), drain)
	}
	select {
	case <-done:
		t.Fatalf("Drain returned after %v, before its %v", time.Since(start), drain)
	default:
	}
	<-done
	if took := time.Since(start); took < drain {
		t.Fatalf("Drain returned after %v, want %v", took, drain)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	go e.srv.Shutdown(ctx)
	alice.expectClose(websocket.StatusGoingAway)
	bob.expectClose(websocket.StatusGoingAway)
}

// A drain ends early when its context does (a second SIGTERM).
func TestE2EDrainEndsWithContext(t *testing.T) {
	t.Parallel()
	e := newEnv(t, backends(t)[0], nil)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	e.srv.Drain(ctx, time.Minute)
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Drain ignored its context: %v", took)
	}
	if st := readyz(t, e); st != http.StatusServiceUnavailable {
		t.Fatalf("/readyz after a drain: %d, want 503", st)
	}
}

// readyz is the status of GET /readyz (a 503 is expected here, so not
// through e.call, which fails a test on any 5xx).
func readyz(t *testing.T, e *env) int {
	t.Helper()
	resp, err := e.http.Get(e.srv.URL() + "/readyz")
	if err != nil {
		t.Fatalf("GET /readyz: %v", err)
	}
	resp.Body.Close()
	return resp.StatusCode
}
