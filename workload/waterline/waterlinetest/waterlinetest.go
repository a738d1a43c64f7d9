package waterlinetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/waterline"
)

// Run runs the conformance suite against fresh indexes from newIndex, one
// per subtest. Subtests run in parallel; newIndex must return an isolated,
// empty, unprimed index each time and register any cleanup with t.Cleanup.
func Run(t *testing.T, newIndex func(t *testing.T) waterline.Index) {
	tests := []struct {
		name string
		fn   func(h *harness)
	}{
		{"OutOfOrderAckKeepsPin", testOutOfOrderAck},
		{"AckUnknownIgnored", testAckUnknownIgnored},
		{"SentAgain", testSentAgain},
		{"SentMany", testSentMany},
		{"AckMany", testAckMany},
		{"Expired", testExpired},
		{"WithdrawIsNotAck", testWithdraw},
		{"WithdrawIdempotent", testWithdrawIdempotent},
		{"UnknownClient", testUnknownClient},
		{"SafeLinePerPartition", testSafeLinePerPartition},
		{"Holds", testHolds},
		{"HoldExpires", testHoldExpires},
		{"Restore", testRestore},
		{"SafeLineOnlyWhenPrimed", testSafeLineOnlyWhenPrimed},
		{"Reset", testReset},
		{"Priming", testPriming},
		{"Stats", testStats},
		{"Clients", testClients},
		{"AgainstModel", testAgainstModel},
		{"Concurrent", testConcurrent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ix := newIndex(t)
			if ix == nil {
				t.Fatal("newIndex returned nil")
			}
			h := &harness{
				t:    t,
				ctx:  t.Context(),
				ix:   ix,
				base: time.Now().Truncate(time.Millisecond),
			}
			id, err := ix.Identity(h.ctx)
			if err != nil {
				t.Fatalf("Identity: %v", err)
			}
			h.identity = id
			if tc.name != "Priming" {
				h.prime()
			}
			tc.fn(h)
		})
	}
}

// harness wraps an index with helpers that fail the test on error.
type harness struct {
	t        *testing.T
	ctx      context.Context
	ix       waterline.Index
	base     time.Time // a whole millisecond
	identity string    // the index's Identity, which SafeLine is asked for
}

// prime marks the index primed with its identity, as a rebuild does, so
// that SafeLine answers.
func (h *harness) prime() {
	h.t.Helper()
	if err := h.ix.MarkPrimed(h.ctx, h.identity); err != nil {
		h.t.Fatalf("MarkPrimed: %v", err)
	}
}

// at returns base plus ms milliseconds.
func (h *harness) at(ms int) time.Time { return h.base.Add(time.Duration(ms) * time.Millisecond) }

func ent(id string, part int32, pos int64) waterline.Entry {
	return waterline.Entry{MessageID: id, Partition: part, Pos: pos}
}

func (h *harness) connect(id string) {
	h.t.Helper()
	if err := h.ix.Connect(h.ctx, waterline.Client{ID: id, User: "u-" + id, Device: "d"}); err != nil {
		h.t.Fatalf("Connect(%q): %v", id, err)
	}
}

func (h *harness) sent(id string, lease time.Time, es ...waterline.Entry) int {
	h.t.Helper()
	n, err := h.ix.Sent(h.ctx, id, es, lease)
	if err != nil {
		h.t.Fatalf("Sent(%q): %v", id, err)
	}
	return n
}

func (h *harness) wantSent(id string, lease time.Time, want int, es ...waterline.Entry) {
	h.t.Helper()
	if got := h.sent(id, lease, es...); got != want {
		h.t.Fatalf("Sent(%q, %v) pending = %d, want %d", id, es, got, want)
	}
}

func (h *harness) ack(id string, msgs ...string) int {
	h.t.Helper()
	n, err := h.ix.Ack(h.ctx, id, msgs)
	if err != nil {
		h.t.Fatalf("Ack(%q, %v): %v", id, msgs, err)
	}
	return n
}

func (h *harness) wantAck(id string, want int, msgs ...string) {
	h.t.Helper()
	if got := h.ack(id, msgs...); got != want {
		h.t.Fatalf("Ack(%q, %v) pending = %d, want %d", id, msgs, got, want)
	}
}

func (h *harness) withdraw(id string, want bool) {
	h.t.Helper()
	got, err := h.ix.Withdraw(h.ctx, id)
	if err != nil {
		h.t.Fatalf("Withdraw(%q): %v", id, err)
	}
	if got != want {
		h.t.Fatalf("Withdraw(%q) = %v, want %v", id, got, want)
	}
}

