package server_test

// Readiness and the send timeout under real faults (issue 13, point 5): a
// PostgreSQL server of the test's own frozen with SIGSTOP, and SQLite on a
// real filesystem that fills up. The machine's shared PostgreSQL and Redis
// are never touched.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/internal/testenv"
	"github.com/tetra-messenger/tetra/workload/server"
)

// readyz asks GET /readyz with a client timeout of its own and returns the
// status, the body and how long the answer took (status 0: no answer).
func (e *env) readyz(timeout time.Duration) (int, string, time.Duration) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.t.Context(), timeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.srv.URL()+"/readyz", nil)
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error(), time.Since(start)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), time.Since(start)
}

// The PostgreSQL server stalls (every process of it SIGSTOPped: open
// connections hang, new ones are never answered). /readyz still answers
// within its deadline, 503 naming the store; every send, including those
// queued behind the hung commit, is answered overloaded within the store
// timeout; after SIGCONT the same sends are accepted
// and /readyz is 200. Before, sends waited a whole commit timeout (10 s)
// each, one transaction after the other, and /readyz its 2 s ping timeout
// (issue 13, point 5).
func TestE2EPostgresFrozen(t *testing.T) {
	t.Parallel()
	pg := testenv.NewOwnPostgres(t)
	const storeTimeout = time.Second
	e := newEnv(t, customBackend("own postgres", func(cfg *server.Config) {
		cfg.Store, cfg.Index = pg.URL(), "memory"
		cfg.StoreTimeout = storeTimeout
		cfg.Delivery.StoreTimeout = storeTimeout
		cfg.Ingest.BatchSize, cfg.Ingest.MaxBatch = 1, 1
	}), nil)
	chat := e.createDirect("alice", "bob")
	alice := e.dial("alice", dialOpts{})
	bob := e.dial("bob", dialOpts{})
	acc := alice.sendOK(chat.ChatID, "before", "before the stall")
	bob.next("message before", messageID(acc.MessageID))
	bob.ack(acc.MessageID)
	if st, body, _ := e.readyz(10 * time.Second); st != http.StatusOK {
		t.Fatalf("/readyz before the stall: %d %s", st, body)
	}

	pg.Freeze()
	t.Logf("froze PostgreSQL (postmaster and %d child processes)", pg.Backends())
	// One transaction per send (Ingest.BatchSize 1): the first hangs, the
	// others queue behind it.
	start := time.Now()
	alice.send(chat.ChatID, "hung", "into the hung commit")
	for i := range 5 {
		alice.send(chat.ChatID, fmt.Sprint("queued-", i), "behind the hung commit")
	}
	bound := storeTimeout + 3*time.Second // the timeout plus room for a busy machine
	for _, corr := range []string{"hung", "queued-0", "queued-1", "queued-2", "queued-3", "queued-4"} {
		f := alice.next("answer to "+corr, answers(corr))
		took := time.Since(start)
		t.Logf("%s answered %s after %v", corr, f.Code, took.Round(time.Millisecond))
		if f.Type != "error" || f.Code != "overloaded" {
			t.Errorf("send %s during the stall answered %s, want overloaded", corr, f)
		}
		if took > bound {
			t.Errorf("send %s answered after %v, want within the store timeout %v (+ %v)", corr, took, storeTimeout, bound-storeTimeout)
		}
	}
	st, body, took := e.readyz(10 * time.Second)
	t.Logf("/readyz during the stall: %d after %v: %s", st, took.Round(time.Millisecond), body)
	if st != http.StatusServiceUnavailable || strings.Contains(body, `"store":"ok"`) {
		t.Errorf("/readyz during the stall: %d %s, want 503 naming the store", st, body)
	}
	if limit := server.DefaultReadyTimeout + 2*time.Second; took > limit {
		t.Errorf("/readyz answered after %v, want within its deadline %v (+ 2 s)", took, server.DefaultReadyTimeout)
	}

	pg.Thaw()
	var back frame
	eventually(t, 30*time.Second, "a send accepted after the thaw", func() bool {
		f, err := alice.sendOKE(chat.ChatID, "hung", "into the hung commit")
		back = f
		return err == nil
	})
	bob.next("the message after the thaw", messageID(back.MessageID))
	eventually(t, 30*time.Second, "/readyz 200 after the thaw", func() bool {
		st, _, _ := e.readyz(10 * time.Second)
		return st == http.StatusOK
	})
	if got := ids(e.history("bob", chat.ChatID, "")); len(got) != 2 || got[1] != back.MessageID {
		t.Errorf("history %v, want the message before the stall and the one resent after it", got)
	}
}

// SQLite on a filesystem that fills up: the database answers pings but no
// commit can write. /readyz turns 503 (naming the failing commits) as soon
// as commits fail, and 200 again once one succeeds after space is freed;
// sends are answered overloaded meanwhile and accepted after. Before,
// /readyz answered 200 {"store":"ok"} all the while every commit failed
// (issue 13, point 5).
func TestE2EDiskFull(t *testing.T) {
	t.Parallel()
	fs := testenv.NewSmallFS(t, 24<<20)
	e := newEnv(t, customBackend("sqlite on a small filesystem", func(cfg *server.Config) {
		cfg.Store, cfg.Index = "sqlite://"+fs.Dir+"/tetra.db", "memory"
	}), nil)
	chat := e.createDirect("alice", "bob")
	alice := e.dial("alice", dialOpts{})
	alice.sendOK(chat.ChatID, "before", "before the disk filled")
	if st, body, _ := e.readyz(10 * time.Second); st != http.StatusOK {
		t.Fatalf("/readyz before: %d %s", st, body)
	}

	fs.Fill()
	body := strings.Repeat("x", 4000)
	f := alice.sendErr(chat.ChatID, "full-1", body, "overloaded")
	t.Logf("send on a full disk: %s", f)
	start := time.Now()
	var last string
	eventually(t, 10*time.Second, "/readyz 503 while commits fail", func() bool {
		st, b, _ := e.readyz(10 * time.Second)
		last = b
		return st == http.StatusServiceUnavailable
	})
	t.Logf("/readyz 503 %v after the failed send: %s", time.Since(start).Round(time.Millisecond), last)
	if !strings.Contains(last, `"store":"ok"`) || strings.Contains(last, `"commits":"ok"`) {
		t.Errorf("/readyz %s, want the store answering and the commits failing", last)
	}

	fs.Free()
	eventually(t, 20*time.Second, "the send accepted after space was freed", func() bool {
		_, err := alice.sendOKE(chat.ChatID, "full-1", body)
		return err == nil
	})
	if st, b, _ := e.readyz(10 * time.Second); st != http.StatusOK {
		t.Errorf("/readyz after a commit succeeded again: %d %s, want 200", st, b)
	}
}
