package delivery

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/tetra-messenger/tetra/internal/slogx"
	"github.com/tetra-messenger/tetra/workload/waterline"
)

// ackBatchMax is how many acknowledged ids make the batcher record at
// once instead of waiting out Config.AckWait.
const ackBatchMax = 512

// ackBatcher records the acknowledgements of all connections in the index
// together: Engine.Ack frees the window at once and hands the ids here, and
// the batcher records what gathered for up to Config.AckWait (or
// ackBatchMax ids) with one waterline.ManyAcker call, one round trip for
// Redis instead of one per ack frame, on no connection's goroutine.
//
// Recording an ack late is safe, only conservative: the index keeps the
// entry (and the client's pin, so GC deletes less) a moment longer, and an
// entry whose lease ends before its ack is recorded is found acknowledged
// by the poller, which drops it (redeliver). Acks of a client withdrawn
// meanwhile are refused by the index as unknown and ignored, as Ack
// ignores them. Stop records what is left.
type ackBatcher struct {
	e    *Engine
	many waterline.ManyAcker
	wait time.Duration
	wake chan struct{}
	warn *slogx.Sampled // a Redis outage fails a flush every AckWait

	mu    sync.Mutex
	ids   map[string][]string // client -> ids acknowledged, in order
	order []string            // clients in order of their first ack
	n     int
}

func newAckBatcher(e *Engine, many waterline.ManyAcker, wait time.Duration) *ackBatcher {
	return &ackBatcher{e: e, many: many, wait: wait, wake: make(chan struct{}, 1), ids: map[string][]string{},
		warn: slogx.NewSampled(slogx.Interval)}
}

// add queues the acknowledgement of ids by client.
func (a *ackBatcher) add(client string, ids []string) {
	a.mu.Lock()
	if _, ok := a.ids[client]; !ok {
		a.order = append(a.order, client)
	}
	a.ids[client] = append(a.ids[client], ids...)
	a.n += len(ids)
	full := a.n >= ackBatchMax
	first := a.n == len(ids)
	a.mu.Unlock()
	if first || full {
		select {
		case a.wake <- struct{}{}:
		default:
		}
	}
}

// loop records batches until ctx ends, then records what is left.
func (a *ackBatcher) loop(ctx context.Context) {
	defer a.e.wg.Done()
	timer := time.NewTimer(a.wait)
	timer.Stop()
	for {
		select {
		case <-ctx.Done():
			fctx, cancel := context.WithTimeout(context.Background(), a.e.cfg.StoreTimeout)
			a.flush(fctx)
			cancel()
			return
		case <-a.wake:
		}
		// Gather for a moment unless a full batch is already waiting.
		a.mu.Lock()
		full := a.n >= ackBatchMax
		a.mu.Unlock()
		if !full {
			timer.Reset(a.wait)
			select {
			case <-timer.C:
			case <-a.wake: // full meanwhile
			case <-ctx.Done():
			}
			timer.Stop() // Go 1.23 timers: no stale tick after Stop or Reset
			if ctx.Err() != nil {
				continue // the last flush, on a live context, is the loop's
			}
		}
		cctx, cancel := context.WithTimeout(ctx, a.e.cfg.StoreTimeout)
		a.flush(cctx)
		cancel()
	}
}

// flush records every queued acknowledgement with one AckMany call.
func (a *ackBatcher) flush(ctx context.Context) {
	a.mu.Lock()
	if a.n == 0 {
		a.mu.Unlock()
		return
	}
	batches := make([]waterline.AckBatch, len(a.order))
	for i, c := range a.order {
		batches[i] = waterline.AckBatch{ClientID: c, MessageIDs: a.ids[c]}
	}
	a.ids, a.order, a.n = map[string][]string{}, nil, 0
	a.mu.Unlock()
	a.e.idxMu.RLock()
	errs := a.many.AckMany(ctx, batches)
	a.e.idxMu.RUnlock()
	failed := 0
	var last error
	for _, err := range errs {
		if err != nil && !errors.Is(err, waterline.ErrUnknownClient) {
			failed++
			last = err
		}
	}
	if failed > 0 {
		// As with a failed Ack: the windows are free already; the index
		// keeps the entries until their lease, when the poller finds
		// them acknowledged and drops them (redeliver).
		a.warn.Warn(a.e.logger, "acks not recorded in the waterline index", "clients", failed, "of", len(batches), "err", last)
	}
}
