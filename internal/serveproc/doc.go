// Package serveproc runs `tetra serve` as a child process and waits until
// it answers /healthz: the one copy of that start-and-wait used by `tetra
// loadgen` (its server processes) and by the cross-process tests
// (test/crash, test/fleet). A Proc can be started again after it exited
// (a restart on the same address), signalled (SIGTERM, SIGSTOP, SIGKILL)
// and waited for.
package serveproc
