package server

import (
	"context"
	"errors"
	"slices"
	"sync"
	"time"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/protocol"
	redisidx "github.com/tetra-messenger/tetra/workload/waterline/redis"
)

// Typing (PROTOCOL.md §7.4): ephemeral, never stored. A client's
// {"type":"typing","chatId":...} is forwarded as
// {"type":"typing","chatId":...,"userId":...} to the connections of the
// chat's other members, on this process and, through the engine's fleet
// broadcast (one Redis PUBLISH), on every other; at most one per (user,
// chat) every protocol.TypingInterval in the whole deployment: this
// process's gate drops the rest before any lookup, and with the Redis
// index a frame it lets through is forwarded only if no process forwarded
// one of (user, chat) within the interval (redis.Index.TypingGate, one
// SET NX PX), so a user typing on two devices connected to two processes
// gets one frame through per interval, not one per process. When Redis
// does not answer, the frame is forwarded on this process's gate alone
// (best effort: the broadcast to the others fails anyway). A chat the caller is not a member of gets an error frame
// (not_found for no such chat, forbidden otherwise); the verdict is kept
// for the interval too, so a client repeating it costs no store read.
//
// Cost: a dropped frame is a decode and one map probe under a mutex; a
// forwarded one adds a member-cache read (the chat cache, a store read
// every 5 s per chat at most), one encoded frame shared by every
// receiver, and one PUBLISH with a shared index. 100 members typing at
// once in one group forward at most 50 frames a second, each queued on
// the other 99 members' connections, gathered for typingWindow so that a
// receiver writes a moment's frames at once (typingBatch; see
// BenchmarkTypingFanout for how to measure what that adds to a message
// load).

// typingGate remembers, per (user, chat), when a typing frame was last
// forwarded or refused. The zero value is ready.
type typingGate struct {
	mu    sync.Mutex
	last  map[typingKey]typingMark
	swept time.Time
}

type typingKey struct{ user, chat string }

type typingMark struct {
	at   time.Time
	code string // the error code the frame got, "" when it was forwarded
	msg  string
}

// admit reports whether a typing frame of (user, chat) at now may be
// looked at: false, with the last verdict, inside the interval.
func (g *typingGate) admit(user, chat string, now time.Time) (ok bool, last typingMark) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.last == nil {
		g.last = map[typingKey]typingMark{}
	}
	k := typingKey{user, chat}
	if m, seen := g.last[k]; seen && now.Sub(m.at) < protocol.TypingInterval {
		return false, m
	}
	g.last[k] = typingMark{at: now}
	if now.Sub(g.swept) > protocol.TypingInterval {
		// Marks older than the interval decide nothing: drop them, so the
		// map holds at most the pairs of the last interval.
		g.swept = now
		for k, m := range g.last {
			if now.Sub(m.at) >= protocol.TypingInterval {
				delete(g.last, k)
			}
		}
	}
	return true, typingMark{}
}

// refuse records that (user, chat)'s frame admitted at at was refused.
func (g *typingGate) refuse(user, chat string, at time.Time, code, msg string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.last[typingKey{user, chat}] = typingMark{at: at, code: code, msg: msg}
}

// handleTyping forwards or drops a typing frame (see above).
func (c *session) handleTyping(ctx context.Context, ty *protocol.Typing) {
	s := c.srv
	now := time.Now()
	ok, last := s.typing.admit(c.user, ty.ChatID, now)
	if !ok {
		if last.code != "" {
			c.sendError("", last.code, last.msg)
		}
		return
	}
	lctx, cancel := context.WithTimeout(ctx, s.storeTimeout())
	members, err := s.chats.members(lctx, ty.ChatID)
	cancel()
	code, msg := "", ""
	switch {
	case errors.Is(err, history.ErrNotFound):
		code, msg = protocol.CodeNotFound, "typing: no such chat"
	case err != nil:
		// Best effort: not forwarded, nothing remembered.
		c.sendError("", protocol.CodeOverloaded, "typing: not forwarded: the store is unavailable")
		return
	case !slices.Contains(members, c.user):
		code, msg = protocol.CodeForbidden, "typing: not a member of this chat"
	}
	if code != "" {
		s.typing.refuse(c.user, ty.ChatID, now, code, msg)
		c.sendError("", code, msg)
		return
	}
	others := make([]string, 0, len(members)-1)
	for _, m := range members {
		if m != c.user {
			others = append(others, m)
		}
	}
	if len(others) == 0 {
		return
	}
	if ri, ok := s.index.(*redisidx.Index); ok {
		gctx, cancel := context.WithTimeout(ctx, s.storeTimeout())
		first, err := ri.TypingGate(gctx, c.user, ty.ChatID, protocol.TypingInterval)
		cancel()
		if err == nil && !first {
			return // another process forwarded one within the interval
		}
	}
	frame := protocol.Encode(protocol.Typing{Type: protocol.TypeTyping, ChatID: ty.ChatID, UserID: c.user})
	s.typingOut.add(ty.ChatID, others, frame)
	s.metrics.TypingForwarded()
}

// typingWindow is how long forwarded typing frames gather before they
// leave together (typingBatch). Receivers show "typing" for 5 s after a
// frame (PROTOCOL.md §7.4), so a tenth of a second late changes nothing a
// user sees.
const typingWindow = 100 * time.Millisecond

// typingBatch gathers the typing frames this process forwards during
// typingWindow and broadcasts them together, a chat's frames one after the
// other, so a receiver's connection finds them queued at once and writes
// them in one write(2) (cork.go) instead of one each. With 100 members
// typing in one group, each of the others got some 34 frames a second, a
// system call and a writer wake-up apiece: 8 % more server CPU on a load
// of 1,000 msg/s, where the target is 5 % (docs/benchmarks.md, "Typing and
// presence"). The zero value is not usable; see newTypingBatch.
type typingBatch struct {
	window time.Duration
	send   func(users []string, frame []byte)

	mu      sync.Mutex
	pending []typingOut // in arrival order
	armed   bool
}

type typingOut struct {
	chat   string
	others []string
	frame  []byte
}

func newTypingBatch(window time.Duration, send func(users []string, frame []byte)) *typingBatch {
	return &typingBatch{window: window, send: send}
}

// add queues frame for others (the chat's members but its typist); the
// batch leaves at most window later.
func (b *typingBatch) add(chat string, others []string, frame []byte) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.pending = append(b.pending, typingOut{chat, others, frame})
	if !b.armed {
		b.armed = true
		time.AfterFunc(b.window, b.flush)
	}
}

// flush broadcasts what gathered, grouped by chat (in order of each
// chat's first frame, and each chat's frames in arrival order).
func (b *typingBatch) flush() {
	b.mu.Lock()
	out := b.pending
	b.pending, b.armed = nil, false
	b.mu.Unlock()
	first := make(map[string]int, len(out))
	for i, o := range out {
		if _, ok := first[o.chat]; !ok {
			first[o.chat] = i
		}
	}
	slices.SortStableFunc(out, func(x, y typingOut) int { return first[x.chat] - first[y.chat] })
	for _, o := range out {
		b.send(o.others, o.frame)
	}
}