func (h *harness) hold(holder string, part int32, pos int64, ttl time.Duration) {
	h.t.Helper()
	if err := h.ix.Hold(h.ctx, holder, part, pos, ttl); err != nil {
		h.t.Fatalf("Hold(%q, %d, %d, %v): %v", holder, part, pos, ttl, err)
	}
}

func (h *harness) line(part int32) (int64, bool) {
	h.t.Helper()
	line, ok, err := h.ix.SafeLine(h.ctx, part, h.identity)
	if err != nil {
		h.t.Fatalf("SafeLine(%d): %v", part, err)
	}
	return line, ok
}

func (h *harness) wantLine(part int32, want int64) {
	h.t.Helper()
	if line, ok := h.line(part); !ok || line != want {
		h.t.Fatalf("SafeLine(%d) = %d, %v; want %d, true", part, line, ok, want)
	}
}

func (h *harness) wantNoLine(part int32) {
	h.t.Helper()
	if line, ok := h.line(part); ok {
		h.t.Fatalf("SafeLine(%d) = %d, true; want nothing pinning it", part, line)
	}
}

func (h *harness) expired(now time.Time, limit int) []waterline.Pending {
	h.t.Helper()
	ps, err := h.ix.Expired(h.ctx, now, limit)
	if err != nil {
		h.t.Fatalf("Expired(%v, %d): %v", now, limit, err)
	}
	return ps
}

func (h *harness) stats() waterline.Stats {
	h.t.Helper()
	st, err := h.ix.Stats(h.ctx)
	if err != nil {
		h.t.Fatalf("Stats: %v", err)
	}
	return st
}

func (h *harness) wantStats(want waterline.Stats) {
	h.t.Helper()
	if got := h.stats(); got != want {
		h.t.Fatalf("Stats = %+v, want %+v", got, want)
	}
}

func (h *harness) wantUnknown(op string, err error) {
	h.t.Helper()
	if !errors.Is(err, waterline.ErrUnknownClient) {
		h.t.Fatalf("%s: err = %v, want ErrUnknownClient", op, err)
	}
}

// pend builds the Pending an index should report.
func pend(client string, e waterline.Entry, attempts int, lease time.Time) waterline.Pending {
	return waterline.Pending{ClientID: client, Entry: e, Attempts: attempts, LeaseUntil: lease}
}

// wantPending checks that got is in lease order and holds the same entries
// as want. Entries with equal leases may come in any order.
func (h *harness) wantPending(what string, got, want []waterline.Pending) {
	h.t.Helper()
	for i := 1; i < len(got); i++ {
		if got[i].LeaseUntil.Before(got[i-1].LeaseUntil) {
			h.t.Fatalf("%s: not in lease order: %s", what, fmtPending(got))
		}
	}
	g, w := canonical(got), canonical(want)
	same := len(g) == len(w)
	for i := 0; same && i < len(g); i++ {
		same = g[i].ClientID == w[i].ClientID && g[i].Entry == w[i].Entry &&
			g[i].Attempts == w[i].Attempts && g[i].LeaseUntil.Equal(w[i].LeaseUntil)
	}
	if !same {
		h.t.Fatalf("%s:\n got  %s\n want %s", what, fmtPending(got), fmtPending(want))
	}
}

// canonical sorts a copy by lease, client and message id.
func canonical(ps []waterline.Pending) []waterline.Pending {
	ps = slices.Clone(ps)
	slices.SortStableFunc(ps, func(a, b waterline.Pending) int {
		if c := a.LeaseUntil.Compare(b.LeaseUntil); c != 0 {
			return c
		}
		if c := strings.Compare(a.ClientID, b.ClientID); c != 0 {
			return c
		}
		return strings.Compare(a.MessageID, b.MessageID)
	})
	return ps
}

// only keeps the entries of ps with the given message ids.
func only(ps []waterline.Pending, ids ...string) []waterline.Pending {
	var out []waterline.Pending
	for _, p := range ps {
		if slices.Contains(ids, p.MessageID) {
			out = append(out, p)
		}
	}
	return out
}

func fmtPending(ps []waterline.Pending) string {
	var b strings.Builder
	b.WriteString("[")
	for i, p := range ps {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%s/%s@%s#%d p%d:%d", p.ClientID, p.MessageID,
			p.LeaseUntil.UTC().Format("15:04:05.000"), p.Attempts, p.Partition, p.Pos)
	}
	b.WriteString("]")
	return b.String()
}

