package sqlite

import (
	"context"
	"database/sql"
	"net/url"
	"sync"
	"time"
)

// The WAL keeps a deleted body after the delete (PROTOCOL.md §7.3): the
// frames written before it hold the old page versions, and the writer's
// automatic checkpoint, every walCheckpointPages frames, copies pages into
// the database file without emptying the WAL (its frames are overwritten
// only as later commits reach them). So a commit that deleted a message
// wakes the eraser, which checkpoints the WAL and truncates it to zero
// bytes (PRAGMA wal_checkpoint(TRUNCATE)) on a connection of its own. With
// secure_delete the database file holds zeros where the text was, so after
// that neither file holds it.
//
// The checkpoint takes the file's write lock only while it copies, and it
// does not wait for it or for readers (busy_timeout 0): when a commit or a
// reader of an older snapshot is in the way it tries again after
// eraseRetry, up to eraseTries times, then waits for the next delete
// (which checkpoints everything written before it too).
const (
	eraseDelay = 20 * time.Millisecond  // gathers the deletes of a moment into one checkpoint
	eraseRetry = 100 * time.Millisecond // between tries that found the file busy
	eraseTries = 100                    // 10 s of tries per wake
)

// eraser runs the checkpoints that erase deleted bodies from the WAL.
type eraser struct {
	ck     *sql.DB // one connection, busy_timeout 0
	wake   chan struct{}
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// eraserDSN is the eraser's connection: WAL, no busy wait.
func (c Config) eraserDSN() string {
	q := url.Values{}
	q.Set("_busy_timeout", "0")
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", c.Synchronous)
	return c.Path + "?" + q.Encode()
}

func startEraser(cfg Config) (*eraser, error) {
	ck, err := sql.Open("sqlite", cfg.eraserDSN())
	if err != nil {
		return nil, err
	}
	ck.SetMaxOpenConns(1)
	ck.SetMaxIdleConns(1)
	ctx, cancel := context.WithCancel(context.Background())
	e := &eraser{ck: ck, wake: make(chan struct{}, 1), cancel: cancel}
	e.wg.Add(1)
	go e.loop(ctx)
	return e, nil
}

// deleted tells the eraser that a committed transaction deleted a body.
func (e *eraser) deleted() {
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func (e *eraser) loop(ctx context.Context) {
	defer e.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-e.wake:
		}
		for try := 0; try < eraseTries; try++ {
			wait := eraseRetry
			if try == 0 {
				wait = eraseDelay
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
			var busy, frames, copied int
			err := e.ck.QueryRowContext(ctx, `PRAGMA wal_checkpoint(TRUNCATE)`).Scan(&busy, &frames, &copied)
			if err == nil && busy == 0 {
				break
			}
		}
	}
}

func (e *eraser) close() error {
	e.cancel()
	e.wg.Wait()
	return e.ck.Close()
}
