package delivery

import (
	"context"
	"errors"
	"time"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/outbox"
	"github.com/tetra-messenger/tetra/workload/protocol"
	"github.com/tetra-messenger/tetra/workload/waterline"
)

type fastItem struct {
	m   *Member
	cov *coverRange // the commit's range (cover.go); nil when not covered
	item
}

// Committed is outbox.Committed: what the fast path is handed.
type Committed = outbox.Committed

// Handoff queues committed messages on the fast path for their connected
// recipients (never the sending connection). It never blocks: when a
// worker's queue is full the rest is shed to the poller. It also wakes the
// other processes of a fleet, and hands the recipients with no connection
// on this process to the nudge sink (Config.Nudges).
func (e *Engine) Handoff(batch []Committed) {
	shed := false
	covs := e.coverBatch(batch)
	var ms []*Member
	for i := range batch {
		c := &batch[i]
		frame := MessageFrame(c.Message)
		for _, d := range c.Rows {
			cov := covs[d.Partition]
			ms = e.reg.appendOfUser(ms[:0], d.Recipient)
			for _, m := range ms {
				if d.Recipient == c.Message.SenderID && m.client.Device == c.Message.SenderDevice {
					continue
				}
				it := fastItem{m: m, cov: cov, item: item{entry: waterline.Entry{MessageID: c.Message.ID, Partition: d.Partition, Pos: d.Pos}, frame: frame,
					chat: c.Message.ChatID, seq: c.Message.Seq, sentAt: c.Message.SentAt}}
				if cov != nil {
					cov.pending.Add(1)
				}
				select {
				case e.fastQ[m.shard] <- it:
				default:
					m.mu.Lock()
					if cur, ok := m.shed[d.Partition]; !ok || d.Pos < cur {
						m.shed[d.Partition] = d.Pos
					}
					m.mu.Unlock()
					if cov != nil {
						cov.dirty.Store(true) // the poller delivers it
						cov.pending.Add(-1)
					}
					e.shed.Add(1)
					shed = true
				}
			}
		}
	}
	for _, cov := range covs {
		cov.sealed.Store(true)
	}
	if shed {
		e.wakePoller()
	}
	if e.cfg.Nudges != nil {
		if ns := e.offlineNudges(batch); len(ns) > 0 {
			e.cfg.Nudges.Nudge(ns)
		}
	}
	if len(batch) > 0 {
		e.publishWake()
	}
}

// coverBatch records the batch's rows per partition as commit ranges
// (cover.go); a partition whose rows are not one contiguous run gets none.
func (e *Engine) coverBatch(batch []Committed) map[int32]*coverRange {
	var byPart map[int32][]int64
	for i := range batch {
		for _, d := range batch[i].Rows {
			if byPart == nil {
				byPart = map[int32][]int64{}
			}
			byPart[d.Partition] = append(byPart[d.Partition], d.Pos)
		}
	}
	covs := make(map[int32]*coverRange, len(byPart))
	for p, positions := range byPart {
		if r := e.cover.add(p, positions); r != nil {
			covs[p] = r
		}
	}
	return covs
}

// MessageFrame encodes the message frame for m (PROTOCOL.md §3).
func MessageFrame(m history.Message) []byte {
	return protocol.Encode(WireMessage(m, protocol.TypeMessage))
}

// WireMessage is m on the wire (PROTOCOL.md §3, §7.3) with frame type typ
// ("" in history pages): edits and deletes name their target; an
// ordinary message carries editedAt after an edit and deleted after a
// delete.
func WireMessage(m history.Message, typ string) protocol.Message {
	w := protocol.Message{
		Type: typ, MessageID: m.ID, CorrelationID: m.CorrelationID,
		ChatID: m.ChatID, SenderID: m.SenderID, Body: m.Body, SentAt: m.SentAt.UTC(),
		Edits: m.Edits, Deletes: m.Deletes, Deleted: m.Deleted,
	}
	if !m.EditedAt.IsZero() {
		at := m.EditedAt.UTC()
		w.EditedAt = &at
	}
	return w
}

func makeQueues(n, total int) []chan fastItem {
	qs := make([]chan fastItem, n)
	per := max(1, total/n)
	for i := range qs {
		qs[i] = make(chan fastItem, per)
	}
	return qs
}

func (e *Engine) fastWorker(ctx context.Context, q chan fastItem) {
	defer e.wg.Done()
	batch := make([]fastItem, 0, 64)
	for {
		select {
		case <-ctx.Done():
			return
		case it := <-q:
			batch = append(batch[:0], it)
		drain:
			for len(batch) < cap(batch) {
				select {
				case it := <-q:
					batch = append(batch, it)
				default:
					break drain
				}
			}
			e.deliverFast(batch)
		}
	}
}

func (e *Engine) deliverFast(batch []fastItem) {
	window := e.tuning().MaxPending
	byMember := map[*Member][]item{}
	// The items' commit ranges are told the items are handled once their
	// sends are recorded and queued (below).
	defer func() {
		for _, it := range batch {
			if it.cov != nil {
				it.cov.pending.Add(-1)
			}
		}
	}()
	for _, it := range batch {
		m := it.m
		k := pkey{it.entry.Partition, it.entry.Pos}
		m.mu.Lock()
		if h := m.horizon[k.p]; k.pos <= h || m.isBehind(k.p) {
			if it.cov != nil && (h == maxPos || k.pos > h) {
				// Registering, or behind: the poller decides (a catch-up
				// that ends below this row leaves it to the scan).
				it.cov.dirty.Store(true)
			}
			m.mu.Unlock() // examined already, or the catch-up delivers it in order
			continue
		}
		if _, shedding := m.shed[k.p]; shedding {
			if it.cov != nil {
				it.cov.dirty.Store(true)
			}
			m.mu.Unlock() // the poller delivers it, in order
			continue
		}
		if _, dup := m.ahead[k]; dup {
			m.mu.Unlock()
			continue
		}
		if m.excludedLocked(it.chat, it.seq) {
			m.mu.Unlock() // removed from the chat: the poller passes it by
			continue
		}
		switch m.reserveLocked(it.item, window) {
		case slotRefused:
			// The window is full: the row waits in the outbox and the
			// poller sends it as acknowledgements free the window.
			if it.cov != nil {
				it.cov.dirty.Store(true)
			}
			m.shed[k.p] = k.pos
			m.mu.Unlock()
			e.deferred.Add(1)
			continue
		case slotHeld:
			m.ahead[k] = struct{}{}
			m.mu.Unlock()
			continue
		}
		m.ahead[k] = struct{}{}
		if len(m.behind) > 0 { // behind in another partition
			m.noteWindowLocked(e.now(), window)
		}
		m.mu.Unlock()
		byMember[m] = append(byMember[m], it.item)
	}
	e.fast.Add(int64(e.sendMany(byMember)))
	for _, items := range byMember {
		e.observe("fast", items)
	}
}

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
		if e.fleet != nil {
			e.checkReaped()
		}
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
