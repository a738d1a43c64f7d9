package loadgen

import (
	"fmt"
	"runtime/pprof"
	"sync"
	"time"
)

// cpuTime is CPU time split into user and system time.
type cpuTime struct {
	User, Sys time.Duration
}

func (c cpuTime) total() time.Duration { return c.User + c.Sys }

func (c cpuTime) sub(o cpuTime) cpuTime { return cpuTime{User: c.User - o.User, Sys: c.Sys - o.Sys} }

// cpuMeter measures the load generator's own CPU between marks.
type cpuMeter struct {
	start cpuTime
	ok    bool
}

func startCPU() cpuMeter {
	c, ok := selfCPU()
	return cpuMeter{start: c, ok: ok}
}

// since returns the CPU used since the meter started; ok is false when it
// is unknown.
func (m cpuMeter) since() (cpuTime, bool) {
	if !m.ok {
		return cpuTime{}, false
	}
	c, ok := selfCPU()
	if !ok {
		return cpuTime{}, false
	}
	return c.sub(m.start), true
}

// loadgenCPULine renders the load generator's own CPU for Report.String;
// empty when it was not measured.
func (r *Report) loadgenCPULine() string {
	if r.LoadgenCPUWindow <= 0 {
		return ""
	}
	s := func(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }
	line := fmt.Sprintf("%s over sending and drain (%v: user %s + sys %s), %s whole run",
		s(r.LoadgenCPUWindow), r.LoadgenWindow.Round(100*time.Millisecond), s(r.LoadgenCPUWindowUser), s(r.LoadgenCPUWindowSys), s(r.LoadgenCPUTotal))
	if r.Frames > 0 {
		line += fmt.Sprintf("; %.1f µs per frame", float64(r.LoadgenCPUWindow.Microseconds())/float64(r.Frames))
	}
	if r.InProcess {
		line += " (the server runs in this process: its CPU is included, not separable)"
	}
	return line
}

// startProfile starts the CPU profile of Config.CPUProfile and returns
// the function that stops it (idempotent; a no-op without a profile or
// when another profile was already running).
func (r *run) startProfile() (stop func()) {
	if r.cfg.CPUProfile == nil {
		return func() {}
	}
	if err := pprof.StartCPUProfile(r.cfg.CPUProfile); err != nil {
		r.cfg.Logger.Warn("no CPU profile of the load generator", "err", err)
		return func() {}
	}
	var once sync.Once
	return func() { once.Do(pprof.StopCPUProfile) }
}