// testOutOfOrderAck is the paper's example: sent 102, 103, 104; an ack of
// 104 leaves the pin at 102; an ack of 102 lifts it to 103 only.
func testOutOfOrderAck(h *harness) {
	lease := h.at(10_000)
	h.connect("other")
	h.wantSent("other", lease, 1, ent("o200", 0, 200))
	h.connect("c")
	h.wantSent("c", lease, 3, ent("m102", 0, 102), ent("m103", 0, 103), ent("m104", 0, 104))
	h.wantLine(0, 102)

	h.wantAck("c", 2, "m104")
	h.wantLine(0, 102)
	h.wantAck("c", 1, "m102")
	h.wantLine(0, 103)
	h.wantAck("c", 0, "m103")
	h.wantLine(0, 200)

	// Several out-of-order ids in one call behave the same.
	h.wantSent("c", lease, 3, ent("m300", 0, 300), ent("m301", 0, 301), ent("m302", 0, 302))
	h.wantAck("other", 0, "o200")
	h.wantLine(0, 300)
	h.wantAck("c", 1, "m302", "m301")
	h.wantLine(0, 300)
	h.wantAck("c", 0, "m300")
	h.wantNoLine(0)
}

func testAckUnknownIgnored(h *harness) {
	h.connect("c")
	h.wantSent("c", h.at(1000), 2, ent("m1", 0, 10), ent("m2", 0, 11))
	h.wantAck("c", 2, "nope")
	h.wantAck("c", 2, "")
	h.wantAck("c", 2)
	h.wantAck("c", 1, "nope", "m1", "nope2")
	h.wantAck("c", 1, "m1") // acked twice: the second is unknown
	h.wantLine(0, 11)
	h.wantStats(waterline.Stats{Clients: 1, Pending: 1})
}

// testSentAgain: a re-send of a pending MessageID counts an attempt and
// replaces the lease (even with an earlier one) but keeps the position.
func testSentAgain(h *harness) {
	h.connect("c")
	h.wantSent("c", h.at(100), 1, ent("m1", 0, 10))
	h.wantPending("first send", h.expired(h.at(100), 10),
		[]waterline.Pending{pend("c", ent("m1", 0, 10), 1, h.at(100))})

	h.wantSent("c", h.at(500), 1, ent("m1", 0, 99))
	h.wantLine(0, 10)
	h.wantPending("old lease no longer due", h.expired(h.at(499), 10), nil)
	h.wantPending("second send", h.expired(h.at(500), 10),
		[]waterline.Pending{pend("c", ent("m1", 0, 10), 2, h.at(500))})

	h.wantSent("c", h.at(50), 2, ent("m1", 0, 10), ent("m2", 0, 20))
	h.wantPending("third send, earlier lease", h.expired(h.at(50), 10), []waterline.Pending{
		pend("c", ent("m1", 0, 10), 3, h.at(50)),
		pend("c", ent("m2", 0, 20), 1, h.at(50)),
	})
	h.wantStats(waterline.Stats{Clients: 1, Pending: 2})
}

// testSentMany: an index that records many clients' sends at once
// (waterline.ManySender) does what Sent does for each, in order, with an
// error per batch; a batch for an unknown client writes nothing and the
// others are recorded all the same.
func testSentMany(h *harness) {
	ms, ok := h.ix.(waterline.ManySender)
	if !ok {
		h.t.Skip("this index has no SentMany (the engine calls Sent per client)")
	}
	h.connect("a")
	h.connect("b")
	h.wantSent("b", h.at(100), 1, ent("n1", 0, 5))
	errs := ms.SentMany(h.ctx, []waterline.SentBatch{
		{ClientID: "a", Entries: []waterline.Entry{ent("m1", 0, 10), ent("m2", 1, 11)}},
		{ClientID: "nobody", Entries: []waterline.Entry{ent("x1", 0, 1)}},
		{ClientID: "b", Entries: []waterline.Entry{ent("n1", 0, 99), ent("n2", 0, 6)}},
	}, h.at(200))
	if len(errs) != 3 {
		h.t.Fatalf("SentMany returned %d errors for 3 batches", len(errs))
	}
	if errs[0] != nil || errs[2] != nil {
		h.t.Fatalf("SentMany: %v, %v for the registered clients; want nil", errs[0], errs[2])
	}
	if !errors.Is(errs[1], waterline.ErrUnknownClient) {
		h.t.Errorf("SentMany for an unknown client: %v, want ErrUnknownClient", errs[1])
	}
	h.wantPending("after SentMany", h.expired(h.at(200), 10), []waterline.Pending{
		pend("b", ent("n1", 0, 5), 2, h.at(200)), // a re-send: attempts+1, its Pos kept
		pend("b", ent("n2", 0, 6), 1, h.at(200)),
		pend("a", ent("m1", 0, 10), 1, h.at(200)),
		pend("a", ent("m2", 1, 11), 1, h.at(200)),
	})
	h.wantLine(0, 5)
	h.wantStats(waterline.Stats{Clients: 2, Pending: 4})
	if errs := ms.SentMany(h.ctx, nil, h.at(300)); len(errs) != 0 {
		h.t.Errorf("SentMany(nil) = %v, want no errors", errs)
	}
}

