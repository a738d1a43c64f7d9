package server_test

// The offline nudge (issue 14, point 4; docs/nudge.md) over real sockets: a
// real server, real WebSocket clients and a real HTTP receiver
// (httptest.Server) that verifies every request's signature and
// deduplicates by nudge id.

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/nudge"
	"github.com/tetra-messenger/tetra/workload/server"
)

// nudgeReceiver is the embedding application's webhook, as a test sees it.
type nudgeReceiver struct {
	t      *testing.T
	srv    *httptest.Server
	secret []byte

	// failNext answers that many requests 500 after reading them;
	// failAfterRecord records a request's nudges before it answers 500
	// (the receiver processed it but the answer was lost: the retry is a
	// duplicate); hold blocks every request until it is closed.
	failNext        atomic.Int32
	failAfterRecord atomic.Int32
	hold            chan struct{}

	mu       sync.Mutex
	requests int
	badSig   int
	all      []nudge.Item          // every nudge received, duplicates included
	byID     map[string]nudge.Item // deduplicated by id
}

func newNudgeReceiver(t *testing.T) *nudgeReceiver {
	t.Helper()
	r := &nudgeReceiver{t: t, secret: []byte(randomHex(32)), byID: map[string]nudge.Item{}}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	t.Cleanup(func() {
		if r.hold != nil {
			select {
			case <-r.hold:
			default:
				close(r.hold)
			}
		}
		r.srv.Close()
	})
	return r
}

func (r *nudgeReceiver) serve(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(req.Body)
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	if r.hold != nil {
		select {
		case <-r.hold:
		case <-req.Context().Done():
			return
		}
	}
	r.mu.Lock()
	r.requests++
	r.mu.Unlock()
	// The documented recipe, independently of package nudge: hex
	// HMAC-SHA256(secret, timestamp + "." + raw body) after "v1=".
	mac := hmac.New(sha256.New, r.secret)
	mac.Write([]byte(req.Header.Get(nudge.HeaderTimestamp) + "." + string(body)))
	if want := "v1=" + hex.EncodeToString(mac.Sum(nil)); !hmac.Equal([]byte(req.Header.Get(nudge.HeaderSignature)), []byte(want)) {
		r.mu.Lock()
		r.badSig++
		r.mu.Unlock()
		r.t.Errorf("nudge receiver: signature %q, want %q (the documented recipe)", req.Header.Get(nudge.HeaderSignature), want)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if err := nudge.Verify(r.secret, req.Header, body, time.Now(), 0); err != nil {
		r.mu.Lock()
		r.badSig++
		r.mu.Unlock()
		r.t.Errorf("nudge receiver: %v", err)
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	if r.failNext.Load() > 0 {
		r.failNext.Add(-1)
		w.WriteHeader(http.StatusInternalServerError)
		return
	}
	var b nudge.Batch
	if err := json.Unmarshal(body, &b); err != nil {
		r.t.Errorf("nudge receiver: body %s: %v", body, err)
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	for _, it := range b.Nudges {
		// The documented id, independently of package nudge: hex of the
		// first 16 bytes of SHA-256(messageId, 0x00, recipient).
		sum := sha256.Sum256([]byte(it.MessageID + "\x00" + it.Recipient))
		if want := hex.EncodeToString(sum[:16]); it.ID != want {
			r.t.Errorf("nudge %+v: id %s, want %s (stable per message and recipient)", it, it.ID, want)
		}
		r.all = append(r.all, it)
		r.byID[it.ID] = it
	}
	r.mu.Unlock()
	if r.failAfterRecord.Load() > 0 {
		r.failAfterRecord.Add(-1)
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// config is the server's nudge configuration for this receiver, with short
// batching and backoff.
func (r *nudgeReceiver) config() nudge.Config {
	return nudge.Config{URL: r.srv.URL + "/hooks/nudge", Secret: r.secret, MaxDelay: 20 * time.Millisecond,
		MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}
}

// unique returns the deduplicated nudges, sorted by message id then
// recipient.
func (r *nudgeReceiver) unique() []nudge.Item {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]nudge.Item, 0, len(r.byID))
	for _, it := range r.byID {
		out = append(out, it)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].MessageID != out[j].MessageID {
			return out[i].MessageID < out[j].MessageID
		}
		return out[i].Recipient < out[j].Recipient
	})
	return out
}

func (r *nudgeReceiver) received() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.all)
}

// of returns the unique nudges of recipient.
func (r *nudgeReceiver) of(recipient string) []nudge.Item {
	var out []nudge.Item
	for _, it := range r.unique() {
		if it.Recipient == recipient {
			out = append(out, it)
		}
	}
	return out
}

