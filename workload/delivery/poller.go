package delivery

import (
	"context"
	"fmt"
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

func (e *Engine) pollLoop(ctx context.Context) {
	defer e.wg.Done()
	for {
		interval := e.tuning().PollInterval
		timer := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		case <-e.pollWake:
			timer.Stop()
		}
		e.PollOnce(ctx)
	}
}

// PollOnce runs one poller pass: re-deliver what is past its lease (or
// withdraw its recipient, the attempts reaper); per partition, catch up the
// connections that fell behind a full push window and have room again, then
// scan forward from the scan position and deliver what the fast path
// missed; then apply the overload reaper. Exported for tests; the engine
// calls it on its own cadence and whenever an acknowledgement frees a
// window that has messages waiting.
func (e *Engine) PollOnce(ctx context.Context) {
	e.redeliver(ctx)
	for _, p := range e.partitions {
		e.catchUp(ctx, p)
		e.scan(ctx, p)
	}
	e.ReapOverloaded()
}

func (e *Engine) wakePoller() {
	select {
	case e.pollWake <- struct{}{}:
	default:
	}
}

// redeliver re-sends the entries whose lease expired, from each
// connection's own window, or withdraws a connection whose entry was sent
// max-delivery-attempts times (the attempts reaper, close 4002). An entry
// the index holds but the window does not was acknowledged (the index missed
// the ack, or a re-send crossed it): it is dropped from the index.
func (e *Engine) redeliver(ctx context.Context) {
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
func (e *Engine) offerLocked(m *Member, r *outbox.Row, p int32, window int, now time.Time, it func() item) (send bool, full bool) {
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
		m.fallBehindLocked(p, r.Message.SentAt, now, window)
		return false, true
	case slotHeld:
		m.horizon[p] = r.Pos
		return false, false
	}
	m.horizon[p] = r.Pos
	m.noteWindowLocked(now, window)
	return true, false
}

func (e *Engine) scan(ctx context.Context, p int32) {
	t := e.tuning()
	pos := e.scanPos[p]
	for round := 0; round < maxScanRounds; round++ {
		after := pos.Load()
		if next := e.fastPath.cover.pass(p, after); next > after {
			// The fast path delivered these commits whole (cover.go).
			after = next
			pos.Store(after)
			e.pruneAhead(p, after)
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
		byMember := map[*Member][]item{}
		frames := map[string][]byte{}
		var ms []*Member
		for i := range rows {
			r := &rows[i]
			mk := func() item { return e.rowItem(r, p, frames) }
			ms = e.reg.appendOfUser(ms[:0], r.Recipient)
			for _, m := range ms {
				if r.Recipient == r.Message.SenderID && m.client.Device == r.Message.SenderDevice {
					continue
				}
				m.mu.Lock()
				if r.Pos <= m.horizon[p] || m.isBehind(p) {
					m.mu.Unlock() // examined, or left to the catch-up
					continue
				}
				send, full := e.offerLocked(m, r, p, t.MaxPending, now, mk)
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
		e.pruneAhead(p, last)
		if len(rows) < t.PollBatch {
			break
		}
	}
	e.hold(ctx, p)
}

// rowItem builds the item of an outbox row, sharing one encoded frame per
// message within a pass.
func (e *Engine) rowItem(r *outbox.Row, p int32, frames map[string][]byte) item {
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
func (e *Engine) catchUp(ctx context.Context, p int32) {
	t := e.tuning()
	upto := e.scanPos[p].Load()
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
			mk := func() item { return e.rowItem(r, p, frames) }
			for _, m := range byUser[r.Recipient] {
				if !open[m] || (r.Recipient == r.Message.SenderID && m.client.Device == r.Message.SenderDevice) {
					continue
				}
				m.mu.Lock()
				if !m.isBehind(p) || r.Pos <= m.horizon[p] {
					m.mu.Unlock()
					continue
				}
				send, full := e.offerLocked(m, r, p, t.MaxPending, now, mk)
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

// pruneAhead drops fast-path marks at or below the scan position: the
// poller has passed them (a mark whose row was acknowledged and deleted
// before the scan reached it would otherwise stay forever), and raises the
// horizon of every member that is not behind in p to the scan position.
func (e *Engine) pruneAhead(p int32, upto int64) {
	ms := e.reg.all()
	for _, m := range ms {
		m.mu.Lock()
		lim := upto
		if m.isBehind(p) {
			lim = m.horizon[p] // its catch-up passes the rest
		}
		if len(m.ahead) > 0 {
			for k := range m.ahead {
				if k.p == p && k.pos <= lim {
					delete(m.ahead, k)
				}
			}
		}
		if !m.isBehind(p) && m.horizon[p] < upto && m.horizon[p] != maxPos {
			m.horizon[p] = upto
		}
		if at, ok := m.shed[p]; ok && at <= m.horizon[p] {
			delete(m.shed, p)
		}
		m.mu.Unlock()
	}
}

// holdPos is where the poller holds partition p: the first position it has
// not examined, or lower, the first row a member that fell behind has not
// been offered yet. GC never deletes a row live delivery still owes a
// connected client.
func (e *Engine) holdPos(p int32) int64 {
	pos := e.scanPos[p].Load() + 1
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
func (e *Engine) hold(ctx context.Context, p int32) {
	cctx, cancel := context.WithTimeout(ctx, e.cfg.StoreTimeout)
	defer cancel()
	e.idxMu.RLock()
	err := e.idx.Hold(cctx, e.cfg.Holder, p, e.holdPos(p), e.cfg.HoldTTL)
	e.idxMu.RUnlock()
	if err != nil {
		e.logger.Warn("poller: refresh hold", "partition", p, "err", err)
	}
}
