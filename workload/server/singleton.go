package server

import "github.com/tetra-messenger/tetra/workload/backends"

// ErrAlreadyRunning is backends.ErrAlreadyRunning: New's error wraps it
// when another process holds the embedded default's data directory.
var ErrAlreadyRunning = backends.ErrAlreadyRunning
