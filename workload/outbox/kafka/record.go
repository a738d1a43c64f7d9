package kafka

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/tetra-messenger/tetra/workload/history"
)

// recordVersion is the format of outbox record values.
const recordVersion = 1

// recordValue is the value of one outbox record: the whole message and its
// recipient, so a Scan needs no history read. The key is the recipient.
type recordValue struct {
	V             int       `json:"v"`
	Recipient     string    `json:"to"`
	Seq           int64     `json:"seq"`
	ID            string    `json:"id"`
	ChatID        string    `json:"chat"`
	SenderID      string    `json:"from"`
	SenderDevice  string    `json:"device,omitempty"`
	CorrelationID string    `json:"corr"`
	Body          string    `json:"body"`
	SentAt        time.Time `json:"sentAt"`
	// Edits and Deletes: an edit's or delete's target (PROTOCOL.md §7.3).
	Edits   string `json:"edits,omitempty"`
	Deletes string `json:"deletes,omitempty"`
	// Deleted: the message was deleted before the relay read it (its
	// body is already "").
	Deleted bool `json:"deleted,omitempty"`
}

func encodeRecord(recipient string, m history.Message) []byte {
	b, err := json.Marshal(recordValue{
		V: recordVersion, Recipient: recipient, Seq: m.Seq, ID: m.ID, ChatID: m.ChatID,
		SenderID: m.SenderID, SenderDevice: m.SenderDevice, CorrelationID: m.CorrelationID,
		Body: m.Body, SentAt: m.SentAt.UTC(), Edits: m.Edits, Deletes: m.Deletes, Deleted: m.Deleted,
	})
	if err != nil {
		panic(fmt.Sprintf("kafka: encode an outbox record: %v", err)) // strings and a time: cannot fail
	}
	return b
}

func decodeRecord(value []byte) (string, history.Message, error) {
	var v recordValue
	if err := json.Unmarshal(value, &v); err != nil {
		return "", history.Message{}, err
	}
	if v.V != recordVersion || v.Recipient == "" || v.ID == "" {
		return "", history.Message{}, fmt.Errorf("not a version %d tetra outbox record", recordVersion)
	}
	return v.Recipient, history.Message{
		Seq: v.Seq, ID: v.ID, ChatID: v.ChatID, SenderID: v.SenderID, SenderDevice: v.SenderDevice,
		CorrelationID: v.CorrelationID, Body: v.Body, SentAt: v.SentAt.UTC(), Edits: v.Edits, Deletes: v.Deletes, Deleted: v.Deleted,
	}, nil
}

// The cursor record's value is the last relayed Seq in decimal.
func encodeCursor(seq int64) []byte { return strconv.AppendInt(nil, seq, 10) }

func decodeCursor(value []byte) (int64, error) { return strconv.ParseInt(string(value), 10, 64) }

// partitionOf maps a recipient to a partition: FNV-1a (32 bit) of the user
// id modulo the partition count. It must never change: records already in
// the topic were placed by it.
func partitionOf(recipient string, n int32) int32 {
	h := fnv.New32a()
	h.Write([]byte(recipient))
	return int32(h.Sum32() % uint32(n))
}
