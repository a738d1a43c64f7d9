//go:build unix

package loadgen

import (
	"syscall"
	"time"
)

// selfCPU is the CPU time this process has used so far, all threads, from
// getrusage(2); ok is false when it is unknown.
func selfCPU() (c cpuTime, ok bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return c, false
	}
	return cpuTime{User: time.Duration(ru.Utime.Nano()), Sys: time.Duration(ru.Stime.Nano())}, true
}
