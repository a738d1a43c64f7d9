package backends

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
)

// ErrAlreadyRunning: another process serves the same single-instance data
// (the embedded default's data directory is locked); Open's error wraps it.
var ErrAlreadyRunning = errors.New("server: another tetra process is using this data")

// lockDataDir takes an exclusive advisory lock on dir/tetra.lock for the
// life of the process. The embedded default (SQLite with the in-process
// waterline index) is one process only: a second process on the same data
// would run its own index, and its GC would delete rows the first one's
// clients have not acknowledged. The lock is released by the kernel when
// the process exits, however it exits.
func lockDataDir(dir string) (release func() error, err error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("server: create the data directory %s: %w", dir, err)
	}
	path := filepath.Join(dir, "tetra.lock")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("server: open %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s is locked by another process; the embedded default (SQLite + in-process index) runs as one process only: stop the other one, use another --data, or run several processes on PostgreSQL with --index redis://", ErrAlreadyRunning, dir)
		}
		return nil, fmt.Errorf("server: lock %s: %w", path, err)
	}
	return func() error {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		return f.Close()
	}, nil
}
