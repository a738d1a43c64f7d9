package storecore

import "github.com/tetra-messenger/tetra/workload/history"

// MessageColumns are the history columns of a full message (the table's
// alias h), in the order MessageDest scans them.
const MessageColumns = `h.id, h.message_id, h.chat_id, h.sender_id, h.sender_device, h.correlation_id, h.body, h.sent_at,
	h.kind, h.ref, h.edited_at, h.deleted`

// MessageDest returns the scan destinations of MessageColumns for m, and a
// func that completes m after each scan (SentAt, and the edit and delete
// fields: SetKind). The destinations may be reused for every row.
func MessageDest(m *history.Message) ([]any, func()) {
	var sentAt, editedAt, kind int64
	var ref string
	var deleted bool
	dest := []any{&m.Seq, &m.ID, &m.ChatID, &m.SenderID, &m.SenderDevice, &m.CorrelationID, &m.Body, &sentAt,
		&kind, &ref, &editedAt, &deleted}
	return dest, func() {
		m.SentAt = FromNanos(sentAt)
		SetKind(m, int(kind), ref, editedAt, deleted)
	}
}

// Targets collects what a commit reads of the messages its edits and
// deletes name (history.Known.Targets) and who may delete any message of
// their chats (Known.Admin: a group's admins, PROTOCOL.md §7.5).
type Targets struct {
	k      *history.Known
	admins map[[2]string]bool
}

// NewTargets starts the targets of k, none read yet.
func NewTargets(k *history.Known) *Targets {
	k.Targets = map[string]history.Message{}
	return &Targets{k: k, admins: map[[2]string]bool{}}
}

// Add records a message read, the kind of its chat and the chat's admins
// (ignored unless the chat is a group).
func (t *Targets) Add(m history.Message, chatKind string, admins []string) {
	t.k.Targets[m.ID] = m
	if chatKind == history.KindGroup {
		for _, a := range admins {
			t.admins[[2]string{m.ChatID, a}] = true
		}
	}
}

// Done sets k.Admin and completes k.Committed's edits and deletes from the
// targets (history.CommittedRefs).
func (t *Targets) Done() {
	admins := t.admins
	t.k.Admin = func(chatID, user string) bool { return admins[[2]string{chatID, user}] }
	history.CommittedRefs(t.k)
}
