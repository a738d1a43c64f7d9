package server

import (
	"context"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/tetra-messenger/tetra/workload/config"
)

// loadTuningDir applies cfg.TuningDir once at start; an invalid directory
// refuses to start, naming the key.
func (s *Server) loadTuningDir() error {
	t, err := config.LoadDir(s.cfg.TuningDir, s.cfg.Tuning)
	if err != nil {
		return err
	}
	return s.SetTuning(t)
}

// watchTuning reloads cfg.TuningDir whenever it changes (a ConfigMap
// volume update swaps the ..data symlink, seen as a create or a rename) and
// applies the new tuning live; connections are kept. An invalid update is
// logged and ignored: the running tuning stays. A slow periodic re-read
// backs the watch up (some volume types emit no events).
func (s *Server) watchTuning(ctx context.Context) {
	defer s.bg.Done()
	w, err := fsnotify.NewWatcher()
	if err != nil {
		s.log.Warn("tuning watch unavailable; falling back to periodic reload", "err", err)
	} else {
		defer w.Close()
		if err := w.Add(s.cfg.TuningDir); err != nil {
			s.log.Warn("tuning watch unavailable; falling back to periodic reload", "dir", s.cfg.TuningDir, "err", err)
		}
	}
	var events chan fsnotify.Event
	var errs chan error
	if w != nil {
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

// reloadTuning re-reads the tuning directory and applies it if it changed.
func (s *Server) reloadTuning() {
	t, err := config.LoadDir(s.cfg.TuningDir, s.cfg.Tuning)
	if err != nil {
		s.log.Warn("tuning update refused; keeping the running tuning", "dir", s.cfg.TuningDir, "err", err)
		return
	}
	if t == s.Tuning() {
		return
	}
	if err := s.SetTuning(t); err != nil {
		s.log.Warn("tuning update refused", "err", err)
		return
	}
	s.tuningReloads.Add(1)
	s.log.Info("tuning reloaded", "maxDeliveryAttempts", t.MaxDeliveryAttempts, "maxPending", t.MaxPending, "lease", t.Lease)
}
