package server

import (
	"context"
	"errors"
	"testing"
)

// The embedded default is one process only: a second server on the same
// data directory is refused, naming the directory; after the first stops,
// a new one starts.
func TestEmbeddedDefaultIsSingleInstance(t *testing.T) {
	dir := t.TempDir()
	cfg := DefaultConfig()
	cfg.Addr, cfg.DataDir = "127.0.0.1:0", dir
	first, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := New(context.Background(), cfg); !errors.Is(err, ErrAlreadyRunning) {
		t.Fatalf("second server on %s: %v, want ErrAlreadyRunning", dir, err)
	}
	if err := first.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := first.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	again, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatalf("after the first stopped: %v", err)
	}
	again.Start(context.Background())
	again.Shutdown(context.Background())
}
