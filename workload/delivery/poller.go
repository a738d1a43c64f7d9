package delivery

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/tetra-messenger/tetra/workload/outbox"
	"github.com/tetra-messenger/tetra/workload/protocol"
	"github.com/tetra-messenger/tetra/workload/waterline"
)

// maxScanRounds bounds the batches one poll pass reads per partition, so a
// large backlog is worked through over several passes without starving
// re-deliveries.
const maxScanRounds = 8

// catchUpMinRead is the fewest rows a catch-up round reads (catchUp).
const catchUpMinRead = 64

// poller is the outbox side of live delivery: once per poll interval, and
// whenever woken (an acknowledgement freed a window with messages waiting,
// a shed hand-off, another process's commit), it re-delivers what is past
// its lease, catches up the connections behind a full push window, scans
// each partition forward from its scan position for what the fast path
// missed, and refreshes its hold. It owns the scan positions and the
// wake-up; it reads the fast path's coverage to pass what that delivered
// whole, and reaches the registry, the index, the sends (send.go) and the
// counters through its engine. Passes run on one goroutine (the poll loop,
// or a test calling PollOnce).
type poller struct {
	e *Engine
	// cover is the fast path's record of the commits it delivered whole
	// (cover.go).
	cover *coverage
	// scanPos is, per partition, the last position the scan examined (-1
	// before the first row); set by holdAll before the poller runs.
	scanPos map[int32]*atomic.Int64
	// floors is, per partition, the scan position the poller last passed
	// every member that follows its scan to (pruneAhead): the horizon of
	// each such member whose own is lower (Member.horizonLocked). -1
	// before the first. Set up with scanPos; written by the poll loop
	// only, read by every goroutine that checks a horizon.
	floors map[int32]*atomic.Int64
	wake   chan struct{}
}

func newPoller(e *Engine, cover *coverage) *poller {
	return &poller{e: e, cover: cover, scanPos: map[int32]*atomic.Int64{}, floors: map[int32]*atomic.Int64{}, wake: make(chan struct{}, 1)}
}

// addPartition starts the scan of p before its first row, with no floor.
// It runs before the poller and the fast path do (Start).
func (pl *poller) addPartition(p int32) {
	v, f := &atomic.Int64{}, &atomic.Int64{}
	v.Store(-1)
	f.Store(-1)
	pl.scanPos[p], pl.floors[p] = v, f
}

// floorOf returns the poller's floor for p (see poller.floors); -1 for a
// partition it does not scan.
func (pl *poller) floorOf(p int32) int64 {
	if f, ok := pl.floors[p]; ok {
		return f.Load()
	}
	return -1
}

// holdAll starts the scan of every partition of parts before its first
// row and pins each with the poller's hold at 0, so GC deletes nothing
// live delivery has not examined. It runs in Start, before the poller.
func (pl *poller) holdAll(ctx context.Context, parts []int32) error {
	e := pl.e
	for _, p := range parts {
		pl.addPartition(p)
		if err := e.idx.Hold(ctx, e.cfg.Holder, p, 0, e.cfg.HoldTTL); err != nil {
			return err
		}
	}
	return nil
}

func (pl *poller) loop(ctx context.Context) {
	defer pl.e.wg.Done()
	for {
		interval := pl.e.tuning().PollInterval
		timer := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		case <-pl.wake:
			timer.Stop()
		}
		pl.once(ctx)
	}
}

// PollOnce runs one poller pass: re-deliver what is past its lease (or
// withdraw its recipient, the attempts reaper); per partition, catch up the
// connections that fell behind a full push window and have room again, then
// scan forward from the scan position and deliver what the fast path
// missed; then apply the overload reaper. Exported for tests; the engine
// calls it on its own cadence and whenever an acknowledgement frees a
// window that has messages waiting.
func (e *Engine) PollOnce(ctx context.Context) { e.poller.once(ctx) }

// once is PollOnce.
func (pl *poller) once(ctx context.Context) {
	pl.redeliver(ctx)
	for _, p := range pl.e.partitions {
		pl.catchUp(ctx, p)
		pl.scan(ctx, p)
	}
	pl.e.ReapOverloaded()
}