func nudgeMessageIDs(items []nudge.Item) []string {
	out := make([]string, len(items))
	for i, it := range items {
		out[i] = it.MessageID
	}
	sort.Strings(out)
	return out
}

// nudgeBackends are the embedded default and PostgreSQL + Redis (and,
// withKafka, SQLite + Kafka).
func nudgeBackends(t *testing.T, fn func(t *testing.T, b backend), withKafka ...bool) {
	kafka := len(withKafka) > 0 && withKafka[0]
	t.Helper()
	for _, b := range backends(t) {
		if b.name != "sqlite+memory" && b.name != "postgres+redis" && !(kafka && b.name == "sqlite+kafka") {
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			fn(t, b)
		})
	}
}

// An offline member of a group is nudged for exactly the messages
// committed while it had no connection, one nudge per (message,
// recipient) with the documented id, reason and a valid signature; a
// connected member that acknowledges is never nudged, nor is the sender.
func TestE2ENudgeOffline(t *testing.T) {
	t.Parallel()
	nudgeBackends(t, func(t *testing.T, b backend) {
		recv := newNudgeReceiver(t)
		e := newEnv(t, b, func(c *server.Config) { c.Nudge = recv.config() })
		chat := e.createGroup("alice", "trio", "bob", "carol")
		alice := e.dial("alice", dialOpts{})
		bob := e.dial("bob", dialOpts{})
		var sent []string
		for i := range 4 {
			id := alice.sendOK(chat.ChatID, fmt.Sprint("n-", i), "hello").MessageID
			sent = append(sent, id)
			bob.ack(bob.next("push of "+id, messageID(id)).MessageID)
		}
		sort.Strings(sent)
		eventually(t, waitLong, "carol's 4 nudges", func() bool { return len(recv.of("carol")) == len(sent) })
		time.Sleep(quiet) // nothing more may come
		for _, it := range recv.unique() {
			if it.Recipient != "carol" {
				t.Errorf("nudged %s for %s (%s): only the offline carol may be", it.Recipient, it.MessageID, it.Reason)
			}
		}
		got := recv.of("carol")
		if ids := nudgeMessageIDs(got); !slices.Equal(ids, sent) {
			t.Errorf("carol nudged for %v, want exactly %v", ids, sent)
		}
		for _, it := range got {
			if it.ID != nudge.ID(it.MessageID, "carol") || it.Reason != "offline" || it.ChatID != chat.ChatID || it.SenderID != "alice" || it.SentAt.IsZero() || it.CloseCode != 0 {
				t.Errorf("nudge %+v: want id %s, reason offline, chat %s, sender alice, a sentAt, no close code", it, nudge.ID(it.MessageID, "carol"), chat.ChatID)
			}
		}
		if n := recv.received(); n != len(sent) {
			t.Errorf("received %d nudges in all, want %d (no duplicates without failures)", n, len(sent))
		}
		st := e.srv.Nudger().Stats()
		if st.Sent != int64(len(sent)) || st.Queued != int64(len(sent)) {
			t.Errorf("stats %+v: want %d queued and sent", st, len(sent))
		}
		// Once carol is connected (and acknowledges) she is not nudged.
		carol := e.dial("carol", dialOpts{})
		id := alice.sendOK(chat.ChatID, "n-live", "now live").MessageID
		carol.ack(carol.next("push to carol", messageID(id)).MessageID)
		bob.ack(bob.next("push to bob", messageID(id)).MessageID)
		time.Sleep(quiet)
		if n := len(recv.of("carol")); n != len(sent) {
			t.Errorf("carol nudged %d times after she connected, want still %d", n, len(sent))
		}
		metricsHave(t, e, "tetra_nudge_sent_total 4", "tetra_nudge_queued_total 4", `tetra_nudge_dropped_total{reason="queue_full"} 0`, "tetra_nudge_batch_latency_seconds_count")
	}, true) // and in Kafka mode, where the relay's hand-off determines it
}

