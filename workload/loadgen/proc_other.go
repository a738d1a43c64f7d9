//go:build !linux

package loadgen

import "os/exec"

// setParentDeathSignal is Linux only; elsewhere the children are stopped
// by Run (at the end, on error and on interrupt) and nothing else.
func setParentDeathSignal(*exec.Cmd) {}
