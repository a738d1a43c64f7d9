package loadgen

import (
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
