package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/protocol"
)

// Sent is a send a test saw answered accepted.
type Sent struct {
	MessageID, ChatID, Sender string
}

// HistoryPage reads one page of a chat's history after since (the Go
// client's History with a fixed limit).
type HistoryPage func(ctx context.Context, since string) (page []protocol.Message, more bool, err error)

// CheckHistory pages every chat's whole history and reports, as test
// errors, every difference from accepted (correlationId -> answer):
// a message nobody saw accepted, one stored under another id or chat, a
// correlationId stored more than once, an accepted message missing (LOST),
// and a total that differs. It returns the messages found. It is the history half of the cross-process
// tests' reconciliation (test/crash, test/fleet).
func CheckHistory(t testing.TB, chats map[string]HistoryPage, accepted map[string]Sent) (total int) {
	t.Helper()
	byCorr := map[string]int{}
	for chatID, read := range chats {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		since := ""
		for {
			page, more, err := read(ctx, since)
			if err != nil {
				cancel()
				t.Fatalf("history of %s: %v", chatID, err)
			}
			for _, m := range page {
				total++
				byCorr[m.SenderID+"\x00"+m.CorrelationID]++
				s, ok := accepted[m.CorrelationID]
				switch {
				case !ok:
					t.Errorf("history holds %s (corr %s) that nobody saw accepted", m.MessageID, m.CorrelationID)
				case s.MessageID != m.MessageID || s.ChatID != chatID:
					t.Errorf("history has corr %s as %s in %s; accepted as %s in %s", m.CorrelationID, m.MessageID, chatID, s.MessageID, s.ChatID)
				}
			}
			if !more || len(page) == 0 {
				break
			}
			since = page[len(page)-1].MessageID
		}
		cancel()
	}
	for k, n := range byCorr {
		if n != 1 {
			t.Errorf("correlationId %q stored %d times", k, n)
		}
	}
	for corr, s := range accepted {
		if byCorr[s.Sender+"\x00"+corr] == 0 {
			t.Errorf("LOST: %s (corr %s) was accepted but is not in history", s.MessageID, corr)
		}
	}
	if total != len(accepted) {
		t.Errorf("history holds %d messages, %d were accepted", total, len(accepted))
	}
	return total
}