// testAckMany: an index that records many clients' acknowledgements at
// once (waterline.ManyAcker) does what Ack does for each, in order, with
// an error per batch; a batch for an unknown client writes nothing and the
// others are recorded all the same. Each client's pins follow what is left
// of its pending set, as after Ack.
func testAckMany(h *harness) {
	ma, ok := h.ix.(waterline.ManyAcker)
	if !ok {
		h.t.Skip("this index has no AckMany (the engine calls Ack per client)")
	}
	h.connect("a")
	h.connect("b")
	h.connect("c")
	h.wantSent("a", h.at(100), 3, ent("a1", 0, 10), ent("a2", 0, 11), ent("a3", 1, 12))
	h.wantSent("b", h.at(100), 2, ent("b1", 0, 5), ent("b2", 0, 20))
	h.wantSent("c", h.at(100), 1, ent("c1", 0, 7))
	h.wantLine(0, 5)
	errs := ma.AckMany(h.ctx, []waterline.AckBatch{
		{ClientID: "a", MessageIDs: []string{"a2", "a3"}}, // out of order: a's pin of 0 stays at 10, its pin of 1 goes
		{ClientID: "nobody", MessageIDs: []string{"a1", "c1"}},
		{ClientID: "b", MessageIDs: []string{"b1", "nope", "b1"}}, // b's pin rises to 20
		{ClientID: "a", MessageIDs: []string{"a1"}},               // a again: its last entry
		{ClientID: "c"},
	})
	if len(errs) != 5 {
		h.t.Fatalf("AckMany returned %d errors for 5 batches", len(errs))
	}
	for i, err := range errs {
		if i == 1 {
			if !errors.Is(err, waterline.ErrUnknownClient) {
				h.t.Errorf("AckMany for an unknown client: %v, want ErrUnknownClient", err)
			}
		} else if err != nil {
			h.t.Fatalf("AckMany batch %d: %v, want nil", i, err)
		}
	}
	h.wantLine(0, 7)
	h.wantNoLine(1)
	h.wantStats(waterline.Stats{Clients: 3, Pending: 2})
	h.wantPending("after AckMany", h.expired(h.at(100), 10), []waterline.Pending{
		pend("b", ent("b2", 0, 20), 1, h.at(100)),
		pend("c", ent("c1", 0, 7), 1, h.at(100)),
	})
	h.wantAck("a", 0)
	h.wantAck("c", 0, "c1")
	h.wantLine(0, 20)
	if errs := ma.AckMany(h.ctx, nil); len(errs) != 0 {
		h.t.Errorf("AckMany(nil) = %v, want no errors", errs)
	}
}

func testExpired(h *harness) {
	h.connect("a")
	h.connect("b")
	h.connect("c")
	h.wantSent("a", h.at(30), 1, ent("m1", 0, 1))
	h.wantSent("a", h.at(10), 2, ent("m2", 0, 2))
	h.wantSent("a", h.at(50), 3, ent("m3", 0, 3))
	h.wantSent("b", h.at(20), 1, ent("n1", 1, 7))
	h.wantSent("b", h.at(40), 2, ent("n2", 1, 8))
	h.wantSent("b", h.at(1000), 3, ent("n3", 1, 9))
	h.wantSent("c", h.at(25), 1, ent("o1", 0, 4))

	m1 := pend("a", ent("m1", 0, 1), 1, h.at(30))
	m2 := pend("a", ent("m2", 0, 2), 1, h.at(10))
	n1 := pend("b", ent("n1", 1, 7), 1, h.at(20))
	n2 := pend("b", ent("n2", 1, 8), 1, h.at(40))
	o1 := pend("c", ent("o1", 0, 4), 1, h.at(25))

	all := []waterline.Pending{m2, n1, o1, m1, n2} // lease exactly now is due
	h.wantPending("due at 40", h.expired(h.at(40), 100), all)
	h.wantPending("again: Expired changes nothing", h.expired(h.at(40), 100), all)
	h.wantPending("limit 2", h.expired(h.at(40), 2), all[:2])
	h.wantPending("limit 1", h.expired(h.at(40), 1), all[:1])
	h.wantPending("before every lease", h.expired(h.at(9), 100), nil)
	h.wantPending("due at 10", h.expired(h.at(10), 100), all[:1])
	h.wantStats(waterline.Stats{Clients: 3, Pending: 7})

	h.wantAck("a", 2, "m2")
	h.withdraw("c", true)
	h.wantPending("after ack and withdraw", h.expired(h.at(40), 100), []waterline.Pending{n1, m1, n2})
	h.connect("c") // a new registration of the id does not bring o1 back
	h.wantPending("after reconnect", h.expired(h.at(40), 100), []waterline.Pending{n1, m1, n2})
}

