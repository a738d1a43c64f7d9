package loadgen

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// ledger is what the reconciliation knows: for every message id the run
// saw, whether its send was answered accepted (for which chat, by which
// member) and which members reported it (OnMessage, live or from
// history, or the final resync of a stuck client).
//
// It holds one record per message, not one set of ids per member: a
// delivery sets a bit, at the recipient's position in its chat, in the
// record of its message. A report the bits cannot state exactly (a member
// reporting a message under another chat than the record's) is kept in a
// set of (message, member) pairs of its own, so has answers exactly
// "did member i report id", whatever the server sent. The records are
// sharded by a hash of the id, each shard behind its own mutex.
type ledger struct {
	seed     maphash.Seed
	shards   [ledgerShards]ledgerShard
	accepted atomic.Int64 // records with an accepted send
}

const ledgerShards = 64

type ledgerShard struct {
	mu    sync.Mutex
	msgs  map[string]*msgRecord
	stray map[strayReport]struct{}
}

// msgRecord is one message of the run.
type msgRecord struct {
	// chat is the chat whose members' positions the bits index: the chat
	// of the first report or of the accepted answer, whichever came first.
	chat string
	got  uint64   // members 0..63 of chat that reported the message
	more []uint64 // members 64 and up, in words of 64

	accepted bool
	accChat  string // the sender's chat, once accepted
	sender   int    // the sender's member index, once accepted
}

// strayReport is a report the record's bits do not hold.
type strayReport struct {
	id     string
	member int
}

// accepted is a message whose send was answered accepted.
type accepted struct {
	id     string
	chat   string
	sender int
}

// newLedger returns an empty ledger sized for about msgs messages (a
// hint: it grows past it).
func newLedger(msgs int) *ledger {
	l := &ledger{seed: maphash.MakeSeed()}
	per := min(max(msgs, 0), 1<<22) / ledgerShards
	for i := range l.shards {
		l.shards[i].msgs = make(map[string]*msgRecord, per)
	}
	return l
}

func (l *ledger) shard(id string) *ledgerShard {
	return &l.shards[maphash.String(l.seed, id)%ledgerShards]
}

// record returns id's record, creating it for chat; sh.mu must be held.
func (sh *ledgerShard) record(id, chat string) *msgRecord {
	rec := sh.msgs[id]
	if rec == nil {
		rec = &msgRecord{chat: chat}
		sh.msgs[id] = rec
	}
	return rec
}

// bit returns the word and mask of position pos.
func (rec *msgRecord) bit(pos int) (*uint64, uint64) {
	if pos < 64 {
		return &rec.got, 1 << pos
	}
	w := pos/64 - 1
	for len(rec.more) <= w {
		rec.more = append(rec.more, 0)
	}
	return &rec.more[w], 1 << (pos % 64)
}

// has reports whether position pos reported the message.
func (rec *msgRecord) has(pos int) bool {
	if pos < 64 {
		return rec.got&(1<<pos) != 0
	}
	w := pos/64 - 1
	return w < len(rec.more) && rec.more[w]&(1<<(pos%64)) != 0
}

// report records that member m reported id, received under chat (the
// frame's chatId). It reports whether that is new.
func (l *ledger) report(id, chat string, m *member) bool {
	sh := l.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	rec := sh.record(id, chat)
	if chat == m.chat && chat == rec.chat {
		w, b := rec.bit(m.pos)
		isNew := *w&b == 0
		*w |= b
		return isNew
	}
	k := strayReport{id: id, member: m.idx}
	if _, ok := sh.stray[k]; ok {
		return false
	}
	if sh.stray == nil {
		sh.stray = map[strayReport]struct{}{}
	}
	sh.stray[k] = struct{}{}
	return true
}

// has reports whether member m reported id.
func (l *ledger) has(id string, m *member) bool {
	sh := l.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if rec := sh.msgs[id]; rec != nil && rec.chat == m.chat && rec.has(m.pos) {
		return true
	}
	_, ok := sh.stray[strayReport{id: id, member: m.idx}]
	return ok
}

// accept records that member sender's send to chat was answered accepted
// with id.
func (l *ledger) accept(id, chat string, sender int) {
	sh := l.shard(id)
	sh.mu.Lock()
	rec := sh.record(id, chat)
	first := !rec.accepted
	rec.accepted, rec.accChat, rec.sender = true, chat, sender
	sh.mu.Unlock()
	if first {
		l.accepted.Add(1)
	}
}

// acceptedMsg returns id's accepted send; ok is false when it has none.
func (l *ledger) acceptedMsg(id string) (a accepted, ok bool) {
	sh := l.shard(id)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	rec := sh.msgs[id]
	if rec == nil || !rec.accepted {
		return a, false
	}
	return accepted{id: id, chat: rec.accChat, sender: rec.sender}, true
}

// acceptedMsgs returns every accepted message (a copy).
func (l *ledger) acceptedMsgs() []accepted {
	out := make([]accepted, 0, l.accepted.Load())
	for i := range l.shards {
		sh := &l.shards[i]
		sh.mu.Lock()
		for id, rec := range sh.msgs {
			if rec.accepted {
				out = append(out, accepted{id: id, chat: rec.accChat, sender: rec.sender})
			}
		}
		sh.mu.Unlock()
	}
	return out
}
