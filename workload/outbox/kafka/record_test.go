package kafka

import (
	"testing"
	"time"

	"github.com/tetra-messenger/tetra/workload/history"
)

// Outbox records carry what an edit or a delete is (PROTOCOL.md §7.3), so
// a message frame pushed from Kafka names its target like one pushed from
// the SQL outbox, and a message deleted before the relay read it arrives
// as its tombstone.
func TestRecordCarriesEditsAndDeletes(t *testing.T) {
	at := time.Unix(0, 1_700_000_000_123_456_789).UTC()
	for _, m := range []history.Message{
		{Seq: 1, ID: "e", ChatID: "c", SenderID: "alice", CorrelationID: "k1", Body: "new", SentAt: at, Edits: "m1"},
		{Seq: 2, ID: "d", ChatID: "c", SenderID: "alice", CorrelationID: "k2", SentAt: at, Deletes: "m1"},
		{Seq: 3, ID: "m1", ChatID: "c", SenderID: "alice", CorrelationID: "k0", SentAt: at, Deleted: true},
	} {
		to, got, err := decodeRecord(encodeRecord("bob", m))
		if err != nil || to != "bob" {
			t.Fatalf("decode: %q, %v", to, err)
		}
		if got.Edits != m.Edits || got.Deletes != m.Deletes || got.Deleted != m.Deleted || got.Body != m.Body || got.ID != m.ID {
			t.Errorf("record of %+v decodes as %+v", m, got)
		}
	}
}
