package delivery

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
)

// Membership changes (PROTOCOL.md §2 DELETE members). The store makes the
// guarantee: membership is read in the commit's transaction and a removal
// serializes with commits, so no message committed after a removal has an
// outbox row for the removed user (history.Store.RemoveMember). What the
// engine adds is "at once": rows written before the removal that are still
// on their way to the user's connections (queued on the fast path, waiting
// behind a full push window, or sent and not acknowledged) stop there.
// Exclude drops them from every connection of the user, on this process
// and on every other process of a fleet, and acknowledges the dropped
// ones in the index, so they stop pinning the user's waterline.

// controlPrefix starts a fleet broadcast that is not a frame for clients
// but a message between engines (frames are JSON objects and start with
// '{'). The index relays the payload unchanged.
const controlPrefix = "\x00delivery:"

// exclusion is the control message of Exclude.
type exclusion struct {
	User   string `json:"u"`
	Chat   string `json:"c"`
	Cutoff int64  `json:"s"`
}

// Exclude stops live delivery to user's connections of chatID's messages
// with Seq at or below cutoff (history.Store.RemoveMember's cutoff): what
// they hold sent and unacknowledged of that chat is dropped from their
// push windows and acknowledged in the index, and rows of it that the fast
// path, the poller or the catch-up meet later are passed by. It applies to
// this process's connections before it returns and is published to the
// other processes of a fleet first (one publish, within the engine's store
// timeout; an error is returned, the local part is done anyway).
// Connections that register later need nothing: rows at or below the
// outbox head when they connect are theirs to recover from history, where
// a removed user gets 403.
func (e *Engine) Exclude(ctx context.Context, user, chatID string, cutoff int64) error {
	var err error
	if e.link != nil {
		payload, _ := json.Marshal(exclusion{User: user, Chat: chatID, Cutoff: cutoff})
		cctx, cancel := context.WithTimeout(ctx, e.cfg.StoreTimeout)
		if perr := e.link.fleet.Broadcast(cctx, []string{user}, append([]byte(controlPrefix), payload...)); perr != nil {
			err = fmt.Errorf("delivery: publish an exclusion to the fleet: %w", perr)
		}
		cancel()
	}
	e.excludeHere(ctx, exclusion{User: user, Chat: chatID, Cutoff: cutoff})
	return err
}

// BroadcastNow is Broadcast with the publish to the other processes made
// before it returns (within the store timeout) instead of queued, so
// frames published by one caller arrive everywhere in the order of its
// calls, after its earlier Exclude calls. Used for chat events.
func (e *Engine) BroadcastNow(ctx context.Context, users []string, frame []byte) error {
	var err error
	if e.link != nil {
		cctx, cancel := context.WithTimeout(ctx, e.cfg.StoreTimeout)
		if perr := e.link.fleet.Broadcast(cctx, users, frame); perr != nil {
			err = fmt.Errorf("delivery: publish a broadcast to the fleet: %w", perr)
		}
		cancel()
	}
	e.broadcastHere(users, frame, nil)
	return err
}

// BroadcastFrom is Broadcast that skips the connection of (user, device)
// on this process: the sender of the frame (a read receipt is echoed to
// the reader's other devices, not back to the reading one). Another
// process has no connection of that device (one session per device).
func (e *Engine) BroadcastFrom(users []string, frame []byte, user, device string) {
	e.link.publishBroadcast(users, frame)
	e.broadcastHere(users, frame, e.reg.device(user, device))
}

// onControl handles a control message from another process; it reports
// whether frame was one.
func (e *Engine) onControl(frame []byte) bool {
	rest, ok := bytes.CutPrefix(frame, []byte(controlPrefix))
	if !ok {
		return false
	}
	var x exclusion
	if err := json.Unmarshal(rest, &x); err != nil {
		e.logger.Warn("fleet: unreadable control message", "err", err)
		return true
	}
	// Not on the subscriber goroutine: acknowledging talks to the index.
	e.wg.Go(func() {
		ctx, cancel := e.ctx()
		defer cancel()
		e.excludeHere(ctx, x)
	})
	return true
}

// excludeHere applies x to this process's connections of x.User.
func (e *Engine) excludeHere(ctx context.Context, x exclusion) {
	for _, m := range e.reg.ofUser(x.User) {
		var drop []string
		m.mu.Lock()
		if m.excluded == nil {
			m.excluded = map[string]int64{}
		}
		if cut, ok := m.excluded[x.Chat]; !ok || x.Cutoff > cut {
			m.excluded[x.Chat] = x.Cutoff
		}
		for id, o := range m.out {
			if o.chat == x.Chat && o.seq <= x.Cutoff {
				delete(m.out, id)
				drop = append(drop, id)
			}
		}
		waiting := m.waitingLocked(e.poller.floorOf)
		m.mu.Unlock()
		if len(drop) == 0 {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, e.cfg.StoreTimeout)
		e.idxMu.RLock()
		_, err := e.idx.Ack(cctx, m.client.ID, drop)
		e.idxMu.RUnlock()
		cancel()
		if err != nil {
			// The window is free already; the index drops the entries
			// when their lease ends (redeliver finds them acknowledged).
			e.logger.Debug("exclude: drop entries from the index", "conn", m.client.ID, "err", err)
		}
		if waiting {
			e.poller.wakeUp()
		}
	}
	if e.cfg.OnExcluded != nil {
		e.cfg.OnExcluded(x.Chat)
	}
}
