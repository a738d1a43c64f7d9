package slogx

import (
	"bytes"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestSampledLogsOncePerInterval: a thousand warnings from many goroutines
// within one interval give one line; the next line, after the interval,
// counts what was held back.
func TestSampledLogsOncePerInterval(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	l := slog.New(slog.NewTextHandler(lockedWriter{&buf, &mu}, nil))
	w := NewSampled(200 * time.Millisecond)
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			for range 100 {
				w.Warn(l, "index refused", "err", "down")
			}
		})
	}
	wg.Wait()
	mu.Lock()
	lines := strings.Count(buf.String(), "\n")
	mu.Unlock()
	if lines != 1 {
		t.Fatalf("%d lines for 1,000 warnings within the interval, want 1:\n%s", lines, buf.String())
	}
	time.Sleep(250 * time.Millisecond)
	w.Warn(l, "index refused", "err", "down")
	mu.Lock()
	defer mu.Unlock()
	got := strings.Split(strings.TrimSpace(buf.String()), "\n")
	sum := 0
	for _, line := range got {
		var n int
		if _, err := fmt.Sscanf(line[strings.Index(line, "occurrences="):], "occurrences=%d", &n); err != nil {
			t.Fatalf("line %q: %v", line, err)
		}
		sum += n
	}
	if len(got) != 2 || sum != 1001 {
		t.Errorf("lines = %q, want 2 whose occurrences add up to all 1,001 warnings (got %d)", got, sum)
	}
}

type lockedWriter struct {
	b  *bytes.Buffer
	mu *sync.Mutex
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}
