package server

import (
	"context"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/tetra-messenger/tetra/workload/config"
)

// loadTuningDir applies cfg.TuningDir once at start; an invalid directory
// refuses to start, naming the key. Files that name no key are warned
// about (warnUnknownTuning).
func (s *Server) loadTuningDir() error {
	l, err := config.ReadDir(s.cfg.TuningDir, s.cfg.Tuning)
	if err != nil {
		return err
	}
	s.warnUnknownTuning(l.Unknown)
	return s.SetTuning(l.Tuning)
}

// warnUnknownTuning warns, naming them, about the files of the tuning
// directory that name no key: they are ignored (a newer operator may add
// keys), and a misspelt key would otherwise change nothing without a word.
// It warns when the set of such names changes, not at every reload.
// Called from New and then only from the watchTuning goroutine.
func (s *Server) warnUnknownTuning(names []string) {
	seen := strings.Join(names, "\x00")
	if seen == s.tuningUnknown {
		return
	}
	s.tuningUnknown = seen
	if len(names) > 0 {
		s.log.Warn("tuning directory: ignoring files that name no tuning key (misspelt?)", "dir", s.cfg.TuningDir,
			"files", strings.Join(names, ", "), "keys", strings.Join(config.Keys, ", "))
	}
}

// startTuningWatch watches cfg.TuningDir and reloads it whenever it
// changes (a ConfigMap volume update swaps the ..data symlink, seen as a
// create or a rename), applying the new tuning live; connections are kept.
// The watch is in place when it returns, so a change made right after
// Start is seen. An invalid update is logged and ignored: the running
// tuning stays. A slow periodic re-read backs the watch up (some volume
// types emit no events). The goroutine ends with ctx (s.bg).
func (s *Server) startTuningWatch(ctx context.Context) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		s.log.Warn("tuning watch unavailable; falling back to periodic reload", "err", err)
		w = nil
	} else if err := w.Add(s.cfg.TuningDir); err != nil {
		s.log.Warn("tuning watch unavailable; falling back to periodic reload", "dir", s.cfg.TuningDir, "err", err)
	}
	s.bg.Add(1)
	go s.watchTuning(ctx, w)
}

func (s *Server) watchTuning(ctx context.Context, w *fsnotify.Watcher) {
	defer s.bg.Done()
	var events chan fsnotify.Event
	var errs chan error
	if w != nil {
		defer w.Close()
		events, errs = w.Events, w.Errors
	}
	poll := time.NewTicker(30 * time.Second)
	defer poll.Stop()
	debounce := time.NewTimer(time.Hour)
	debounce.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-events:
			debounce.Reset(100 * time.Millisecond)
		case err := <-errs:
			s.log.Warn("tuning watch error", "err", err)
		case <-poll.C:
			s.reloadTuning()
		case <-debounce.C:
			s.reloadTuning()
		}
	}
}

// reloadTuning re-reads the tuning directory and applies it if it changed;
// the log line names each changed key with its old and new value
// (changed=pollBatch pollBatch="6000 -> 100").
func (s *Server) reloadTuning() {
	l, err := config.ReadDir(s.cfg.TuningDir, s.cfg.Tuning)
	if err != nil {
		s.log.Warn("tuning update refused; keeping the running tuning", "dir", s.cfg.TuningDir, "err", err)
		return
	}
	s.warnUnknownTuning(l.Unknown)
	changes := config.Diff(s.Tuning(), l.Tuning)
	if len(changes) == 0 {
		return
	}
	if err := s.SetTuning(l.Tuning); err != nil {
		s.log.Warn("tuning update refused", "err", err)
		return
	}
	s.tuningReloads.Add(1)
	keys := make([]string, len(changes))
	attrs := make([]any, 0, 2+2*len(changes))
	for i, c := range changes {
		keys[i] = c.Key
		attrs = append(attrs, c.Key, c.From+" -> "+c.To)
	}
	s.log.Info("tuning reloaded", append([]any{"changed", strings.Join(keys, ",")}, attrs...)...)
}
