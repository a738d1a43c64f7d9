package server

import (
	"context"
	"testing"
	"time"
)

// The outbound queue keeps answerReserve slots for answers, and the
// reader's wait for room ends when the writer takes a frame (a signal, not
// a poll), when the session closes, or at its deadline.
func TestOutQueue(t *testing.T) {
	q := newOutQueue(2*answerReserve, 0)
	for i := 0; i < answerReserve; i++ {
		if !q.pushMessage([]byte("m")) {
			t.Fatalf("message %d refused below the limit", i)
		}
	}
	if q.pushMessage([]byte("m")) {
		t.Fatal("a message frame took a slot kept for answers")
	}
	if !q.pushAnswer([]byte("a")) {
		t.Fatal("an answer was refused with answer slots free")
	}
	closing := make(chan struct{})
	ctx := context.Background()

	// No room and nobody takes: false at the deadline.
	start := time.Now()
	if q.awaitRoom(ctx, closing, start.Add(50*time.Millisecond)) {
		t.Fatal("awaitRoom reported room in a full queue")
	}
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("awaitRoom gave up after %v, before its deadline", d)
	}

	// The writer takes two frames (the answer, then a message): the waiter
	// wakes with room, long before its deadline.
	got := make(chan bool)
	go func() { got <- q.awaitRoom(ctx, closing, time.Now().Add(time.Minute)) }()
	for !q.waiting.Load() {
		time.Sleep(time.Millisecond)
	}
	<-q.ready() // one signal for what was pushed: the writer takes all of it
	for i := 0; i < 2; i++ {
		if _, ok := q.pop(); !ok {
			t.Fatal("a queued frame was not there to take")
		}
	}
	select {
	case ok := <-got:
		if !ok {
			t.Fatal("awaitRoom reported no room after the writer took frames")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("awaitRoom did not wake when the writer took frames")
	}

	// Full again; the session closes: false at once.
	if !q.pushMessage([]byte("m")) || q.pushMessage([]byte("m")) {
		t.Fatal("the queue should take exactly one message back to its limit")
	}
	go func() { got <- q.awaitRoom(ctx, closing, time.Now().Add(time.Minute)) }()
	close(closing)
	select {
	case ok := <-got:
		if ok {
			t.Fatal("awaitRoom reported room on a closing session")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("awaitRoom did not return when the session closed")
	}
}
