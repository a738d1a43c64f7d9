package delivery

import (
	"context"
	"fmt"
	"time"

	"github.com/tetra-messenger/tetra/workload/protocol"
	"github.com/tetra-messenger/tetra/workload/waterline"
)

// maxScanRounds bounds the batches one poll pass reads per partition, so a
// large backlog is worked through over several passes without starving
// re-deliveries.
const maxScanRounds = 8

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
// withdraw its recipient, the attempts reaper), then scan every partition
// forward from the scan position and deliver what the fast path missed.
// Exported for tests; the engine calls it on its own cadence.
func (e *Engine) PollOnce(ctx context.Context) {
	e.redeliver(ctx)
	for _, p := range e.partitions {
		e.scan(ctx, p)
	}
	e.ReapOverloaded()
}

// ReapOverloaded applies the overload reaper to every connection once: a
// connection whose pending count is still above max-pending at the poller's
// tick is withdrawn (close 4003).
func (e *Engine) ReapOverloaded() {
	t := e.tuning()
	now := e.now()
	e.mu.RLock()
	var over []*Member
	for _, m := range e.byID {
		if OverloadReaper(t, int(m.pending.Load()), now.Sub(m.connectedAt)) {
			over = append(over, m)
		}
	}
	e.mu.RUnlock()
	for _, m := range over {
		e.withdraw(m, protocol.ClosePending, fmt.Sprintf("withdrawn: %d unacknowledged messages exceed max-pending %d", m.pending.Load(), t.MaxPending), ReasonOverload)
	}
}

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
		m := e.member(id)
		if m == nil {
			// The index holds a client this process no longer has.
			e.idxMu.RLock()
			_, _ = e.idx.Withdraw(ctx, id)
			e.idxMu.RUnlock()
			continue
		}
		age := e.now().Sub(m.connectedAt)
		var items []item
		withdraw := false
		m.mu.Lock()
		for _, d := range byClient[id] {
			if AttemptsReaper(t, d.Attempts, age) {
				withdraw = true
				break
			}
			frame, ok := m.frames[d.MessageID]
			if !ok {
				// Cannot happen while frames follow the pending set;
				// withdrawing is the safe answer (history recovers it).
				withdraw = true
				break
			}
			items = append(items, item{entry: d.Entry, frame: frame})
		}
		m.mu.Unlock()
		if withdraw {
			e.withdraw(m, protocol.CloseAttempts, fmt.Sprintf("withdrawn: a message went unacknowledged after %d delivery attempts", t.MaxDeliveryAttempts), ReasonAttempts)
			continue
		}
		n := e.send(m, items)
		e.redel.Add(int64(n))
	}
}

func (e *Engine) scan(ctx context.Context, p int32) {
	t := e.tuning()
	pos := e.scanPos[p]
	for round := 0; round < maxScanRounds; round++ {
		after := pos.Load()
		cctx, cancel := context.WithTimeout(ctx, e.cfg.StoreTimeout)
		rows, err := e.log.Scan(cctx, p, after, t.PollBatch)
		cancel()
		if err != nil {
			e.logger.Warn("poller: scan the outbox", "partition", p, "err", err)
			break
		}
		if len(rows) == 0 {
			break
		}
		byMember := map[*Member][]item{}
		frames := map[string][]byte{}
		for i := range rows {
			r := &rows[i]
			for _, m := range e.membersOf(r.Recipient) {
				if r.Recipient == r.Message.SenderID && m.client.Device == r.Message.SenderDevice {
					continue
				}
				k := pkey{p, r.Pos}
				m.mu.Lock()
				if r.Pos <= m.horizon[p] {
					m.mu.Unlock()
					continue
				}
				m.horizon[p] = r.Pos
				if _, sent := m.ahead[k]; sent {
					delete(m.ahead, k)
					m.mu.Unlock()
					continue
				}
				m.mu.Unlock()
				f, ok := frames[r.Message.ID]
				if !ok {
					f = MessageFrame(r.Message)
					frames[r.Message.ID] = f
				}
				byMember[m] = append(byMember[m], item{entry: waterline.Entry{MessageID: r.Message.ID, Partition: p, Pos: r.Pos}, frame: f, sentAt: r.Message.SentAt})
			}
		}
		for m, items := range byMember {
			e.polled.Add(int64(e.send(m, items)))
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

// pruneAhead drops fast-path marks at or below the scan position: the
// poller has passed them (a mark whose row was acknowledged and deleted
// before the scan reached it would otherwise stay forever).
func (e *Engine) pruneAhead(p int32, upto int64) {
	ms := e.members()
	for _, m := range ms {
		m.mu.Lock()
		if len(m.ahead) > 0 {
			for k := range m.ahead {
				if k.p == p && k.pos <= upto {
					delete(m.ahead, k)
				}
			}
		}
		if m.horizon[p] < upto && m.horizon[p] != maxPos {
			m.horizon[p] = upto
		}
		if at, ok := m.shed[p]; ok && at <= m.horizon[p] {
			delete(m.shed, p)
		}
		m.mu.Unlock()
	}
}

// hold pins the partition at the first position the poller has not
// examined, so GC never deletes a row before live delivery saw it.
func (e *Engine) hold(ctx context.Context, p int32) {
	cctx, cancel := context.WithTimeout(ctx, e.cfg.StoreTimeout)
	defer cancel()
	e.idxMu.RLock()
	err := e.idx.Hold(cctx, e.cfg.Holder, p, e.scanPos[p].Load()+1, e.cfg.HoldTTL)
	e.idxMu.RUnlock()
	if err != nil {
		e.logger.Warn("poller: refresh hold", "partition", p, "err", err)
	}
}