// testWithdraw: withdrawal removes the pin so the line rises to the next
// client's, and it is not an acknowledgement of anything.
func testWithdraw(h *harness) {
	lease := h.at(10_000)
	h.connect("a")
	h.connect("b")
	h.wantSent("a", lease, 2, ent("m10", 0, 10), ent("m11", 0, 11))
	h.wantSent("b", lease, 1, ent("n20", 0, 20))
	h.wantLine(0, 10)

	h.withdraw("a", true)
	h.wantLine(0, 20)
	h.wantStats(waterline.Stats{Clients: 1, Pending: 1})
	_, err := h.ix.Sent(h.ctx, "a", []waterline.Entry{ent("m12", 0, 12)}, lease)
	h.wantUnknown("Sent after Withdraw", err)
	_, err = h.ix.Ack(h.ctx, "a", []string{"m10"})
	h.wantUnknown("Ack after Withdraw", err)
	h.wantLine(0, 20)

	// The same id connects again: its old set is gone, not acknowledged
	// into a new pin.
	h.connect("a")
	h.wantAck("a", 0)
	h.wantAck("a", 0, "m10", "m11")
	h.wantLine(0, 20)
	h.wantSent("a", lease, 1, ent("m30", 0, 30))
	h.wantLine(0, 20)
	h.wantPending("only live entries are due", h.expired(lease, 100), []waterline.Pending{
		pend("b", ent("n20", 0, 20), 1, lease),
		pend("a", ent("m30", 0, 30), 1, lease),
	})

	// Other clients are untouched.
	h.wantAck("b", 1)
	h.withdraw("b", true)
	h.wantLine(0, 30)
	h.withdraw("a", true)
	h.wantNoLine(0)
	h.wantStats(waterline.Stats{})
	h.wantPending("nothing due", h.expired(lease, 100), nil)
}

func testWithdrawIdempotent(h *harness) {
	h.withdraw("never", false)
	h.connect("x")
	h.wantSent("x", h.at(1), 1, ent("m", 0, 5))
	h.withdraw("x", true)
	h.withdraw("x", false)
	h.withdraw("x", false)
	h.wantNoLine(0)
	h.wantStats(waterline.Stats{})
}

func testUnknownClient(h *harness) {
	_, err := h.ix.Sent(h.ctx, "ghost", []waterline.Entry{ent("m", 0, 1)}, h.at(1))
	h.wantUnknown("Sent", err)
	_, err = h.ix.Ack(h.ctx, "ghost", []string{"m"})
	h.wantUnknown("Ack", err)
	err = h.ix.Restore(h.ctx, "ghost", []waterline.Pending{{Entry: ent("m", 0, 1)}})
	h.wantUnknown("Restore", err)
	h.wantNoLine(0)
	h.wantStats(waterline.Stats{})
	h.wantPending("nothing recorded", h.expired(h.at(1_000_000), 100), nil)
	if cs, err := h.ix.Clients(h.ctx); err != nil || len(cs) != 0 {
		h.t.Fatalf("Clients = %v, %v; want none", cs, err)
	}
}

// testSafeLinePerPartition: positions of different partitions are unrelated
// (Kafka offsets), and each partition has its own line.
func testSafeLinePerPartition(h *harness) {
	lease := h.at(10_000)
	h.connect("c")
	h.connect("d")
	h.wantSent("c", lease, 3, ent("c0", 0, 100), ent("c1", 1, 5), ent("c7", 7, 1000))
	h.wantSent("d", lease, 1, ent("d1", 1, 9))
	h.wantLine(0, 100)
	h.wantLine(1, 5)
	h.wantLine(7, 1000)
	h.wantNoLine(2)

	h.wantAck("c", 2, "c1")
	h.wantLine(1, 9)
	h.wantLine(0, 100)
	h.wantLine(7, 1000)
	h.wantAck("d", 0, "d1")
	h.wantNoLine(1)
	h.wantLine(0, 100)
	h.wantAck("c", 1, "c0")
	h.wantNoLine(0)
	h.wantLine(7, 1000)
}

