package loadgen

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