// wakeUp asks the poll loop for a pass now. It never blocks; wake-ups
// coalesce.
func (pl *poller) wakeUp() {
	select {
	case pl.wake <- struct{}{}:
	default:
	}
}

// redeliver re-sends the entries whose lease expired, from each
// connection's own window, or withdraws a connection whose entry was sent
// max-delivery-attempts times (the attempts reaper, close 4002). An entry
// the index holds but the window does not was acknowledged (the index missed
// the ack, or a re-send crossed it): it is dropped from the index.
func (pl *poller) redeliver(ctx context.Context) {
	e := pl.e
	t := e.tuning()
	cctx, cancel := context.WithTimeout(ctx, e.cfg.StoreTimeout)
	due, err := e.idx.Expired(cctx, e.now(), t.PollBatch)
	cancel()
	if err != nil {
		e.logger.Warn("poller: read expired leases", "err", err)
		return
	}
	byClient := map[string][]waterline.Pending{}
	var order []string
	for _, d := range due {
		if _, ok := byClient[d.ClientID]; !ok {
			order = append(order, d.ClientID)
		}
		byClient[d.ClientID] = append(byClient[d.ClientID], d)
	}
	for _, id := range order {
		m := e.reg.get(id)
		if m == nil {
			// The index holds a client this process no longer has.
			e.idxMu.RLock()
			_, _ = e.idx.Withdraw(ctx, id)
			e.idxMu.RUnlock()
			continue
		}
		age := e.now().Sub(m.connectedAt)
		var items []item
		var acked []string
		attempts := 0
		m.mu.Lock()
		for _, d := range byClient[id] {
			o := m.out[d.MessageID]
			if o == nil {
				acked = append(acked, d.MessageID)
				continue
			}
			if AttemptsReaper(t, o.attempts, age) {
				attempts = o.attempts
				break
			}
			items = append(items, item{entry: o.entry, frame: o.frame})
		}
		m.mu.Unlock()
		if attempts > 0 {
			e.withdraw(m, protocol.CloseAttempts, fmt.Sprintf("withdrawn: a message went unacknowledged after %d delivery attempts (max-delivery-attempts %d)", attempts, t.MaxDeliveryAttempts), ReasonAttempts)
			continue
		}
		if len(acked) > 0 {
			cctx, cancel := context.WithTimeout(ctx, e.cfg.StoreTimeout)
			e.idxMu.RLock()
			_, err := e.idx.Ack(cctx, id, acked)
			e.idxMu.RUnlock()
			cancel()
			if err != nil {
				e.logger.Debug("poller: drop acknowledged entries from the index", "conn", id, "err", err)
			}
		}
		n := e.send(m, items)
		e.redel.Add(int64(n))
	}
}

// offerLocked is what the poller does with one outbox row for one member (the
// member's lock held): skip it, send it (its window slot is reserved), or
// leave it waiting behind a full window.
func offerLocked(m *Member, r *outbox.Row, p int32, floor int64, window int, now time.Time, it func() item) (send bool, full bool) {
	k := pkey{p, r.Pos}
	if m.excludedLocked(r.Message.ChatID, r.Message.Seq) {
		delete(m.ahead, k)
		m.horizon[p] = r.Pos // removed from the chat (Engine.Exclude): examined, not sent
		return false, false
	}
	if _, sent := m.ahead[k]; sent {
		delete(m.ahead, k) // the fast path sent it
		m.horizon[p] = r.Pos
		return false, false
	}
	switch m.reserveLocked(it(), window) {
	case slotRefused:
		m.fallBehindLocked(p, floor, r.Message.SentAt, now, window)
		return false, true
	case slotHeld:
		m.horizon[p] = r.Pos
		return false, false
	}
	m.horizon[p] = r.Pos
	m.noteWindowLocked(now, window)
	return true, false
}

