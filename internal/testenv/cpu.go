package testenv

import (
	"syscall"
	"testing"
	"time"
)

// ProcessCPU is the CPU time (user + system, all threads) this process has
// used so far, from getrusage(2).
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// CPUPer starts counting the process's CPU time for b; the returned func,
// called after the timed loop with the number of units done (messages,
// rows), reports "cpu-µs/<unit>": CPU time, not wall time, per unit, so a
// benchmark that waits on fsync still shows what each unit costs in CPU.
// Everything the process runs in between counts (the server half of an
// end-to-end benchmark included).
func CPUPer(b *testing.B, unit string) func(n int) {
	start := ProcessCPU()
	return func(n int) {
		if n > 0 {
			b.ReportMetric(float64((ProcessCPU()-start).Microseconds())/float64(n), "cpu-µs/"+unit)
		}
	}
}
