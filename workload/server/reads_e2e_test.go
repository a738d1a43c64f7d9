package server_test

import (
	"strings"
	"testing"
)

// PROTOCOL.md §3: a read receipt whose messageId is not a message of that
// chat gets an error (not_found) and changes nothing: no other member is
// told (issue 13, point 7). Before, an unknown id, and a message of
// another chat, were forwarded to bob as alice's read marker. Each refusal
// counts in tetra_read_receipts_failed_total{reason="not_found"}.
func TestE2EReadReceiptOfNoMessageIsRefused(t *testing.T) {
	t.Parallel()
	forEachBackend(t, func(t *testing.T, b backend) {
		e := newEnv(t, b, nil)
		chat := e.createDirect("alice", "bob")
		other := e.createDirect("alice", "carol")
		alice := e.dial("alice", dialOpts{})
		bob := e.dial("bob", dialOpts{})
		carol := e.dial("carol", dialOpts{})
		mine := bob.sendOK(chat.ChatID, "b-1", "read me")
		alice.next("bob's message", messageID(mine.MessageID))
		alice.ack(mine.MessageID)
		elsewhere := carol.sendOK(other.ChatID, "c-1", "another chat")
		alice.next("carol's message", messageID(elsewhere.MessageID))
		alice.ack(elsewhere.MessageID)

		for _, id := range []string{"01NOSUCHMESSAGE00000000000", elsewhere.MessageID, strings.ToLower(mine.MessageID)} {
			alice.write(map[string]string{"type": "read", "chatId": chat.ChatID, "messageId": id})
			if f := alice.expect("error"); f.Code != "not_found" || f.Message == "" {
				t.Errorf("a read of %s in %s answered %s, want not_found", id, chat.ChatID, f)
			}
		}
		alice.write(map[string]string{"type": "read", "chatId": chat.ChatID, "messageId": mine.MessageID})
		if r := bob.expect("read"); r.MessageID != mine.MessageID || r.UserID != "alice" {
			t.Errorf("bob got %s, want alice's read of %s (and no read before it)", r, mine.MessageID)
		}
		bob.expectNone("another read receipt", isType("read"), quiet)

		if got := seriesValue(t, e.srv.Metrics().Registry(), "tetra_read_receipts_failed_total", `reason="not_found"`); got != 3 {
			t.Errorf("tetra_read_receipts_failed_total{reason=\"not_found\"} = %v, want 3", got)
		}
	})
}