func (pl *poller) scan(ctx context.Context, p int32) {
	e := pl.e
	t := e.tuning()
	pos := pl.scanPos[p]
	for round := 0; round < maxScanRounds; round++ {
		after := pos.Load()
		if next := pl.cover.pass(p, after); next > after {
			// The fast path delivered these commits whole (cover.go).
			after = next
			pos.Store(after)
			pl.pruneAhead(p, after)
		}
		cctx, cancel := context.WithTimeout(ctx, e.cfg.StoreTimeout)
		rows, err := e.outbox.Scan(cctx, p, after, t.PollBatch)
		cancel()
		if err != nil {
			e.logger.Warn("poller: scan the outbox", "partition", p, "err", err)
			break
		}
		if len(rows) == 0 {
			break
		}
		now := e.now()
		floor := pl.floorOf(p) // only this loop sets it
		byMember := map[*Member][]item{}
		frames := map[string][]byte{}
		var ms []*Member
		for i := range rows {
			r := &rows[i]
			mk := func() item { return rowItem(r, p, frames) }
			ms = e.reg.appendOfUser(ms[:0], r.Recipient)
			for _, m := range ms {
				if r.Recipient == r.Message.SenderID && m.client.Device == r.Message.SenderDevice {
					continue
				}
				m.mu.Lock()
				if r.Pos <= m.horizonLocked(p, floor) || m.isBehind(p) {
					m.mu.Unlock() // examined, or left to the catch-up
					continue
				}
				send, full := offerLocked(m, r, p, floor, t.MaxPending, now, mk)
				m.mu.Unlock()
				if full {
					e.reg.markLagging(m)
					e.deferred.Add(1)
				}
				if send {
					byMember[m] = append(byMember[m], mk())
				}
			}
		}
		e.polled.Add(int64(e.sendMany(byMember)))
		for _, items := range byMember {
			e.observe("poll", items)
		}
		last := rows[len(rows)-1].Pos
		pos.Store(last)
		pl.pruneAhead(p, last)
		if len(rows) < t.PollBatch {
			break
		}
	}
	pl.hold(ctx, p)
}

// rowItem builds the item of an outbox row, sharing one encoded frame per
// message within a pass.
func rowItem(r *outbox.Row, p int32, frames map[string][]byte) item {
	f, ok := frames[r.Message.ID]
	if !ok {
		f = MessageFrame(r.Message)
		frames[r.Message.ID] = f
	}
	return item{entry: waterline.Entry{MessageID: r.Message.ID, Partition: p, Pos: r.Pos}, frame: f,
		chat: r.Message.ChatID, seq: r.Message.Seq, sentAt: r.Message.SentAt}
}

