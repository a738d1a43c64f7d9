package waterlinetest

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/waterline"
)

// model is the plain reference the randomized test compares an index with:
// maps and linear scans, obviously right.
type model struct {
	clients map[string]map[string]*modelEntry // client -> MessageID -> entry
	holds   map[string]int64                  // "holder/partition" -> pos
}

type modelEntry struct {
	waterline.Entry
	attempts int
	lease    int // milliseconds after base; restoredLease for Restore
}

// restoredLease stands for a Restore with a zero lease ("due at once"):
// before every lease the test sends with, and at or before every now it
// asks about.
const restoredLease = -1 << 30

func (m *model) line(part int32) (int64, bool) {
	var line int64
	ok := false
	for k, pos := range m.holds {
		if strings.HasSuffix(k, fmt.Sprintf("/%d", part)) && (!ok || pos < line) {
			line, ok = pos, true
		}
	}
	for _, set := range m.clients {
		for _, e := range set {
			if e.Partition == part && (!ok || e.Pos < line) {
				line, ok = e.Pos, true
			}
		}
	}
	return line, ok
}

func (m *model) pending() int {
	n := 0
	for _, set := range m.clients {
		n += len(set)
	}
	return n
}

// testAgainstModel applies a random sequence of operations to the index and
// to the model and compares every answer. Sent leases lie an hour in the
// future, so an index whose Restore stamps the current time still counts
// restored entries as due before all of them.
func testAgainstModel(h *harness) {
	seed := uint64(time.Now().UnixNano())
	h.t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	base := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	at := func(ms int) time.Time { return base.Add(time.Duration(ms) * time.Millisecond) }

	clientIDs := []string{"c0", "c1", "c2", "c3", "c4", "c5"}
	const nMsgs = 30
	msgs := make([]waterline.Entry, nMsgs)
	for i := range msgs {
		msgs[i] = ent(fmt.Sprintf("m%02d", i), int32(i%3), rng.Int64N(100))
	}
	m := &model{clients: map[string]map[string]*modelEntry{}, holds: map[string]int64{}}
	ctx := h.ctx
	var opLog []string
	fail := func(format string, args ...any) {
		h.t.Helper()
		tail := opLog[max(0, len(opLog)-15):]
		h.t.Fatalf("seed %d, after %d ops (last: %s): %s", seed, len(opLog), strings.Join(tail, "; "), fmt.Sprintf(format, args...))
	}
	pick := func() []waterline.Entry {
		es := make([]waterline.Entry, 1+rng.IntN(4))
		for i := range es {
			es[i] = msgs[rng.IntN(nMsgs)]
		}
		return es
	}
	pickIDs := func() []string {
		es := pick()
		ids := make([]string, len(es))
		for i, e := range es {
			ids[i] = e.MessageID
		}
		if rng.IntN(8) == 0 {
			ids = append(ids, "unknown")
		}
		return ids
	}
	applySent := func(c string, es []waterline.Entry, lease int) {
		set := m.clients[c]
		for _, e := range es {
			if me := set[e.MessageID]; me != nil {
				me.attempts++
				me.lease = lease
			} else {
				set[e.MessageID] = &modelEntry{Entry: e, attempts: 1, lease: lease}
			}
		}
	}
	// An index that records many clients at once is driven through
	// SentMany and AckMany too (a third of the sends and acks).
	manySender, _ := h.ix.(waterline.ManySender)
	manyAcker, _ := h.ix.(waterline.ManyAcker)
	checkErr := func(op, c string, err error) bool {
		h.t.Helper()
		_, known := m.clients[c]
		switch {
		case known && err != nil:
			fail("%s(%s): %v", op, c, err)
		case !known && !errors.Is(err, waterline.ErrUnknownClient):
			fail("%s(%s) of an unknown client: err = %v, want ErrUnknownClient", op, c, err)
		}
		return known
	}

	const ops = 3000
	for range ops {
		c := clientIDs[rng.IntN(len(clientIDs))]
		switch r := rng.IntN(1000); {
		case r < 100:
			opLog = append(opLog, "connect "+c)
			if err := h.ix.Connect(ctx, waterline.Client{ID: c}); err != nil {
				fail("Connect: %v", err)
			}
			if m.clients[c] == nil {
				m.clients[c] = map[string]*modelEntry{}
			}
		case r < 150:
			opLog = append(opLog, "withdraw "+c)
			got, err := h.ix.Withdraw(ctx, c)
			_, want := m.clients[c]
			if err != nil || got != want {
				fail("Withdraw(%s) = %v, %v; want %v", c, got, err, want)
			}
			delete(m.clients, c)
		case r < 500 && manySender != nil && rng.IntN(3) == 0:
			// Several clients' sends at once, c first; a client may come
			// twice and may be unknown.
			batches := []waterline.SentBatch{{ClientID: c, Entries: pick()}}
			for range rng.IntN(3) {
				batches = append(batches, waterline.SentBatch{ClientID: clientIDs[rng.IntN(len(clientIDs))], Entries: pick()})
			}
			lease := rng.IntN(30)
			opLog = append(opLog, fmt.Sprintf("sentMany %v @%d", batches, lease))
			errs := manySender.SentMany(ctx, batches, at(lease))
			if len(errs) != len(batches) {
				fail("SentMany returned %d errors for %d batches", len(errs), len(batches))
			}
			for i, b := range batches {
				if checkErr("SentMany", b.ClientID, errs[i]) {
					applySent(b.ClientID, b.Entries, lease)
				}
			}
		case r < 500:
			es, lease := pick(), rng.IntN(30)
			opLog = append(opLog, fmt.Sprintf("sent %s %v @%d", c, es, lease))
			n, err := h.ix.Sent(ctx, c, es, at(lease))
			if !checkErr("Sent", c, err) {
				break
			}
			applySent(c, es, lease)
			if n != len(m.clients[c]) {
				fail("Sent(%s) pending = %d, want %d", c, n, len(m.clients[c]))
			}
		case r < 820 && manyAcker != nil && rng.IntN(3) == 0:
			batches := []waterline.AckBatch{{ClientID: c, MessageIDs: pickIDs()}}
			for range rng.IntN(3) {
				batches = append(batches, waterline.AckBatch{ClientID: clientIDs[rng.IntN(len(clientIDs))], MessageIDs: pickIDs()})
			}
			opLog = append(opLog, fmt.Sprintf("ackMany %v", batches))
			errs := manyAcker.AckMany(ctx, batches)
			if len(errs) != len(batches) {
				fail("AckMany returned %d errors for %d batches", len(errs), len(batches))
			}
			for i, b := range batches {
				if checkErr("AckMany", b.ClientID, errs[i]) {
					for _, id := range b.MessageIDs {
						delete(m.clients[b.ClientID], id)
					}
				}
			}
		case r < 820:
			ids := pickIDs()
			opLog = append(opLog, fmt.Sprintf("ack %s %v", c, ids))
			n, err := h.ix.Ack(ctx, c, ids)
			if !checkErr("Ack", c, err) {
				break
			}
			for _, id := range ids {
				delete(m.clients[c], id)
			}
			if n != len(m.clients[c]) {
				fail("Ack(%s) pending = %d, want %d", c, n, len(m.clients[c]))
			}
		case r < 900:
			// Restore with a random attempts count and either a due
			// (zero) lease or one like Sent's.
			es := pick()
			ps := make([]waterline.Pending, len(es))
			leases := make([]int, len(es))
			for i, e := range es {
				ps[i] = waterline.Pending{Entry: e, Attempts: rng.IntN(4)}
				leases[i] = restoredLease
				if rng.IntN(2) == 0 {
					leases[i] = rng.IntN(30)
					ps[i].LeaseUntil = at(leases[i])
				}
			}
			opLog = append(opLog, fmt.Sprintf("restore %s %v", c, ps))
			err := h.ix.Restore(ctx, c, ps)
			if !checkErr("Restore", c, err) {
				break
			}
			for i, p := range ps {
				if m.clients[c][p.MessageID] == nil {
					m.clients[c][p.MessageID] = &modelEntry{Entry: p.Entry, attempts: p.Attempts, lease: leases[i]}
				}
			}
		case r < 997:
			holder, part, pos := fmt.Sprintf("h%d", rng.IntN(2)), int32(rng.IntN(3)), rng.Int64N(120)-20
			opLog = append(opLog, fmt.Sprintf("hold %s/%d %d", holder, part, pos))
			if err := h.ix.Hold(ctx, holder, part, pos, time.Hour); err != nil {
				fail("Hold: %v", err)
			}
			k := fmt.Sprintf("%s/%d", holder, part)
			if pos < 0 {
				delete(m.holds, k)
			} else {
				m.holds[k] = pos
			}
		default:
			opLog = append(opLog, "reset")
			if err := h.ix.Reset(ctx); err != nil {
				fail("Reset: %v", err)
			}
			if _, _, err := h.ix.SafeLine(ctx, 0, h.identity); !errors.Is(err, waterline.ErrNotPrimed) {
				fail("SafeLine after Reset: err = %v, want ErrNotPrimed", err)
			}
			h.prime()
			m.clients = map[string]map[string]*modelEntry{}
			m.holds = map[string]int64{}
		}

		for p := range int32(4) {
			gl, gok, err := h.ix.SafeLine(ctx, p, h.identity)
			wl, wok := m.line(p)
			if err != nil || gok != wok || (wok && gl != wl) {
				fail("SafeLine(%d) = %d, %v, %v; want %d, %v", p, gl, gok, err, wl, wok)
			}
		}
		if len(opLog)%10 == 0 {
			st, err := h.ix.Stats(ctx)
			if want := (waterline.Stats{Clients: len(m.clients), Pending: m.pending()}); err != nil || st != want {
				fail("Stats = %+v, %v; want %+v", st, err, want)
			}
			checkExpired(h.t, h, m, at, rng.IntN(36)-3, 1+rng.IntN(12), fail)
		}
	}
	checkExpired(h.t, h, m, at, 1000, 1000, fail)
}

