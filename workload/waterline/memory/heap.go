package memory

// The index keeps each pending entry in two indexed binary min-heaps at once:
// its client's pin heap for the entry's partition (ordered by position) and
// its shard's lease heap (ordered by lease). Each entry records its slot in
// both, so removal and re-keying are O(log n) with no stale items left
// behind. The two heaps are written out by hand rather than through
// container/heap or a generic type: they sit on the hot path of every send
// and acknowledgement, and direct calls inline where interface or
// dictionary-based generic calls do not.

// entry is one pending (sent, unacknowledged) outbox row of one client.
type entry struct {
	id       string // MessageID
	part     int32
	pos      int64
	attempts int
	lease    int64 // Unix nanoseconds; see unixNanos
	// seq orders entries with equal lease and position by when they were
	// (re)leased; unique within a shard.
	seq      uint64
	c        *client
	leaseIdx int // slot in the shard's leaseHeap
	pinIdx   int // slot in the client's pinHeap for part
}

// leaseLess orders the lease heap: earliest lease first, then lowest
// position (oldest row first), then lease order.
func leaseLess(a, b *entry) bool {
	if a.lease != b.lease {
		return a.lease < b.lease
	}
	if a.pos != b.pos {
		return a.pos < b.pos
	}
	return a.seq < b.seq
}

// leaseHeap is a min-heap of entries by leaseLess; entry.leaseIdx is each
// entry's slot.
type leaseHeap []*entry

func (h *leaseHeap) push(e *entry) {
	e.leaseIdx = len(*h)
	*h = append(*h, e)
	h.up(e.leaseIdx)
}

// remove deletes the entry at slot i.
func (h *leaseHeap) remove(i int) {
	s := *h
	n := len(s) - 1
	if i != n {
		s[i] = s[n]
		s[i].leaseIdx = i
	}
	s[n] = nil
	*h = s[:n]
	if i != n {
		h.fix(i)
	}
}

// fix restores the heap order after the key of the entry at slot i changed.
func (h *leaseHeap) fix(i int) {
	if !h.down(i) {
		h.up(i)
	}
}

// init establishes the heap order over arbitrary contents in O(n).
func (h *leaseHeap) init() {
	s := *h
	for i, e := range s {
		e.leaseIdx = i
	}
	for i := len(s)/2 - 1; i >= 0; i-- {
		h.down(i)
	}
}

func (h *leaseHeap) up(j int) {
	s := *h
	for j > 0 {
		i := (j - 1) / 2
		if !leaseLess(s[j], s[i]) {
			break
		}
		s[i], s[j] = s[j], s[i]
		s[i].leaseIdx, s[j].leaseIdx = i, j
		j = i
	}
}

func (h *leaseHeap) down(i0 int) bool {
	s := *h
	n := len(s)
	i := i0
	for {
		j := 2*i + 1
		if j >= n {
			break
		}
		if r := j + 1; r < n && leaseLess(s[r], s[j]) {
			j = r
		}
		if !leaseLess(s[j], s[i]) {
			break
		}
		s[i], s[j] = s[j], s[i]
		s[i].leaseIdx, s[j].leaseIdx = i, j
		i = j
	}
	return i > i0
}

// pinHeap is a min-heap of one client's pending entries of one partition by
// position; its root is the client's pin. entry.pinIdx is each entry's slot.
type pinHeap []*entry

func (h *pinHeap) push(e *entry) {
	e.pinIdx = len(*h)
	*h = append(*h, e)
	h.up(e.pinIdx)
}

// remove deletes the entry at slot i.
func (h *pinHeap) remove(i int) {
	s := *h
	n := len(s) - 1
	if i != n {
		s[i] = s[n]
		s[i].pinIdx = i
	}
	s[n] = nil
	*h = s[:n]
	if i != n {
		if !h.down(i) {
			h.up(i)
		}
	}
}

func (h *pinHeap) up(j int) {
	s := *h
	for j > 0 {
		i := (j - 1) / 2
		if s[j].pos >= s[i].pos {
			break
		}
		s[i], s[j] = s[j], s[i]
		s[i].pinIdx, s[j].pinIdx = i, j
		j = i
	}
}

func (h *pinHeap) down(i0 int) bool {
	s := *h
	n := len(s)
	i := i0
	for {
		j := 2*i + 1
		if j >= n {
			break
		}
		if r := j + 1; r < n && s[r].pos < s[j].pos {
			j = r
		}
		if s[j].pos >= s[i].pos {
			break
		}
		s[i], s[j] = s[j], s[i]
		s[i].pinIdx, s[j].pinIdx = i, j
		i = j
	}
	return i > i0
}

// cursor is a candidate of the read-only merge in Index.Expired: slot i of
// shard sh's lease heap. It copies the entry's sort key so that comparisons
// touch only the cursor heap's own memory.
type cursor struct {
	lease int64
	pos   int64
	seq   uint64
	e     *entry
	sh    int32
	i     int32
}

func newCursor(e *entry, sh, i int) cursor {
	return cursor{lease: e.lease, pos: e.pos, seq: e.seq, e: e, sh: int32(sh), i: int32(i)}
}

// cursorLess orders like leaseLess, with ties between shards broken by
// shard number.
func cursorLess(a, b cursor) bool {
	if a.lease != b.lease {
		return a.lease < b.lease
	}
	if a.pos != b.pos {
		return a.pos < b.pos
	}
	if a.sh != b.sh {
		return a.sh < b.sh
	}
	return a.seq < b.seq
}

// cursorHeap is a plain min-heap of cursors. Walking a binary heap in order
// without modifying it is a best-first search: pop the smallest candidate,
// then offer its two children. Every node is no smaller than its parent, so
// candidates come out in heap order, at O(log k) each for k taken.
type cursorHeap []cursor

func (h *cursorHeap) push(c cursor) {
	*h = append(*h, c)
	s := *h
	j := len(s) - 1
	for j > 0 {
		i := (j - 1) / 2
		if !cursorLess(s[j], s[i]) {
			break
		}
		s[i], s[j] = s[j], s[i]
		j = i
	}
}

func (h *cursorHeap) pop() cursor {
	s := *h
	top := s[0]
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	i := 0
	for {
		j := 2*i + 1
		if j >= n {
			break
		}
		if r := j + 1; r < n && cursorLess(s[r], s[j]) {
			j = r
		}
		if !cursorLess(s[j], s[i]) {
			break
		}
		s[i], s[j] = s[j], s[i]
		i = j
	}
	*h = s
	return top
}
