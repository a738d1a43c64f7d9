package main

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"strconv"

	"github.com/KimMachineGun/automemlimit/memlimit"
)

// serveGCPercent is the server's GOGC unless the environment sets GOGC or
// GOMEMLIMIT. Most of what the server allocates lives for one message
// (frames, commit arguments, the PostgreSQL driver's encoded batches)
// while what it keeps is small (about 80 MB at 4,000 msg/s on
// PostgreSQL + Redis), so the default GOGC of 100 collects very often. On
// 2 cores Intel Xeon, 600 clients in pairs at 4,000 msg/s
// (hack/peerbench-ab.sh, 2 runs each, docs/benchmarks.md): PostgreSQL +
// Redis server CPU 8.39/8.54 -> 7.74/8.25 s per 20 s, embedded within
// noise; peak RSS 81 -> 105 MB there, and with 10,000 connected clients
// 456 -> 500 MB.
const serveGCPercent = 200

// defaultGC sets GOGC to percent when neither GOGC nor GOMEMLIMIT is set
// in the environment (either means someone chose how this process
// collects). It reports whether it changed anything.
func defaultGC(percent int) bool {
	if os.Getenv("GOGC") != "" || os.Getenv("GOMEMLIMIT") != "" {
		return false
	}
	debug.SetGCPercent(percent)
	return true
}

// serveGC is the server's garbage-collector policy: GOGC serveGCPercent
// (defaultGC) and, when the process runs in a cgroup with a memory limit
// (a container with resources.limits.memory; the operator sets 1Gi by
// default) and GOMEMLIMIT is not set, a soft memory limit of 90 % of it
// (automemlimit; AUTOMEMLIMIT=off turns it off, AUTOMEMLIMIT=0.8 changes
// the share), so the larger GOGC never takes the heap to the kernel's
// limit: near it the collector runs as often as it must. It logs what it
// set. An AUTOMEMLIMIT that is neither "off" nor a share in (0, 1] is an
// error and changes nothing (set but empty counts as unset, as for GOGC); a cgroup that cannot be read is logged and
// leaves the limit off.
func serveGC(log *slog.Logger) error {
	auto := os.Getenv("AUTOMEMLIMIT")
	switch {
	case auto == "":
		os.Unsetenv("AUTOMEMLIMIT") // set but empty: unset, as an empty GOGC is
	case auto != "off":
		if r, err := strconv.ParseFloat(auto, 64); err != nil || !(r > 0 && r <= 1) {
			return fmt.Errorf("AUTOMEMLIMIT %q: want off or a share of the memory limit in (0, 1], such as 0.9", auto)
		}
	}
	gogc := "GOGC or GOMEMLIMIT from the environment"
	if defaultGC(serveGCPercent) {
		gogc = strconv.Itoa(serveGCPercent)
	}
	attrs := []any{"gogc", gogc}
	limit, err := memlimit.Set(memlimit.WithProvider(memlimit.FromCgroup), memlimit.WithLogger(slog.New(slog.DiscardHandler)))
	switch {
	case err != nil:
		attrs = append(attrs, "memory_limit_err", err.Error())
	case auto == "off":
		attrs = append(attrs, "memory_limit", "off (AUTOMEMLIMIT=off)")
	case limit > 0 && limit < math.MaxInt64:
		attrs = append(attrs, "memory_limit_bytes", limit)
	}
	log.Info("garbage collector", attrs...)
	return nil
}