// A recipient that stops acknowledging is withdrawn (4002) and nudged for
// the messages it left unacknowledged, with reason withdrawn and the close
// code.
func TestE2ENudgeWithdrawn(t *testing.T) {
	t.Parallel()
	nudgeBackends(t, func(t *testing.T, b backend) {
		recv := newNudgeReceiver(t)
		e := newEnv(t, b, func(c *server.Config) {
			c.Nudge = recv.config()
			c.Tuning.Lease = 300 * time.Millisecond
			c.Tuning.MaxDeliveryAttempts = 2
		})
		chat := e.createDirect("alice", "bob")
		alice := e.dial("alice", dialOpts{})
		bob := e.dial("bob", dialOpts{})
		var sent []string
		for i := range 3 {
			sent = append(sent, alice.sendOK(chat.ChatID, fmt.Sprint("w-", i), "ack me").MessageID)
		}
		sort.Strings(sent)
		for _, id := range sent {
			bob.next("push of "+id, messageID(id)) // received, never acknowledged
		}
		if len(recv.of("bob")) != 0 {
			t.Errorf("bob nudged while connected: %+v", recv.of("bob"))
		}
		bob.expectClose(protocolAttempts)
		eventually(t, waitLong, "bob's nudges after the withdrawal", func() bool { return len(recv.of("bob")) == len(sent) })
		for _, it := range recv.of("bob") {
			if it.Reason != "withdrawn" || it.CloseCode != 4002 || it.ID != nudge.ID(it.MessageID, "bob") {
				t.Errorf("nudge %+v: want reason withdrawn, closeCode 4002, id %s", it, nudge.ID(it.MessageID, "bob"))
			}
		}
		if ids := nudgeMessageIDs(recv.of("bob")); !slices.Equal(ids, sent) {
			t.Errorf("bob nudged for %v, want %v", ids, sent)
		}
		if n := len(recv.of("alice")); n != 0 {
			t.Errorf("the sender was nudged %d times", n)
		}
	})
}

// A receiver that fails (500, then answers lost after it processed the
// batch) gets the batch again with backoff until it answers 2xx: every
// nudge arrives, duplicates carry the same id, and the counters say so.
func TestE2ENudgeRetries(t *testing.T) {
	t.Parallel()
	nudgeBackends(t, func(t *testing.T, b backend) {
		recv := newNudgeReceiver(t)
		recv.failNext.Store(3)
		recv.failAfterRecord.Store(1)
		e := newEnv(t, b, func(c *server.Config) { c.Nudge = recv.config() })
		chat := e.createDirect("alice", "bob")
		alice := e.dial("alice", dialOpts{})
		var sent []string
		for i := range 3 {
			sent = append(sent, alice.sendOK(chat.ChatID, fmt.Sprint("r-", i), "are you there").MessageID)
		}
		sort.Strings(sent)
		eventually(t, waitLong, "the nudges through the failures", func() bool {
			return e.srv.Nudger().Stats().Sent == int64(len(sent))
		})
		if ids := nudgeMessageIDs(recv.of("bob")); !slices.Equal(ids, sent) {
			t.Errorf("bob nudged (deduplicated) for %v, want %v", ids, sent)
		}
		if n := recv.received(); n <= len(sent) {
			t.Errorf("received %d nudges, want duplicates beyond %d (a 502 after recording)", n, len(sent))
		}
		st := e.srv.Nudger().Stats()
		if st.Failed < int64(len(sent)) || st.Requests < 5 {
			t.Errorf("stats %+v: want failed attempts counted and at least 5 requests (3 x 500, 1 x 502, 1 x 204)", st)
		}
		metricsHave(t, e, "tetra_nudge_failed_total", "tetra_nudge_requests_total")
	})
}

// A receiver that hangs fills the bounded queue: sends are still answered
// accepted at once and delivered live, and the dropped nudges are counted.
func TestE2ENudgeQueueFull(t *testing.T) {
	t.Parallel()
	nudgeBackends(t, func(t *testing.T, b backend) {
		recv := newNudgeReceiver(t)
		recv.hold = make(chan struct{})
		e := newEnv(t, b, func(c *server.Config) {
			c.Nudge = recv.config()
			c.Nudge.QueueSize = 5
			c.Nudge.BatchSize = 2
			c.Nudge.Timeout = time.Minute
		})
		chat := e.createGroup("alice", "busy", "bob", "carol")
		alice := e.dial("alice", dialOpts{})
		bob := e.dial("bob", dialOpts{})
		const n = 40
		start := time.Now()
		var slowest time.Duration
		var lastID string
		for i := range n {
			t0 := time.Now()
			id := alice.sendOK(chat.ChatID, fmt.Sprint("q-", i), "flood").MessageID
			bob.ack(bob.next("push of "+id, messageID(id)).MessageID)
			slowest = max(slowest, time.Since(t0))
			lastID = id
		}
		took := time.Since(start)
		if slowest > 2*time.Second {
			t.Errorf("slowest send+push took %v with the webhook hanging: the nudge must never hold delivery", slowest)
		}
		// The hand-off of the last commit may follow its accepted frame.
		eventually(t, waitLong, "every nudge offered to the queue", func() bool { return e.srv.Nudger().Stats().Queued == n })
		st := e.srv.Nudger().Stats()
		// In flight: one batch of 2 taken by the hanging request; queued: 5.
		if st.Dropped[nudge.DropQueueFull] < n-5-2 {
			t.Errorf("stats %+v: want at least %d dropped as queue_full", st, n-5-2)
		}
		if st.Depth > 5 {
			t.Errorf("queue depth %d over its bound 5", st.Depth)
		}
		metricsHave(t, e, fmt.Sprintf(`tetra_nudge_dropped_total{reason="queue_full"} %d`, st.Dropped[nudge.DropQueueFull]), "tetra_nudge_queue_depth 5")
		close(recv.hold)
		eventually(t, waitLong, "the queued nudges after the receiver recovers", func() bool { return e.srv.Nudger().Stats().Depth == 0 })
		eventually(t, waitLong, "the last message's nudge (drop oldest keeps the newest)", func() bool {
			for _, it := range recv.of("carol") {
				if it.MessageID == lastID {
					return true
				}
			}
			return false
		})
		t.Logf("%d sends in %v with the webhook hanging; %+v", n, took, e.srv.Nudger().Stats())
	})
}