// testHolds: holds take part in the line with client pins, one per holder
// and partition, replaced (not lowered) by the holder's next Hold.
func testHolds(h *harness) {
	lease := h.at(10_000)
	h.hold("poller", 0, 50, time.Hour)
	h.wantLine(0, 50)
	h.wantNoLine(1)

	h.connect("c")
	h.wantSent("c", lease, 1, ent("m70", 0, 70))
	h.wantLine(0, 50)
	h.wantSent("c", lease, 2, ent("m30", 0, 30))
	h.wantLine(0, 30)
	h.wantAck("c", 1, "m30")
	h.wantLine(0, 50)

	h.hold("poller", 0, 80, time.Hour) // replaces 50
	h.wantLine(0, 70)
	h.hold("poller", 0, 60, time.Hour) // and may go down
	h.wantLine(0, 60)
	h.hold("gc-probe", 0, 55, time.Hour)
	h.wantLine(0, 55)
	h.hold("gc-probe", 0, -1, time.Hour)
	h.wantLine(0, 60)

	// One holder on two partitions: independent holds.
	h.hold("poller", 1, 5, time.Hour)
	h.wantLine(1, 5)
	h.wantLine(0, 60)
	h.hold("poller", 1, -1, 0)
	h.wantNoLine(1)
	h.wantLine(0, 60)
	h.hold("poller", 0, -1, 0)
	h.wantLine(0, 70)
	h.hold("poller", 0, -1, 0) // releasing twice is fine
	h.wantAck("c", 0, "m70")
	h.wantNoLine(0)
}

