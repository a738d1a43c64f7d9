package delivery

import (
	"sort"
	"sync"
	"sync/atomic"
)

// The poller's scan exists for the rows the fast path did not deliver: a
// commit of another process, a row shed from a full queue or window, a
// connection registering while the row was committed. For every other row
// it re-read, with its body, what the fast path had delivered already
// (issue 22: about 7 % of the server's CPU at 4,000 msg/s). A coverRange
// records that one commit's rows in a partition are exactly the positions
// lo..hi (the store appends a batch's rows under its writer or append lock,
// so no other row lies between them) and whether the fast path delivered
// every one of them to every connection of this process that is owed it.
// The poller, reaching lo-1, passes a complete, clean range without
// reading it; it reads every other range as before.

// coverRange is one commit's rows in one partition, as the fast path
// handles them.
type coverRange struct {
	lo, hi int64
	// pending counts the fast-path items of the range not handled yet;
	// the range is complete at zero, once sealed.
	pending atomic.Int64
	// sealed is set once Handoff queued every item of the range.
	sealed atomic.Bool
	// dirty is set when an item was left to the poller: shed from a full
	// queue or a full window, or met a connection still registering.
	dirty atomic.Bool
}

func (r *coverRange) done() bool { return r.sealed.Load() && r.pending.Load() == 0 }

// coverage holds the ranges of the commits not yet passed by the poller,
// per partition, in position order.
type coverage struct {
	mu     sync.Mutex
	ranges map[int32][]*coverRange
	// skipped counts the rows the poller passed without reading.
	skipped atomic.Int64
}

func newCoverage() *coverage { return &coverage{ranges: map[int32][]*coverRange{}} }

// maxCoverRanges bounds the ranges kept per partition: a poller that does
// not come by (a stalled store) must not let them grow without end; the
// oldest go, and their rows are read as before.
const maxCoverRanges = 4096

// add records a commit's rows in partition p: positions, which must be
// exactly lo..hi, each once. It returns nil (nothing recorded: the poller
// reads these rows) when they are not.
func (c *coverage) add(p int32, positions []int64) *coverRange {
	if len(positions) == 0 {
		return nil
	}
	lo, hi := positions[0], positions[0]
	for _, pos := range positions[1:] {
		lo, hi = min(lo, pos), max(hi, pos)
	}
	if hi-lo+1 != int64(len(positions)) {
		return nil // gaps or repeats: not one contiguous append
	}
	r := &coverRange{lo: lo, hi: hi}
	c.mu.Lock()
	rs := c.ranges[p]
	i := sort.Search(len(rs), func(i int) bool { return rs[i].lo > lo })
	rs = append(rs, nil)
	copy(rs[i+1:], rs[i:])
	rs[i] = r
	if len(rs) > maxCoverRanges {
		rs = rs[len(rs)-maxCoverRanges:]
	}
	c.ranges[p] = rs
	c.mu.Unlock()
	return r
}

// pass returns the position the poller may move to from after without
// reading partition p: the end of the chain of complete, clean ranges
// that starts at after+1 (after itself when there is none). It drops the
// ranges it passes and those at or below after.
func (c *coverage) pass(p int32, after int64) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	rs := c.ranges[p]
	i := 0
	for i < len(rs) && rs[i].hi <= after {
		i++ // passed by a read already
	}
	start := after
	for i < len(rs) && rs[i].lo == after+1 && rs[i].done() && !rs[i].dirty.Load() {
		after = rs[i].hi
		i++
	}
	c.ranges[p] = rs[i:]
	if after > start {
		c.skipped.Add(after - start)
	}
	return after
}
