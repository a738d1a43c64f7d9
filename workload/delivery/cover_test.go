package delivery

import "testing"

// The poller passes only a chain of complete, clean ranges that starts
// right after its position; everything else it reads.
func TestCoveragePassesOnlyCompleteCleanRuns(t *testing.T) {
	c := newCoverage()
	if r := c.add(0, []int64{5, 7}); r != nil {
		t.Fatal("a batch with a gap was recorded as a range")
	}
	if r := c.add(0, []int64{5, 5}); r != nil {
		t.Fatal("a batch with a repeat was recorded as a range")
	}
	a := c.add(0, []int64{11, 10, 12}) // 10..12
	b := c.add(0, []int64{13, 14})     // 13..14
	d := c.add(0, []int64{15})         // 15
	a.pending.Add(1)
	a.sealed.Store(true)
	if got := c.pass(0, 9); got != 9 {
		t.Fatalf("passed to %d with an item of 10..12 pending", got)
	}
	a.pending.Add(-1)
	b.sealed.Store(true)
	if got := c.pass(0, 8); got != 8 {
		t.Fatalf("passed to %d from 8: position 9 was never covered", got)
	}
	d.sealed.Store(true)
	d.dirty.Store(true)
	if got := c.pass(0, 9); got != 14 {
		t.Fatalf("pass(9) = %d, want 14: 10..14 complete and clean, 15 left to the poller", got)
	}
	if got := c.skipped.Load(); got != 5 {
		t.Fatalf("skipped %d rows, want 5", got)
	}
	if got := c.pass(0, 15); got != 15 || len(c.ranges[0]) != 0 {
		t.Fatalf("pass(15) = %d with %d ranges kept; the dirty range read past must go", got, len(c.ranges[0]))
	}
	if got := c.pass(1, 9); got != 9 {
		t.Fatalf("another partition passed to %d", got)
	}
}
