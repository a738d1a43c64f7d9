package loadgen

import (
	"context"
	"sync"
	"time"
)

// sendWorker runs one sender's sends. A send goes to the sender's own
// goroutine when that one is idle, which is almost always at a member's
// rate (about one send a second), and to a goroutine of its own only while
// it is busy: the rate stays open-loop (a slow answer never holds back the
// next send), without starting a goroutine, and growing its stack, for
// every send.
type sendWorker struct {
	do   func(corr string)
	jobs chan sendJob
}

type sendJob struct {
	corr string
	done func()
}

func startSendWorker(do func(corr string)) *sendWorker {
	w := &sendWorker{do: do, jobs: make(chan sendJob)}
	go func() {
		for j := range w.jobs {
			w.do(j.corr)
			j.done()
		}
	}()
	return w
}

// send runs do(corr) and then done, on the worker when it is idle, else on
// a goroutine of its own; it does not wait.
func (w *sendWorker) send(corr string, done func()) {
	select {
	case w.jobs <- sendJob{corr: corr, done: done}:
	default:
		go func() {
			w.do(corr)
			done()
		}()
	}
}

// stop ends the worker once its current send is done; sends already
// handed over finish.
func (w *sendWorker) stop() { close(w.jobs) }

// sendDeadlines hands out the contexts the sends give up with: a send
// made at t retries until the end of t's second plus after (the run's
// duration and drain), and the sends of one second share one context,
// instead of a context with a timer, registered with the run's, per send.
type sendDeadlines struct {
	parent context.Context
	after  time.Duration

	mu      sync.Mutex
	sec     int64 // the Unix second of cur
	cur     context.Context
	cancels []context.CancelFunc
}

// at returns the context of a send made at now.
func (d *sendDeadlines) at(now time.Time) context.Context {
	s := now.Unix()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.cur == nil || s != d.sec {
		ctx, cancel := context.WithDeadline(d.parent, time.Unix(s+1, 0).Add(d.after))
		d.sec, d.cur = s, ctx
		d.cancels = append(d.cancels, cancel)
	}
	return d.cur
}

// stop releases every context (once the sends are over).
func (d *sendDeadlines) stop() {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, cancel := range d.cancels {
		cancel()
	}
	d.cancels, d.cur = nil, nil
}