// catchUp delivers, oldest first, the rows waiting for members that fell
// behind a full push window in partition p and have room again: one scan
// from the lowest such horizon up to the poller's scan position, each
// member taking rows until its window is full again. A member whose
// catch-up reaches the scan position is caught up: the main scan serves it
// from there on.
func (pl *poller) catchUp(ctx context.Context, p int32) {
	e := pl.e
	t := e.tuning()
	upto := pl.scanPos[p].Load()
	from := int64(maxPos)
	open := map[*Member]bool{} // members taking rows; false once full again
	byUser := map[string][]*Member{}
	for _, m := range e.reg.laggingMembers() {
		m.mu.Lock()
		if m.isBehind(p) && len(m.out) < t.MaxPending {
			open[m] = true
			byUser[m.client.User] = append(byUser[m.client.User], m)
			from = min(from, m.horizon[p])
		}
		m.mu.Unlock()
	}
	if len(open) == 0 {
		return
	}
	// The members take only what their windows have room for, and an
	// acknowledgement frees a slot or a few: a first read of the full
	// PollBatch (6,000 rows by default, bodies included) to hand out a
	// handful was most of the server's CPU whenever windows filled (issue
	// 22). The first read is a few times the room, and each further round
	// reads twice as many, up to PollBatch.
	room := 0
	for m := range open {
		m.mu.Lock()
		room += max(0, t.MaxPending-len(m.out))
		m.mu.Unlock()
	}
	limit := min(t.PollBatch, max(catchUpMinRead, 4*room))
	// A pass reads at most what maxScanRounds full reads would.
	budget := maxScanRounds * t.PollBatch
	reached := false
	after := from
	for budget > 0 && !reached {
		limit = min(limit, budget)
		budget -= limit
		cctx, cancel := context.WithTimeout(ctx, e.cfg.StoreTimeout)
		rows, err := e.outbox.Scan(cctx, p, after, limit)
		cancel()
		if err != nil {
			e.logger.Warn("poller: catch-up scan of the outbox", "partition", p, "err", err)
			return
		}
		if len(rows) < limit {
			reached = true
		}
		limit = min(t.PollBatch, 2*limit)
		now := e.now()
		byMember := map[*Member][]item{}
		frames := map[string][]byte{}
		for i := range rows {
			r := &rows[i]
			if r.Pos > upto {
				reached = true
				break
			}
			after = r.Pos
			mk := func() item { return rowItem(r, p, frames) }
			for _, m := range byUser[r.Recipient] {
				if !open[m] || (r.Recipient == r.Message.SenderID && m.client.Device == r.Message.SenderDevice) {
					continue
				}
				m.mu.Lock()
				if !m.isBehind(p) || r.Pos <= m.horizon[p] {
					m.mu.Unlock()
					continue
				}
				send, full := offerLocked(m, r, p, pl.floorOf(p), t.MaxPending, now, mk)
				m.mu.Unlock()
				if full {
					open[m] = false
				}
				if send {
					byMember[m] = append(byMember[m], mk())
				}
			}
		}
		e.polled.Add(int64(e.sendMany(byMember)))
		for _, items := range byMember {
			e.observe("poll", items)
		}
		if after >= upto {
			reached = true
		}
		stillOpen := false
		for _, o := range open {
			stillOpen = stillOpen || o
		}
		if !stillOpen {
			return
		}
	}
	if !reached {
		return
	}
	for m, o := range open {
		if !o {
			continue
		}
		m.mu.Lock()
		if m.isBehind(p) {
			m.horizon[p] = max(m.horizon[p], upto)
			m.catchUpLocked(p, e.now(), t.MaxPending)
			m.followLocked(p, pl.floorOf(p))
			for k := range m.ahead {
				if k.p == p && k.pos <= upto {
					delete(m.ahead, k)
				}
			}
			if at, ok := m.shed[p]; ok && at <= m.horizon[p] {
				delete(m.shed, p)
			}
		}
		caught := len(m.behind) == 0
		m.mu.Unlock()
		if caught {
			e.reg.caughtUp(m)
		}
	}
}

// pruneAhead passes every member that follows the scan of p (not
// behind there, its start known) to upto, the scan position, by raising
// the poller's floor (Member.horizonLocked): O(1), where visiting each
// connected member under its lock was 5 % of the server's CPU in groups
// of 10 at 2,000 msg/s (docs/benchmarks.md, twelfth pass). A member that
// falls behind makes the floor its own horizon (fallBehindLocked), one
// that catches up or starts follows from the floor of that moment
// (followLocked), and the marks and the shed position the horizon has
// passed are dropped where they are next looked at (markAheadLocked,
// sheddingLocked).
func (pl *poller) pruneAhead(p int32, upto int64) {
	if f := pl.floors[p]; f != nil && upto > f.Load() {
		f.Store(upto)
	}
}

// holdPos is where the poller holds partition p: the first position it has
// not examined, or lower, the first row a member that fell behind has not
// been offered yet. GC never deletes a row live delivery still owes a
// connected client.
func (pl *poller) holdPos(p int32) int64 {
	e := pl.e
	pos := pl.scanPos[p].Load() + 1
	for _, m := range e.reg.laggingMembers() {
		m.mu.Lock()
		if m.isBehind(p) && m.horizon[p]+1 < pos {
			pos = m.horizon[p] + 1
		}
		m.mu.Unlock()
	}
	return max(pos, 0)
}

// hold pins the partition at holdPos, so GC never deletes a row before live
// delivery saw it (or, for a member behind a full window, sent it).
func (pl *poller) hold(ctx context.Context, p int32) {
	e := pl.e
	cctx, cancel := context.WithTimeout(ctx, e.cfg.StoreTimeout)
	defer cancel()
	e.idxMu.RLock()
	err := e.idx.Hold(cctx, e.cfg.Holder, p, pl.holdPos(p), e.cfg.HoldTTL)
	e.idxMu.RUnlock()
	if err != nil {
		e.warnHold.Warn(e.logger, "poller: refresh hold", "partition", p, "err", err)
	}
}
