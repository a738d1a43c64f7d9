package server

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// TestTypingFramesLeaveTogether: typing frames forwarded within the
// window are broadcast together once it ends, each chat's frames one after
// the other (so a receiver's writer finds them queued at once), none
// before; a frame after the flush starts the next batch.
func TestTypingFramesLeaveTogether(t *testing.T) {
	var mu sync.Mutex
	var sent []string
	var at []time.Time
	b := newTypingBatch(50*time.Millisecond, func(users []string, frame []byte) {
		mu.Lock()
		defer mu.Unlock()
		sent = append(sent, string(frame)+">"+users[0])
		at = append(at, time.Now())
	})
	start := time.Now()
	b.add("c1", []string{"bob"}, []byte("a@c1"))
	b.add("c2", []string{"dan"}, []byte("c@c2"))
	b.add("c1", []string{"amy"}, []byte("b@c1"))
	mu.Lock()
	early := len(sent)
	mu.Unlock()
	if early != 0 {
		t.Fatalf("%d frames left before the window ended", early)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		mu.Lock()
		n := len(sent)
		mu.Unlock()
		if n == 3 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	got, first := slices.Clone(sent), at
	mu.Unlock()
	if want := []string{"a@c1>bob", "b@c1>amy", "c@c2>dan"}; !slices.Equal(got, want) {
		t.Fatalf("sent %v, want %v (one batch, by chat, in order)", got, want)
	}
	if d := first[0].Sub(start); d < 50*time.Millisecond {
		t.Errorf("the batch left %v after the first frame, before the window", d)
	}
	b.add("c3", []string{"eve"}, []byte("d@c3"))
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	if len(sent) != 4 || sent[3] != "d@c3>eve" {
		t.Errorf("after the flush: sent %v, want the next frame in a batch of its own", sent)
	}
}
