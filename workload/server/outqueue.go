package server

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// answerReserve is the part of a session's outbound queue that message
// frames leave free for answers and control frames, so a send's answer
// never waits behind a queue full of messages. Server.Config.OutboundQueue
// is at least twice it.
const answerReserve = 64

// outQueue is a session's outbound queue: a bounded FIFO of encoded frames
// that the session's writer drains onto the socket. Message frames fill it
// up to answerReserve short of its capacity (pushMessage); answers and
// control frames may use all of it (pushAnswer). The reader waits for room
// below the message limit before it handles another frame (awaitRoom),
// woken by the writer as it takes frames rather than by polling. Every
// method is safe for concurrent use; one goroutine (the writer) takes.
type outQueue struct {
	mu     sync.Mutex
	q      [][]byte // q[head:] are the queued frames, oldest first
	head   int
	max    int // the most frames it holds
	limit  int // the most frames pushMessage fills it to
	signal chan struct{}

	// waiting is set while awaitRoom waits; the writer then signals room
	// after each frame it takes (a token in a one-slot channel, so a
	// signal is never lost and never blocks the writer).
	waiting atomic.Bool
	room    chan struct{}
}

// newOutQueue makes the queue of a session allowed credits sends in
// flight. capacity >= 2*answerReserve (Config.validate checks it): message
// frames fill it to capacity - answerReserve, and it has credits more
// slots, so the answers of every send in flight fit beside a full share of
// messages and the control reserve however many a group commit answers at
// once (with 512 credits and a fixed reserve of 64, a burst of 300 sends
// overflowed it and closed the reading client with 1008); answerReserve
// stays for control frames. Its slots are taken as frames come and given
// back when it empties: a channel of that capacity was 4.8 KB per
// connection, a third of the live heap of 10,000 idle ones (issue 22).
func newOutQueue(capacity, credits int) *outQueue {
	return &outQueue{
		max:    capacity + max(0, credits),
		limit:  capacity - answerReserve,
		signal: make(chan struct{}, 1),
		room:   make(chan struct{}, 1),
	}
}

// maxSessionCredits bounds the sends in flight one connection is granted,
// whatever maxInFlightSends says: each credit is a slot of the session's
// outbound queue, allocated when it connects (a million credits would be
// 24 MB per connection). hello advertises the bound when it applies.
const maxSessionCredits = 4096

// pushMessage queues a message frame unless the queue holds limit frames
// already; false means it was not queued (delivery re-sends it after its
// lease).
func (q *outQueue) pushMessage(f []byte) bool { return q.push(f, q.limit) }

// pushAnswer queues an answer or a control frame unless the queue is full.
func (q *outQueue) pushAnswer(f []byte) bool { return q.push(f, q.max) }

func (q *outQueue) push(f []byte, bound int) bool {
	q.mu.Lock()
	n := len(q.q) - q.head
	if n >= bound {
		q.mu.Unlock()
		return false
	}
	if q.head > 0 && len(q.q) == cap(q.q) {
		copy(q.q, q.q[q.head:]) // slide the queued frames down
		clear(q.q[n:])
		q.q, q.head = q.q[:n], 0
	}
	q.q = append(q.q, f)
	q.mu.Unlock()
	select {
	case q.signal <- struct{}{}:
	default:
	}
	return true
}

// ready is signalled after every push: the writer, woken by it, takes
// frames with pop until there are none.
func (q *outQueue) ready() <-chan struct{} { return q.signal }

// pop takes the oldest queued frame (ok false when there is none) and
// tells a reader waiting for room.
func (q *outQueue) pop() (f []byte, ok bool) {
	q.mu.Lock()
	if q.head == len(q.q) {
		q.mu.Unlock()
		return nil, false
	}
	f = q.q[q.head]
	q.q[q.head] = nil
	q.head++
	if q.head == len(q.q) {
		if cap(q.q) > 64 {
			q.q = nil // a burst is over: give its slots back
		} else {
			q.q = q.q[:0]
		}
		q.head = 0
	}
	q.mu.Unlock()
	if q.waiting.Load() {
		select {
		case q.room <- struct{}{}:
		default:
		}
	}
	return f, true
}

// len is how many frames are queued.
func (q *outQueue) len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.q) - q.head
}

// discard drops every queued frame; only before the writer starts (a
// connection refused before hello, PROTOCOL.md §7.8).
func (q *outQueue) discard() {
	q.mu.Lock()
	q.q, q.head = nil, 0
	q.mu.Unlock()
}

// awaitRoom returns true once the queue holds fewer than limit frames, at
// once when it does already. It returns false when ctx ends, closing is
// closed, or the queue is still at the limit at deadline.
func (q *outQueue) awaitRoom(ctx context.Context, closing <-chan struct{}, deadline time.Time) bool {
	if q.len() < q.limit {
		return true
	}
	q.waiting.Store(true)
	defer q.waiting.Store(false)
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	// Checked after waiting is set: a frame taken before that shows here,
	// one taken after it leaves a token in room.
	for q.len() >= q.limit {
		select {
		case <-q.room:
		case <-timer.C:
			return q.len() < q.limit
		case <-closing:
			return false
		case <-ctx.Done():
			return false
		}
	}
	return true
}
