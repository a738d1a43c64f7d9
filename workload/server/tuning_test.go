package server_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/server"
)

// A tuning directory with a file that names no key is applied all the
// same, and the server warns naming the file; a live reload logs the keys
// it changed, with old and new values (issue 13, point 7). Before, the
// unknown file was ignored without a word and the reload always logged
// maxDeliveryAttempts, maxPending and lease, whatever had changed.
func TestTuningDirWarnsAndNamesChanges(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, value string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(value), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("maxPending", "7")
	write("maxPendng", "9") // misspelt
	logs := newLogRecorder()
	e := newEnv(t, customBackend("sqlite+tuning-dir", func(c *server.Config) { c.TuningDir = dir }), func(c *server.Config) {
		c.Logger = slog.New(logs)
	})
	if got := e.srv.Tuning().MaxPending; got != 7 {
		t.Fatalf("maxPending %d, want 7 from the tuning directory", got)
	}
	w := logs.await(t, "name no tuning key")
	if w.level != slog.LevelWarn || !strings.Contains(w.attrs["files"], "maxPendng") || w.attrs["dir"] != dir {
		t.Errorf("warning %+v, want WARN naming maxPendng in %s", w, dir)
	}

	write("pollBatch", "100")
	r := logs.await(t, "tuning reloaded")
	if r.attrs["changed"] != "pollBatch" || r.attrs["pollBatch"] != "6000 -> 100" {
		t.Errorf("reload logged %v, want changed=pollBatch pollBatch=\"6000 -> 100\"", r.attrs)
	}
	if _, ok := r.attrs["lease"]; ok {
		t.Errorf("reload logged an unchanged key: %v", r.attrs)
	}
	if got := e.srv.Tuning().PollBatch; got != 100 {
		t.Errorf("pollBatch %d after the reload, want 100", got)
	}
}

// logRecord is one record a logRecorder saw, its attributes as text.
type logRecord struct {
	level slog.Level
	msg   string
	attrs map[string]string
}

// logRecorder is a slog.Handler that hands every record to await.
type logRecorder struct {
	ch    chan logRecord
	attrs []slog.Attr
}

func newLogRecorder() *logRecorder { return &logRecorder{ch: make(chan logRecord, 4096)} }

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	rec := logRecord{level: r.Level, msg: r.Message, attrs: map[string]string{}}
	for _, a := range l.attrs {
		rec.attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool {
		rec.attrs[a.Key] = a.Value.String()
		return true
	})
	select {
	case l.ch <- rec:
	default: // a test that stopped reading; never block the server
	}
	return nil
}

func (l *logRecorder) WithAttrs(as []slog.Attr) slog.Handler {
	return &logRecorder{ch: l.ch, attrs: append(append([]slog.Attr(nil), l.attrs...), as...)}
}

func (l *logRecorder) WithGroup(string) slog.Handler { return l }

// await returns the first record whose message contains msg, waiting up
// to waitLong.
func (l *logRecorder) await(t *testing.T, msg string) logRecord {
	t.Helper()
	timeout := time.After(waitLong)
	for {
		select {
		case r := <-l.ch:
			if strings.Contains(r.msg, msg) {
				return r
			}
		case <-timeout:
			t.Fatalf("no log record %q within %v", msg, waitLong)
		}
	}
}
