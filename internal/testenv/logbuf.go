package testenv

import (
	"bytes"
	"strings"
	"sync"
)

// LogBuffer collects a server's log for failure reports: an io.Writer safe
// for concurrent use that keeps at most about 4 MiB (it starts over beyond).
type LogBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write implements io.Writer.
func (l *LogBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.buf.Len() > 4<<20 {
		l.buf.Reset()
	}
	return l.buf.Write(p)
}

// Tail returns the last n lines.
func (l *LogBuffer) Tail(n int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	lines := strings.Split(strings.TrimRight(l.buf.String(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
