package delivery

import (
	"context"
	"sync/atomic"

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
	e.fastPath.handoff(batch)
	if e.cfg.Nudges != nil {
		if ns := e.offlineNudges(batch); len(ns) > 0 {
			e.cfg.Nudges.Nudge(ns)
		}
	}
	if len(batch) > 0 {
		e.link.publishWake()
	}
}

// fastPath is the hand-off after commit: Handoff puts one item per
// (row, connection) on the queue of the connection's worker, and a pool of
// workers sends them, recording each commit's coverage (cover.go) so the
// poller can pass what they delivered whole. It owns its queues and the
// coverage; it reaches the registry, the tuning, the sends (send.go), the
// poller's wake-up and the counters through its engine.
type fastPath struct {
	e *Engine
	// queues has one queue per worker; a connection's items always go to
	// the same worker (Member.shard), so each connection sees commit
	// order.
	queues    []chan fastItem
	cover     *coverage // commits the fast path delivered whole (cover.go)
	nextShard atomic.Uint64
}

// newFastPath builds the fast path of e with one queue per worker, each
// of total/workers items (at least one).
func newFastPath(e *Engine, workers, total int) *fastPath {
	qs := make([]chan fastItem, workers)
	per := max(1, total/workers)
	for i := range qs {
		qs[i] = make(chan fastItem, per)
	}
	return &fastPath{e: e, queues: qs, cover: newCoverage()}
}

// shard picks the worker of a new connection, round robin.
func (f *fastPath) shard() int { return int(f.nextShard.Add(1) % uint64(len(f.queues))) }

// start runs one goroutine per worker until ctx ends.
func (f *fastPath) start(ctx context.Context) {
	for _, q := range f.queues {
		f.e.wg.Add(1)
		go f.worker(ctx, q)
	}
}

// handoff queues batch's items on the workers' queues; what does not fit
// is shed to the poller (woken once).
func (f *fastPath) handoff(batch []Committed) {
	e := f.e
	shed := false
	covs := f.coverBatch(batch)
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
				case f.queues[m.shard] <- it:
				default:
					m.mu.Lock()
					if cur, ok := m.shed[d.Partition]; !ok || d.Pos < cur || !m.sheddingLocked(d.Partition, e.poller.floorOf(d.Partition)) {
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
		e.poller.wakeUp()
	}
}

// coverBatch records the batch's rows per partition as commit ranges
// (cover.go); a partition whose rows are not one contiguous run gets none.
func (f *fastPath) coverBatch(batch []Committed) map[int32]*coverRange {
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
		if r := f.cover.add(p, positions); r != nil {
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

// worker sends the items of q, in batches of what is queued (up to 64),
// until ctx ends.
func (f *fastPath) worker(ctx context.Context, q chan fastItem) {
	defer f.e.wg.Done()
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
			f.deliver(batch)
		}
	}
}

// deliver sends batch's items to their connections, each unless the
// poller examined its row already or owns it (the connection is behind,
// shedding, or registering: the coverage is marked dirty), the fast path
// sent it before, or the connection was excluded from its chat; an item
// whose window is full is left to the poller.
func (f *fastPath) deliver(batch []fastItem) {
	e := f.e
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
		floor := e.poller.floorOf(k.p)
		if h := m.horizonLocked(k.p, floor); k.pos <= h || m.isBehind(k.p) {
			if it.cov != nil && (h == maxPos || k.pos > h) {
				// Registering, or behind: the poller decides (a catch-up
				// that ends below this row leaves it to the scan).
				it.cov.dirty.Store(true)
			}
			m.mu.Unlock() // examined already, or the catch-up delivers it in order
			continue
		}
		if m.sheddingLocked(k.p, floor) {
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
			m.markAheadLocked(k, e.poller.floorOf)
			m.mu.Unlock()
			continue
		}
		m.markAheadLocked(k, e.poller.floorOf)
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