// testHoldExpires waits in real time for short holds to lapse. Partition 1's
// hold is taken after partition 0's first short hold, so once partition 1's
// has expired, partition 0's would have too had it not been renewed.
func testHoldExpires(h *harness) {
	const short = 300 * time.Millisecond
	h.connect("c")
	h.wantSent("c", h.at(60_000), 1, ent("m40", 1, 40))

	h.hold("renewed", 0, 10, short)
	h.hold("renewed", 0, 10, time.Hour)
	start := time.Now()
	h.hold("lapsing", 1, 20, short)
	line, ok := h.line(1)
	if time.Since(start) < short && (!ok || line != 20) {
		h.t.Fatalf("SafeLine(1) = %d, %v right after Hold; want 20, true", line, ok)
	}

	deadline := time.Now().Add(10 * time.Second)
	for {
		line, ok = h.line(1)
		if ok && line == 40 {
			break // the hold lapsed; the client's pin remains
		}
		if ok && line != 20 {
			h.t.Fatalf("SafeLine(1) = %d while waiting; want 20 or 40", line)
		}
		if time.Now().After(deadline) {
			h.t.Fatalf("hold with ttl %v still pins partition 1 after 10s (line %d, %v)", short, line, ok)
		}
		select {
		case <-h.ctx.Done():
			h.t.Fatal(h.ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
	if elapsed := time.Since(start); elapsed < short-50*time.Millisecond {
		h.t.Fatalf("hold with ttl %v lapsed after %v", short, elapsed)
	}
	h.wantLine(0, 10) // renewed by its second Hold

	h.hold("renewed", 0, -1, 0)
	h.wantNoLine(0)
	h.wantAck("c", 0, "m40")
	h.wantNoLine(1)
}

// testRestore: restored entries are pending with the attempts and lease
// they were restored with (a zero lease is due at once); pending entries
// are not overwritten.
func testRestore(h *harness) {
	h.connect("c")
	future := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	later := future.Add(time.Minute)
	h.wantSent("c", future, 1, ent("m1", 0, 50))

	err := h.ix.Restore(h.ctx, "c", []waterline.Pending{
		{Entry: ent("m0", 0, 40)},
		{Entry: ent("m1", 0, 999), Attempts: 7},
		{Entry: ent("m2", 0, 60), Attempts: 2},
		{Entry: ent("m3", 1, 70), Attempts: 2, LeaseUntil: later},
	})
	if err != nil {
		h.t.Fatalf("Restore: %v", err)
	}
	h.wantAck("c", 4)
	h.wantLine(0, 40)
	h.wantLine(1, 70)

	now := time.Now()
	got := h.expired(now, 10)
	slices.SortFunc(got, func(a, b waterline.Pending) int { return strings.Compare(a.MessageID, b.MessageID) })
	if len(got) != 2 {
		h.t.Fatalf("Expired after Restore = %s; want m0 and m2", fmtPending(got))
	}
	for i, want := range []waterline.Pending{{ClientID: "c", Entry: ent("m0", 0, 40)}, {ClientID: "c", Entry: ent("m2", 0, 60), Attempts: 2}} {
		g := got[i]
		if g.ClientID != want.ClientID || g.Entry != want.Entry || g.Attempts != want.Attempts || g.LeaseUntil.After(now) {
			h.t.Fatalf("Expired after Restore = %s; want %v with %d attempts and a lease at or before now", fmtPending(got), want.Entry, want.Attempts)
		}
	}
	h.wantPending("m1 kept its attempts, lease and position", only(h.expired(future, 10), "m1"),
		[]waterline.Pending{pend("c", ent("m1", 0, 50), 1, future)})
	h.wantPending("m3 is due at its restored lease", only(h.expired(later, 10), "m3"),
		[]waterline.Pending{pend("c", ent("m3", 1, 70), 2, later)})

	// Restoring again changes nothing; sending a restored entry counts
	// one more attempt.
	if err := h.ix.Restore(h.ctx, "c", []waterline.Pending{{Entry: ent("m0", 0, 1)}, {Entry: ent("m2", 0, 2)}}); err != nil {
		h.t.Fatalf("Restore: %v", err)
	}
	h.wantLine(0, 40)
	h.wantSent("c", future, 4, ent("m0", 0, 40))
	h.wantPending("m0 after its send", only(h.expired(future, 10), "m0"),
		[]waterline.Pending{pend("c", ent("m0", 0, 40), 1, future)})
	h.wantAck("c", 3, "m0")
	h.wantLine(0, 50)
	h.wantStats(waterline.Stats{Clients: 1, Pending: 3})
	h.wantPending("after send and ack", only(h.expired(future, 10), "m1"),
		[]waterline.Pending{pend("c", ent("m1", 0, 50), 1, future)})
}

// testSafeLineOnlyWhenPrimed: SafeLine computes no line from an index that
// is not primed with the identity asked for: never primed, reset (a flush
// or a cold state), or primed with another identity (a failover).
func testSafeLineOnlyWhenPrimed(h *harness) {
	h.connect("c")
	h.wantSent("c", h.at(5), 1, ent("m", 0, 7))
	h.wantLine(0, 7)
	wantRefused := func(what string) {
		h.t.Helper()
		line, ok, err := h.ix.SafeLine(h.ctx, 0, h.identity)
		if !errors.Is(err, waterline.ErrNotPrimed) {
			h.t.Fatalf("SafeLine %s = %d, %v, %v; want ErrNotPrimed", what, line, ok, err)
		}
	}
	if err := h.ix.MarkPrimed(h.ctx, "another server"); err != nil {
		h.t.Fatalf("MarkPrimed: %v", err)
	}
	wantRefused("when primed with another identity")
	if _, _, err := h.ix.SafeLine(h.ctx, 0, "another server"); !errors.Is(err, waterline.ErrNotPrimed) {
		h.t.Fatalf("SafeLine for an identity that is not the server's: err = %v, want ErrNotPrimed", err)
	}
	if err := h.ix.Reset(h.ctx); err != nil {
		h.t.Fatalf("Reset: %v", err)
	}
	wantRefused("after Reset")
	h.prime()
	h.wantNoLine(0)
}

func testReset(h *harness) {
	id, err := h.ix.Identity(h.ctx)
	if err != nil {
		h.t.Fatalf("Identity: %v", err)
	}
	h.connect("a")
	h.connect("b")
	h.wantSent("a", h.at(5), 1, ent("m", 0, 7))
	h.wantSent("b", h.at(5), 1, ent("n", 1, 8))
	h.hold("poller", 2, 3, time.Hour)
	if err := h.ix.MarkPrimed(h.ctx, id); err != nil {
		h.t.Fatalf("MarkPrimed: %v", err)
	}

	if err := h.ix.Reset(h.ctx); err != nil {
		h.t.Fatalf("Reset: %v", err)
	}
	h.wantStats(waterline.Stats{})
	h.wantPending("after Reset", h.expired(h.at(1_000_000), 100), nil)
	if cs, err := h.ix.Clients(h.ctx); err != nil || len(cs) != 0 {
		h.t.Fatalf("Clients after Reset = %v, %v; want none", cs, err)
	}
	if st, err := h.ix.State(h.ctx); err != nil || st.Primed {
		h.t.Fatalf("State after Reset = %+v, %v; want unprimed", st, err)
	}
	_, err = h.ix.Sent(h.ctx, "a", []waterline.Entry{ent("m2", 0, 9)}, h.at(5))
	h.wantUnknown("Sent after Reset", err)
	if id2, err := h.ix.Identity(h.ctx); err != nil || id2 != id {
		h.t.Fatalf("Identity after Reset = %q, %v; want %q", id2, err, id)
	}
	h.prime() // as the rebuild after a reset does
	for p := range int32(3) {
		h.wantNoLine(p)
	}

	// The index works as new.
	h.connect("a")
	h.wantSent("a", h.at(5), 1, ent("m3", 0, 11))
	h.wantLine(0, 11)
}

func testPriming(h *harness) {
	st, err := h.ix.State(h.ctx)
	if err != nil || st.Primed {
		h.t.Fatalf("State of a new index = %+v, %v; want unprimed", st, err)
	}
	id, err := h.ix.Identity(h.ctx)
	if err != nil || id == "" {
		h.t.Fatalf("Identity = %q, %v; want a non-empty identity", id, err)
	}
	if id2, err := h.ix.Identity(h.ctx); err != nil || id2 != id {
		h.t.Fatalf("Identity changed from %q to %q (%v) with nothing in between", id, id2, err)
	}
	if err := h.ix.MarkPrimed(h.ctx, id); err != nil {
		h.t.Fatalf("MarkPrimed: %v", err)
	}
	if st, err := h.ix.State(h.ctx); err != nil || st != (waterline.State{Primed: true, Identity: id}) {
		h.t.Fatalf("State = %+v, %v; want primed with %q", st, err, id)
	}
	if err := h.ix.MarkPrimed(h.ctx, "another"); err != nil {
		h.t.Fatalf("MarkPrimed: %v", err)
	}
	if st, err := h.ix.State(h.ctx); err != nil || st != (waterline.State{Primed: true, Identity: "another"}) {
		h.t.Fatalf("State = %+v, %v; want primed with %q", st, err, "another")
	}
}

func testStats(h *harness) {
	lease := h.at(100)
	h.wantStats(waterline.Stats{})
	h.connect("a")
	h.connect("b")
	h.connect("idle")
	h.wantStats(waterline.Stats{Clients: 3})
	h.wantSent("a", lease, 3, ent("a1", 0, 1), ent("a2", 0, 2), ent("a3", 1, 3))
	h.wantSent("b", lease, 2, ent("b1", 0, 4), ent("b2", 0, 5))
	h.wantStats(waterline.Stats{Clients: 3, Pending: 5})
	h.wantAck("a", 2, "a2")
	h.wantSent("b", lease, 2, ent("b1", 0, 4)) // a re-send adds nothing
	h.wantStats(waterline.Stats{Clients: 3, Pending: 4})
	h.withdraw("b", true)
	h.wantStats(waterline.Stats{Clients: 2, Pending: 2})
	h.connect("a") // a second Connect is not a second client
	h.wantStats(waterline.Stats{Clients: 2, Pending: 2})
}

// testClients: Connect twice replaces Start and keeps the pending set.
func testClients(h *harness) {
	ctx := h.ctx
	a := waterline.Client{ID: "a", User: "alice", Device: "phone", Start: map[int32]int64{0: 10}}
	if err := h.ix.Connect(ctx, a); err != nil {
		h.t.Fatal(err)
	}
	h.connect("b")
	h.wantSent("a", h.at(100), 1, ent("m", 0, 11))

	a2 := waterline.Client{ID: "a", User: "alice", Device: "phone", Start: map[int32]int64{0: 20, 3: 5}}
	if err := h.ix.Connect(ctx, a2); err != nil {
		h.t.Fatal(err)
	}
	h.wantAck("a", 1)
	h.wantLine(0, 11)

	cs, err := h.ix.Clients(ctx)
	if err != nil {
		h.t.Fatalf("Clients: %v", err)
	}
	slices.SortFunc(cs, func(x, y waterline.Client) int { return strings.Compare(x.ID, y.ID) })
	if len(cs) != 2 || cs[0].ID != "a" || cs[1].ID != "b" {
		h.t.Fatalf("Clients = %+v; want a and b", cs)
	}
	g := cs[0]
	if g.User != "alice" || g.Device != "phone" || len(g.Start) != 2 || g.Start[0] != 20 || g.Start[3] != 5 {
		h.t.Fatalf("Clients()[a] = %+v; want the second registration %+v", g, a2)
	}
	if cs[1].User != "u-b" || cs[1].Device != "d" || len(cs[1].Start) != 0 {
		h.t.Fatalf("Clients()[b] = %+v", cs[1])
	}

	h.withdraw("a", true)
	if cs, err := h.ix.Clients(ctx); err != nil || len(cs) != 1 || cs[0].ID != "b" {
		h.t.Fatalf("Clients after Withdraw = %+v, %v; want only b", cs, err)
	}
}
