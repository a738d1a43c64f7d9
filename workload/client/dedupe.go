package client

import (
	"maps"
	"slices"
	"sync"

	"github.com/tetra-messenger/tetra/workload/protocol"
)

// dedupe remembers which messageIds were already reported and, per chat,
// the cursor for history paging. It is the only state the client keeps
// about messages; see the package documentation for the argument.
//
// Two structures decide "seen":
//
//   - recent: the last window ids seen (live, history or own sends), a ring
//     plus a set. It catches live redeliveries, which come soon after the
//     first delivery because every frame is acknowledged.
//   - chatState.unsynced: per chat, every id seen live (or sent) that no
//     history page has covered yet. History pages from the cursor return
//     exactly these ids again, so this set makes the overlap between live
//     delivery and a resync exact, however long the client was away.
//
// unsynced is kept bounded by syncs: a history page removes the ids it
// returns, and a complete sync removes every id seen before it started
// (such an id was committed before the sync began, so it was either in the
// pages or at or below the starting cursor). When a chat accumulates
// maxUnsynced ids the client asks for a catch-up sync of that chat.
type dedupe struct {
	mu          sync.Mutex
	window      int
	maxUnsynced int // <0: no catch-up
	ring        []string
	next        int // next slot of ring to overwrite once it is full
	recent      map[string]struct{}
	chats       map[string]*chatState
	sending     map[string]*ownSend // correlationId -> sends of this client waiting for an answer
}

// ownSend is a send of this client still waiting for its answer. A history
// sync that finds the message (the answer was lost with a connection) hands
// it over instead of reporting it to OnMessage.
type ownSend struct {
	waiters int
	found   chan protocol.Message // capacity 1
}

type chatState struct {
	cursor   string            // last messageId processed from history, in commit order
	unsynced map[string]uint64 // id -> epoch in which it was seen; nil when empty
	epoch    uint64            // bumped when a sync starts
	catchUp  bool              // a catch-up sync was requested and has not finished
}

func newDedupe(window, maxUnsynced int, cursors map[string]string) *dedupe {
	d := &dedupe{
		window:      window,
		maxUnsynced: maxUnsynced,
		recent:      make(map[string]struct{}),
		chats:       make(map[string]*chatState),
		sending:     make(map[string]*ownSend),
	}
	for chat, cur := range cursors {
		d.chats[chat] = &chatState{cursor: cur}
	}
	return d
}

func (d *dedupe) chat(id string) *chatState {
	cs := d.chats[id]
	if cs == nil {
		cs = &chatState{}
		d.chats[id] = cs
	}
	return cs
}

// remember adds id, which recent does not hold (the callers looked), to
// the recent ring, evicting the oldest id when full.
func (d *dedupe) remember(id string) {
	if len(d.ring) < d.window {
		d.ring = append(d.ring, id)
	} else {
		delete(d.recent, d.ring[d.next])
		d.ring[d.next] = id
		d.next = (d.next + 1) % d.window
	}
	d.recent[id] = struct{}{}
}

// seenLive records id as received live (or sent by this client) in chat.
// It reports whether the id is new, and whether the chat now needs a
// catch-up sync (reported once per request).
func (d *dedupe) seenLive(chat, id string) (isNew, catchUp bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	cs := d.chat(chat)
	if _, ok := d.recent[id]; ok {
		return false, false
	}
	if _, ok := cs.unsynced[id]; ok {
		d.remember(id)
		return false, false
	}
	d.remember(id)
	if cs.unsynced == nil {
		cs.unsynced = make(map[string]uint64)
	}
	cs.unsynced[id] = cs.epoch
	if d.maxUnsynced > 0 && len(cs.unsynced) >= d.maxUnsynced && !cs.catchUp {
		cs.catchUp = true
		return true, true
	}
	return true, false
}

// beginSync starts a history sync of chat: it returns the cursor to page
// from and the epoch to pass to endSync.
func (d *dedupe) beginSync(chat string) (since string, epoch uint64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	cs := d.chat(chat)
	epoch = cs.epoch
	cs.epoch++
	return cs.cursor, epoch
}