// checkExpired compares Expired(now, limit) with the model. Entries with
// equal leases may come in any order, so it checks that every entry returned
// is due and reported right, that the leases come in order, and that they
// are the limit smallest leases of the model's due entries.
func checkExpired(t *testing.T, h *harness, m *model, at func(int) time.Time, nowMS, limit int, fail func(string, ...any)) {
	t.Helper()
	now := at(nowMS)
	got, err := h.ix.Expired(h.ctx, now, limit)
	if err != nil {
		fail("Expired: %v", err)
	}
	var due []int
	for _, set := range m.clients {
		for _, e := range set {
			if e.lease <= nowMS {
				due = append(due, e.lease)
			}
		}
	}
	slices.Sort(due)
	due = due[:min(limit, len(due))]
	if len(got) != len(due) {
		fail("Expired(%d ms, %d) returned %d entries, want %d: %s", nowMS, limit, len(got), len(due), fmtPending(got))
	}
	seen := map[string]bool{}
	for i, p := range got {
		key := p.ClientID + "/" + p.MessageID
		me := m.clients[p.ClientID][p.MessageID]
		if me == nil || seen[key] {
			fail("Expired returned %s, not pending or twice: %s", key, fmtPending(got))
		}
		seen[key] = true
		if p.Entry != me.Entry || p.Attempts != me.attempts {
			fail("Expired returned %s as %v attempts %d; want %v attempts %d", key, p.Entry, p.Attempts, me.Entry, me.attempts)
		}
		switch {
		case me.lease == restoredLease:
			if p.LeaseUntil.After(at(-3)) {
				fail("Expired returned restored %s with lease %v, not already expired", key, p.LeaseUntil)
			}
		case !p.LeaseUntil.Equal(at(me.lease)):
			fail("Expired returned %s with lease %v, want %v", key, p.LeaseUntil, at(me.lease))
		}
		if me.lease != due[i] {
			fail("Expired(%d ms, %d) entry %d is %s with lease %d ms; want lease %d ms: %s", nowMS, limit, i, key, me.lease, due[i], fmtPending(got))
		}
	}
}
