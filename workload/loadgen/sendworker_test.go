package loadgen

import (
	"context"
	"sync"
	"testing"
	"time"
)

// A send never waits for an earlier one: while the worker is busy the next
// send runs on a goroutine of its own (the rate stays open-loop).
func TestSendWorkerNeverHoldsASendBack(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	started := make(chan string, 3)
	w := startSendWorker(func(corr string) {
		started <- corr
		if corr == "a" {
			<-release // an answer that takes long
		}
	})
	defer w.stop()
	var done sync.WaitGroup
	done.Add(3)
	w.send("a", done.Done)
	if got := <-started; got != "a" {
		t.Fatalf("started %q", got)
	}
	w.send("b", done.Done)
	w.send("c", done.Done)
	for range 2 {
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("a send waited behind a busy one")
		}
	}
	close(release)
	done.Wait()
}

// A send gives up at the end of its second plus the run's duration and
// drain; the sends of one second share one context.
func TestSendDeadlines(t *testing.T) {
	t.Parallel()
	parent, cancelParent := context.WithCancel(context.Background())
	defer cancelParent()
	d := &sendDeadlines{parent: parent, after: 50 * time.Second}
	t0 := time.Unix(1000, 200_000_000)
	a, b, c := d.at(t0), d.at(t0.Add(700*time.Millisecond)), d.at(t0.Add(800*time.Millisecond))
	if a != b || b == c {
		t.Fatal("want one context per second")
	}
	if dl, ok := a.Deadline(); !ok || !dl.Equal(time.Unix(1001, 0).Add(50*time.Second)) {
		t.Fatalf("deadline %v", dl)
	}
	cancelParent()
	<-c.Done() // the run's end reaches every send
	d.stop()
	if a.Err() == nil {
		t.Fatal("stop left a context running")
	}
}
