//go:build !linux

package serveproc

import "os/exec"

// setParentDeathSignal is Linux only; elsewhere a child outlives a parent
// that dies without stopping it.
func setParentDeathSignal(*exec.Cmd) {}