// Across a fleet on PostgreSQL + Redis, each (message, recipient) is
// nudged by the process that determined it: offline recipients by the
// process that committed the message (after checking the fleet's
// presence, so a recipient connected to another process is not nudged),
// withdrawn ones by the process that withdrew them.
func TestFleetNudge(t *testing.T) {
	t.Parallel()
	recvs := []*nudgeReceiver{newNudgeReceiver(t), newNudgeReceiver(t)}
	secret := recvs[0].secret
	recvs[1].secret = secret
	fleet := newFleet(t, 2, func(c *server.Config) {
		c.Nudge = recvs[0].config()
		c.Tuning.PollInterval = 20 * time.Millisecond
		c.Tuning.Lease = 300 * time.Millisecond
		c.Tuning.MaxDeliveryAttempts = 2
	})
	// newFleet gives every process the first one's configuration: restart
	// process 1 posting to the second receiver, to tell who nudged.
	if err := fleet[1].srv.Shutdown(t.Context()); err != nil {
		t.Fatal(err)
	}
	cfg := fleet[1].cfg
	cfg.Nudge = recvs[1].config()
	cfg.Nudge.Secret = secret
	fleet[1].cfg = cfg
	fleet[1].srv = startServer(t, cfg)

	chat := fleet[0].createGroup("alice", "fleet", "carol", "dave", "erin")
	alice := fleet[0].dial("alice", dialOpts{})
	carol := fleet[1].dial("carol", dialOpts{}) // healthy, on the other process
	erin := fleet[1].dial("erin", dialOpts{})   // stops acknowledging, on the other process
	// dave is offline.
	var sent []string
	for i := range 3 {
		id := alice.sendOK(chat.ChatID, fmt.Sprint("f-", i), "fleet").MessageID
		sent = append(sent, id)
		carol.ack(carol.next("push to carol of "+id, messageID(id)).MessageID)
		erin.next("push to erin of "+id, messageID(id))
	}
	sort.Strings(sent)
	erin.expectClose(protocolAttempts)
	eventually(t, waitLong, "dave's nudges from process 0 and erin's from process 1", func() bool {
		return len(recvs[0].of("dave")) == len(sent) && len(recvs[1].of("erin")) == len(sent)
	})
	time.Sleep(quiet)
	for _, it := range recvs[0].unique() {
		if it.Recipient != "dave" || it.Reason != "offline" {
			t.Errorf("process 0 nudged %+v: it committed the messages, so it nudges the offline dave only", it)
		}
	}
	for _, it := range recvs[1].unique() {
		if it.Recipient != "erin" || it.Reason != "withdrawn" {
			t.Errorf("process 1 nudged %+v: it withdrew erin, so it nudges her only", it)
		}
	}
	if ids := nudgeMessageIDs(recvs[0].of("dave")); !slices.Equal(ids, sent) {
		t.Errorf("dave nudged for %v, want %v", ids, sent)
	}
	if st := fleet[0].srv.Nudger().Stats(); st.Online < int64(2*len(sent)) {
		t.Errorf("process 0 stats %+v: want carol's and erin's %d offline candidates each skipped as online elsewhere", st, len(sent))
	}
}

// metricsHave scrapes /metrics and checks that each want is a substring.
func metricsHave(t *testing.T, e *env, want ...string) {
	t.Helper()
	resp, err := http.Get(e.srv.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, w := range want {
		if !strings.Contains(string(body), w) {
			t.Errorf("/metrics lacks %q", w)
		}
	}
}