// seenHistory records id as returned by a history page of chat and reports
// whether it is new. The id is now at or below the chat's cursor.
func (d *dedupe) seenHistory(chat, id string) (isNew bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	cs := d.chat(chat)
	_, inRecent := d.recent[id]
	_, inUnsynced := cs.unsynced[id]
	if inUnsynced {
		delete(cs.unsynced, id)
		if len(cs.unsynced) == 0 {
			cs.unsynced = nil
		}
	}
	if !inRecent {
		d.remember(id)
	}
	return !inRecent && !inUnsynced
}

// advance moves chat's cursor to id, the last id of a history page.
func (d *dedupe) advance(chat, id string) {
	d.mu.Lock()
	d.chat(chat).cursor = id
	d.mu.Unlock()
}

// endSync ends the sync begun at epoch. When it reached the end of the
// chat's history (complete), every id seen before the sync began is at or
// below the cursor now and is forgotten (recent still holds the latest).
func (d *dedupe) endSync(chat string, epoch uint64, complete bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	cs := d.chat(chat)
	cs.catchUp = false
	if !complete {
		return
	}
	for id, e := range cs.unsynced {
		if e <= epoch {
			delete(cs.unsynced, id)
		}
	}
	if len(cs.unsynced) == 0 {
		cs.unsynced = nil
	}
}

// takeCatchUps returns the chats whose catch-up sync was requested.
func (d *dedupe) takeCatchUps() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for id, cs := range d.chats {
		if cs.catchUp {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// chatIDs returns every chat the client knows of, sorted.
func (d *dedupe) chatIDs() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Sorted(maps.Keys(d.chats))
}

// know registers chat so that it is synced after every (re)connect.
func (d *dedupe) know(chat string) {
	d.mu.Lock()
	d.chat(chat)
	d.mu.Unlock()
}

// knowAndSync registers chat and asks for a catch-up sync of it (the user
// was added to it: its history is the user's to read now).
func (d *dedupe) knowAndSync(chat string) {
	d.mu.Lock()
	d.chat(chat).catchUp = true
	d.mu.Unlock()
}

// forget drops chat's state (the user is no longer a member).
func (d *dedupe) forget(chat string) {
	d.mu.Lock()
	delete(d.chats, chat)
	d.mu.Unlock()
}

// cursors returns a copy of the non-empty per-chat cursors.
func (d *dedupe) cursors() map[string]string {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make(map[string]string, len(d.chats))
	for id, cs := range d.chats {
		if cs.cursor != "" {
			out[id] = cs.cursor
		}
	}
	return out
}

// sizes reports the ids held: in the recent ring and beyond the cursors.
func (d *dedupe) sizes() (recent, unsynced int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, cs := range d.chats {
		unsynced += len(cs.unsynced)
	}
	return len(d.recent), unsynced
}

// beginSend registers a send of this client under correlationID until
// endSend; the returned channel yields the message if a history sync finds
// it first.
func (d *dedupe) beginSend(correlationID string) <-chan protocol.Message {
	d.mu.Lock()
	defer d.mu.Unlock()
	os := d.sending[correlationID]
	if os == nil {
		os = &ownSend{found: make(chan protocol.Message, 1)}
		d.sending[correlationID] = os
	}
	os.waiters++
	return os.found
}

func (d *dedupe) endSend(correlationID string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if os := d.sending[correlationID]; os != nil {
		if os.waiters--; os.waiters == 0 {
			delete(d.sending, correlationID)
		}
	}
}

// foundOwn hands m, found by a history sync, to the send of this client
// waiting for it, if any, and reports whether there was one. m is then
// recorded as seen rather than reported.
func (d *dedupe) foundOwn(m protocol.Message) bool {
	d.mu.Lock()
	os := d.sending[m.CorrelationID]
	d.mu.Unlock()
	if os == nil {
		return false
	}
	select {
	case os.found <- m:
	default: // already handed over
	}
	return true
}
