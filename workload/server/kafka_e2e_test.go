package server_test

import (
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/tetra-messenger/tetra/internal/testenv"
	"github.com/tetra-messenger/tetra/workload/server"
)

// The Kafka brokers become unreachable, come back, and restart while the
// server runs with its outbox in Kafka. Nothing accepted is lost: sends are
// accepted throughout (history is the truth; the relay retries), live
// delivery resumes on the open sockets once the relay catches up, and the
// topic holds every (message, member) exactly once. Issue 5, Faults.
func TestE2EKafkaOutageAndRestart(t *testing.T) {
	t.Parallel()
	fk := testenv.NewFakeKafka(t)
	topic := "tetra-test-" + strings.ToLower(ulid.Make().String())
	e := newEnv(t, customBackend("sqlite+kafka with faults", func(cfg *server.Config) {
		cfg.Store, cfg.Index = "sqlite", "memory"
		cfg.Outbox = "kafka://" + strings.Join(fk.Seeds(), ",") + "/" + topic
		cfg.Delivery.StoreTimeout = time.Second
	}), func(c *server.Config) {
		c.Tuning.GCInterval = time.Hour // keep every record, to count them at the end
	})
	chat := e.createGroup("alice", "g", "bob", "carol")
	alice := e.dial("alice", dialOpts{})
	bob := e.dial("bob", dialOpts{})
	var accepted []string
	deliver := func(what string, ids ...string) {
		t.Helper()
		for _, id := range ids {
			// Generous: after an outage the relay retries with backoff.
			if _, err := bob.nextE(messageID(id), 90*time.Second); err != nil {
				t.Fatalf("%s: message %s not delivered live: %v", what, id, err)
			}
		}
		bob.ack(ids...)
	}
	send := func(phase string, n int) []string {
		t.Helper()
		var ids []string
		for i := range n {
			f := alice.sendOK(chat.ChatID, fmt.Sprintf("%s-%d", phase, i), phase)
			ids = append(ids, f.MessageID)
		}
		accepted = append(accepted, ids...)
		return ids
	}

	deliver("before", send("before", 2)...)

	ready := func() (int, string) { // not e.call: a 503 is the point here
		resp, err := e.http.Get(e.srv.URL() + "/readyz")
		if err != nil {
			t.Fatalf("GET /readyz: %v", err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	if st, body := ready(); st != 200 || !strings.Contains(body, `"outbox":"ok"`) {
		t.Fatalf("/readyz before the outage = %d %s, want 200 with the outbox ok", st, body)
	}
	fk.Cut()
	eventually(t, waitLong, "/readyz to report the unreachable outbox", func() bool {
		st, body := ready()
		return st == 503 && !strings.Contains(body, `"outbox":"ok"`)
	})
	txns := e.srv.Relay().Stats().Transactions
	during := send("during-outage", 5) // accepted: history commits without Kafka
	bob.expectNone("live delivery while the brokers are unreachable", isType("message"), quiet)
	if st := e.srv.Relay().Stats(); st.Transactions != txns {
		t.Fatalf("relay committed %d transactions while the brokers were unreachable", st.Transactions-txns)
	}
	fk.Restore()
	deliver("after the outage", during...)
	eventually(t, waitLong, "/readyz to recover", func() bool { st, _ := ready(); return st == 200 })

	fk.Restart()
	deliver("after the restart", send("after-restart", 3)...)

	got := ids(e.history("bob", chat.ChatID, ""))
	if fmt.Sprint(got) != fmt.Sprint(accepted) {
		t.Fatalf("history %v, want every accepted message once, in order: %v", got, accepted)
	}
	// Every (message, member) exactly once in the topic, read_committed.
	count := map[string]int{}
	log := e.srv.Outbox()
	parts, err := log.Partitions(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range parts {
		after := int64(-1)
		for {
			rows, err := log.Scan(t.Context(), p, after, 100)
			if err != nil {
				t.Fatal(err)
			}
			if len(rows) == 0 {
				break
			}
			for _, r := range rows {
				count[r.Message.ID+"/"+r.Recipient]++
				after = r.Pos
			}
		}
	}
	for _, id := range accepted {
		for _, u := range []string{"alice", "bob", "carol"} {
			if n := count[id+"/"+u]; n != 1 {
				t.Errorf("message %s has %d records for %s, want exactly 1", id, n, u)
			}
			delete(count, id+"/"+u)
		}
	}
	if len(count) != 0 {
		t.Errorf("records for messages nobody sent: %v", count)
	}
	t.Logf("relay: %+v", e.srv.Relay().Stats())
}

// A bad --outbox is refused at once, naming what is supported; an
// unreachable Kafka is refused at start, naming it and where.
func TestServerRefusesBadOrUnreachableKafka(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		outbox string
		want   []string
	}{
		{"amqp://mq:5672/q", []string{"--outbox", "kafka://"}},
		{"kafka://k1:9092", []string{"--outbox", "topic"}},
		{"kafka://127.0.0.1:1/tetra-outbox", []string{"Kafka", "127.0.0.1:1", "tetra-outbox"}},
	} {
		cfg := server.DefaultConfig()
		cfg.Addr, cfg.DataDir, cfg.Outbox = "127.0.0.1:0", t.TempDir(), tc.outbox
		srv, err := server.New(t.Context(), cfg)
		if err == nil {
			srv.Shutdown(t.Context())
			t.Errorf("--outbox %s: server.New succeeded", tc.outbox)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("--outbox %s: error does not name %q: %v", tc.outbox, w, err)
			}
		}
	}
}
