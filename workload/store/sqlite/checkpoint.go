package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"sync"
	"sync/atomic"
	"time"
)

// The checkpointer copies the WAL's pages into the database file on a
// connection and a goroutine of its own, so that no group commit waits
// for it.
//
// SQLite's own automatic checkpoint runs inside the commit that crosses
// wal_autocheckpoint frames, on the writer: at 6,000 msg/s that was every
// half second, and each held the commit for 15-30 ms (growing with the
// database), so about 5 % of all messages waited 20 ms or more for a copy
// that had nothing to do with them, and that was the p99 of one-to-one
// traffic (docs/benchmarks.md, "sixth pass"). Here a commit only counts
// what it wrote (wrote); once checkpointMessages messages are in the WAL,
// or checkpointEvery after the last checkpoint whatever was written, the
// checkpointer copies the WAL (see copy): almost all of it by a PASSIVE
// checkpoint, which waits for nobody and which the writer's next commits
// run beside, and the writer the little committed meanwhile, right after
// its next commit, which leaves the WAL wholly copied, so that the
// writer's following transaction starts it again from its beginning
// instead of
// growing the file. The writer keeps an automatic checkpoint as a
// backstop, at walBackstopPages frames: should the checkpointer fall
// behind (a reader holding an old snapshot, a stalled disk), the WAL
// still stops growing there, as it did before at walCheckpointPages.
//
// The same connection erases deleted bodies from the WAL (PROTOCOL.md
// §7.3): the WAL keeps a deleted body after the delete (the frames
// written before it hold the old page versions, and a checkpoint copies
// pages into the database file without emptying the WAL, whose frames are
// overwritten only as later commits reach them). So a commit that deleted
// a message wakes the checkpointer, which checkpoints the WAL and
// truncates it to zero bytes (PRAGMA wal_checkpoint(TRUNCATE)). With
// secure_delete the database file holds zeros where the text was, so
// after that neither file holds it. That checkpoint takes the file's
// write lock only while it copies, and it does not wait for it or for
// readers (busy_timeout 0): when a commit or a reader of an older
// snapshot is in the way it tries again after eraseRetry, up to
// eraseTries times, then waits for the next delete (which checkpoints
// everything written before it too).
const (
	eraseDelay = 20 * time.Millisecond  // gathers the deletes of a moment into one checkpoint
	eraseRetry = 100 * time.Millisecond // between tries that found the file busy
	eraseTries = 100                    // 10 s of tries per wake

	// checkpointMessages is how many committed messages wake the
	// checkpointer: about walCheckpointPages frames at the 2.5 frames a
	// message of a one-to-one chat writes (its history row, the outbox
	// record and the index pages it dirties).
	checkpointMessages = 3000
	// checkpointEvery is the longest between two checkpoints while
	// anything else (quiet traffic, chat changes, read receipts, GC's
	// deletes) writes to the WAL; a checkpoint that finds nothing new
	// costs a look at the WAL's index.
	checkpointEvery = 2 * time.Second
)

// checkpointer runs the WAL checkpoints of a DB (see above).
type checkpointer struct {
	ck      *sql.DB // one connection, busy_timeout 0
	erase   chan struct{}
	full    chan struct{}
	pending atomic.Int64 // messages committed since the last checkpoint began
	// finish asks the writer to copy what was committed during the
	// checkpointer's last copy (finishAfterCommit).
	finish atomic.Bool
	// passes counts the PASSIVE checkpoints run (tests).
	passes atomic.Int64
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// checkpointerDSN is the checkpointer's connection: WAL, no busy wait.
func (c Config) checkpointerDSN() string {
	q := url.Values{}
	q.Set("_busy_timeout", "0")
	q.Set("_journal_mode", "WAL")
	q.Set("_synchronous", c.Synchronous)
	return c.Path + "?" + q.Encode()
}

func startCheckpointer(cfg Config) (*checkpointer, error) {
	ck, err := sql.Open("sqlite", cfg.checkpointerDSN())
	if err != nil {
		return nil, err
	}
	ck.SetMaxOpenConns(1)
	ck.SetMaxIdleConns(1)
	ctx, cancel := context.WithCancel(context.Background())
	c := &checkpointer{ck: ck, erase: make(chan struct{}, 1), full: make(chan struct{}, 1), cancel: cancel}
	c.wg.Add(1)
	go c.loop(ctx)
	return c, nil
}

// wrote tells the checkpointer that a committed transaction wrote n
// messages.
func (c *checkpointer) wrote(n int) {
	if c.pending.Add(int64(n)) >= checkpointMessages {
		signal(c.full)
	}
}

// deleted tells the checkpointer that a committed transaction deleted a
// body.
func (c *checkpointer) deleted() { signal(c.erase) }

// signal wakes the receiver of ch without waiting.
func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func (c *checkpointer) loop(ctx context.Context) {
	defer c.wg.Done()
	tick := time.NewTicker(checkpointEvery / 4)
	defer tick.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case <-c.erase:
			c.truncate(ctx)
			last = time.Now()
		case <-c.full:
			c.copy(ctx)
			last = time.Now()
		case now := <-tick.C:
			if now.Sub(last) >= checkpointEvery {
				c.copy(ctx)
				last = time.Now()
			}
		}
	}
}

// copy copies the WAL into the database file by a PASSIVE checkpoint:
// what was committed when it began, while commits go on beside it. Then it
// asks the writer to finish (finish): the writer's next commit copies the
// little committed meanwhile, which leaves the WAL wholly copied, so that
// the writer's following transaction starts it again from its beginning.
// A checkpoint beside the writer can never get there on its own while
// commits keep coming.
func (c *checkpointer) copy(ctx context.Context) {
	c.pending.Store(0)
	c.passes.Add(1)
	if c.checkpoint(ctx, "PASSIVE") == nil {
		c.finish.Store(true)
	}
}

// errBusy is what checkpoint returns when SQLite reported the checkpoint
// could not finish.
var errBusy = errors.New("sqlite: checkpoint busy")

// checkpoint runs PRAGMA wal_checkpoint(mode) on the checkpointer's
// connection; it fails with errBusy when the checkpoint could not finish.
func (c *checkpointer) checkpoint(ctx context.Context, mode string) error {
	var busy, frames, copied int
	if err := c.ck.QueryRowContext(ctx, `PRAGMA wal_checkpoint(`+mode+`)`).Scan(&busy, &frames, &copied); err != nil {
		return err
	}
	if busy != 0 {
		return errBusy
	}
	return nil
}

// truncate checkpoints the WAL and truncates it, trying again while a
// commit or a reader is in the way (see above).
func (c *checkpointer) truncate(ctx context.Context) {
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
		if c.checkpoint(ctx, "TRUNCATE") == nil {
			return
		}
	}
}

// finishAfterCommit is called by the writer after a commit: when the
// checkpointer has copied the WAL since the last call, it copies on the
// writer's connection what was committed meanwhile (a few commits' frames,
// where the checkpointer's copy was thousands). An error is left for the
// next copy (or the writer's backstop): the commit itself succeeded.
func (c *checkpointer) finishAfterCommit(ctx context.Context, w *sql.DB) {
	if !c.finish.Swap(false) {
		return
	}
	var busy, frames, copied int
	_ = w.QueryRowContext(ctx, `PRAGMA wal_checkpoint(PASSIVE)`).Scan(&busy, &frames, &copied)
}

func (c *checkpointer) close() error {
	c.cancel()
	c.wg.Wait()
	return c.ck.Close()
}
