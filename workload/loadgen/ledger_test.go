package loadgen

import (
	"fmt"
	"sync"
	"testing"
)

// The ledger answers "did member i report message id" exactly, whatever
// order reports and accepts come in and whatever chat a frame names.
func TestLedgerAnswersPerMember(t *testing.T) {
	t.Parallel()
	// Chat a: members 0..99 (positions 0..99, past one word of bits);
	// chat b: members 100..101.
	var ms []*member
	for i := range 102 {
		m := &member{idx: i, chat: "a", pos: i}
		if i >= 100 {
			m.chat, m.pos = "b", i-100
		}
		ms = append(ms, m)
	}
	l := newLedger(0)

	// A delivery reported before its send was answered.
	if !l.report("m1", "a", ms[1]) || l.report("m1", "a", ms[1]) {
		t.Fatal("report: first not new, or a repeat new")
	}
	l.accept("m1", "a", 0)
	l.accept("m1", "a", 0) // a repeated answer counts once
	for _, pos := range []int{70, 99} {
		l.report("m1", "a", ms[pos])
	}
	for i, want := range map[int]bool{1: true, 70: true, 99: true, 2: false, 64: false, 0: false} {
		if got := l.has("m1", ms[i]); got != want {
			t.Errorf("has(m1, member %d) = %v, want %v", i, got, want)
		}
	}
	// Member 100 of chat b (position 0) gets m1, which is chat a's: that is
	// its own report, and says nothing of member 0 of chat a.
	if !l.report("m1", "a", ms[100]) {
		t.Fatal("stray report not new")
	}
	if !l.has("m1", ms[100]) || l.has("m1", ms[0]) {
		t.Fatalf("stray report: member 100 %v (want true), member 0 %v (want false)", l.has("m1", ms[100]), l.has("m1", ms[0]))
	}
	// A frame naming another chat than the record's (the server's word
	// against the sender's) still counts for the member that got it, only.
	l.accept("m2", "b", 101)
	if !l.report("m2", "a", ms[100]) || !l.has("m2", ms[100]) || l.has("m2", ms[101]) || l.has("m2", ms[0]) {
		t.Fatal("report under another chat")
	}
	if l.report("m2", "a", ms[100]) {
		t.Fatal("repeated stray report is new")
	}
	// A report of a message never accepted is kept, and not accepted.
	l.report("m3", "a", ms[5])
	if _, ok := l.acceptedMsg("m3"); ok || !l.has("m3", ms[5]) {
		t.Fatal("unaccepted message")
	}
	if a, ok := l.acceptedMsg("m2"); !ok || a.chat != "b" || a.sender != 101 {
		t.Fatalf("acceptedMsg(m2) = %+v, %v", a, ok)
	}
	if n, all := l.accepted.Load(), l.acceptedMsgs(); n != 2 || len(all) != 2 {
		t.Fatalf("accepted %d, listed %v", n, all)
	}
}

func TestLedgerConcurrentReports(t *testing.T) {
	t.Parallel()
	l := newLedger(0)
	var ms []*member
	for i := range 10 {
		ms = append(ms, &member{idx: i, chat: "c", pos: i})
	}
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 1000 {
				id := fmt.Sprint("m", j)
				if m.idx == 0 {
					l.accept(id, "c", 0)
				} else {
					l.report(id, "c", m)
				}
			}
		}()
	}
	wg.Wait()
	for j := range 1000 {
		for _, m := range ms[1:] {
			if !l.has(fmt.Sprint("m", j), m) {
				t.Fatalf("m%d, member %d: not reported", j, m.idx)
			}
		}
	}
	if n := len(l.acceptedMsgs()); n != 1000 {
		t.Fatalf("%d accepted", n)
	}
}
