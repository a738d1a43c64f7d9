package delivery

import (
	"errors"
	"time"

	"github.com/tetra-messenger/tetra/workload/waterline"
)

// Sending is shared by the fast path (fastpath.go) and the poller
// (poller.go): a send is recorded in the index, under the engine's index
// lock, and then queued on the connection's socket.

// send sends items, whose window slots the caller reserved (or which are
// outstanding already, for a re-delivery), to m: it records them in the
// index with a lease (Sent), counts an attempt and queues their frames on
// the socket. It returns how many were queued.
//
// The connection's own record (Member.out) is what re-delivery and a
// rebuild go by, so a send the index refused is still delivered: when the
// index lost the registration (a flush, a failover) the next rebuild puts
// the entries back; when Redis is unreachable GC deletes nothing until it
// is back.
func (e *Engine) send(m *Member, items []item) int {
	if len(items) == 0 {
		return 0
	}
	t := e.tuning()
	lease := e.now().Add(t.Lease)
	ctx, cancel := e.ctx()
	e.idxMu.RLock()
	_, err := e.idx.Sent(ctx, m.client.ID, entriesOf(items), lease)
	e.idxMu.RUnlock()
	cancel()
	if !e.recorded(m, err) {
		return 0
	}
	return e.queueSent(m, items, lease)
}

// sendMany is send for several members at once: with an index that can
// (waterline.ManySender, Redis) their entries are recorded in one round
// trip, not one per member; then each member's frames are queued as send
// queues them. It returns how many frames were queued.
func (e *Engine) sendMany(byMember map[*Member][]item) int {
	ms, ok := e.idx.(waterline.ManySender)
	if !ok || len(byMember) < 2 {
		n := 0
		for m, items := range byMember {
			n += e.send(m, items)
		}
		return n
	}
	members := make([]*Member, 0, len(byMember))
	batches := make([]waterline.SentBatch, 0, len(byMember))
	for m, items := range byMember {
		members = append(members, m)
		batches = append(batches, waterline.SentBatch{ClientID: m.client.ID, Entries: entriesOf(items)})
	}
	lease := e.now().Add(e.tuning().Lease)
	ctx, cancel := e.ctx()
	e.idxMu.RLock()
	errs := ms.SentMany(ctx, batches, lease)
	e.idxMu.RUnlock()
	cancel()
	n := 0
	for k, m := range members {
		if e.recorded(m, errs[k]) {
			n += e.queueSent(m, byMember[m], lease)
		}
	}
	return n
}

func entriesOf(items []item) []waterline.Entry {
	entries := make([]waterline.Entry, len(items))
	for i, it := range items {
		entries[i] = it.entry
	}
	return entries
}

// recorded handles the index's answer to recording a send to m: false
// when m was withdrawn meanwhile (nothing to send). A send the index
// refused otherwise is still delivered (see send).
func (e *Engine) recorded(m *Member, err error) bool {
	switch {
	case errors.Is(err, waterline.ErrUnknownClient):
		if !e.Registered(m) {
			return false // withdrawn meanwhile
		}
		// The index lost this registration: a flush or a failover that
		// the next GC pass rebuilds from, or, in a shared index, another
		// process reaped this one (the heartbeat tells).
		e.link.checkReaped()
	case err != nil:
		e.warnSend.Warn(e.logger, "waterline index refused a send; delivering (the connection's window keeps it for re-delivery)", "conn", m.client.ID, "err", err)
	}
	return true
}

// queueSent counts an attempt of each item still outstanding, with lease,
// and queues its frame on m's socket. It returns how many were queued.
func (e *Engine) queueSent(m *Member, items []item, lease time.Time) int {
	frames := make([][]byte, 0, len(items))
	m.mu.Lock()
	for _, it := range items {
		o := m.out[it.entry.MessageID]
		if o == nil {
			continue // acknowledged meanwhile (a re-send crossing an ack)
		}
		o.attempts++
		o.leaseUntil = lease
		frames = append(frames, o.frame)
	}
	m.mu.Unlock()
	n := 0
	for _, f := range frames {
		if m.conn.Enqueue(f) {
			n++
		} else {
			e.enqF.Add(1)
		}
	}
	return n
}

func (e *Engine) observe(path string, items []item) {
	if e.cfg.OnDelivered == nil {
		return
	}
	now := e.now()
	for _, it := range items {
		if !it.sentAt.IsZero() {
			e.cfg.OnDelivered(path, now.Sub(it.sentAt))
		}
	}
}
