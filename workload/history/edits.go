package history

import (
	"context"
	"fmt"
	"time"
)

// Edits and deletes (PROTOCOL.md §7.3) are messages of their own: each is
// committed by Commit in the chat's sequence, with its own messageId, and
// delivered like any other. What makes them different is stored in the
// history row's kind (KindEdit, KindDelete) and ref (the messageId they
// apply to) columns (migration 0005), and what they do to the original,
// in the same transaction: an edit replaces the original's body and sets
// its edited_at; a delete sets the original's body to "" and its deleted
// flag, and erases the bodies of the original's edits too (the rows are
// updated in place, so no stored answer holds the text afterwards: see
// docs/design.md, "Edit and delete", for what each backend keeps until it
// reuses the space).

// Stored message kinds (the history.kind column). Only KindMessage rows
// are ordinary messages: the ones unread counts and lastMessage shows.
const (
	KindMessage = 0
	KindEdit    = 1
	KindDelete  = 2
)

// ErrDeleted is wrapped by the error of an edit or delete whose target was
// deleted already (it also wraps ErrNotFound: to an edit it is not_found).
// A delete that gets it answers the tombstone: deleting twice is not an
// error (PROTOCOL.md §7.3).
var ErrDeleted = fmt.Errorf("%w: the message was deleted", ErrNotFound)

// ErrNoMessage is wrapped by the error of an edit or delete whose target
// is not a message of the chat in history (it also wraps ErrNotFound).
var ErrNoMessage = fmt.Errorf("%w: no such message in this chat", ErrNotFound)

// Kind returns m's stored kind: KindEdit when Edits is set, KindDelete
// when Deletes is, else KindMessage.
func (m Message) Kind() int {
	switch {
	case m.Edits != "":
		return KindEdit
	case m.Deletes != "":
		return KindDelete
	}
	return KindMessage
}

// Ref returns the messageId an edit or delete applies to ("" for an
// ordinary message).
func (m Message) Ref() string { return m.Edits + m.Deletes }

// Tombstone is the deleted form of m, as history returns it after a delete
// (PROTOCOL.md §7.3): the same ids and SentAt, an empty body, Deleted set,
// no EditedAt.
func (m Message) Tombstone() Message {
	m.Body, m.Deleted, m.EditedAt = "", true, time.Time{}
	return m
}

// isRef reports whether d edits or deletes a message.
func (d Draft) isRef() bool { return d.Edits != "" || d.Deletes != "" }

// ref returns the messageId d edits or deletes.
func (d Draft) ref() string { return d.Edits + d.Deletes }

// checkRefDraft is CheckDraft's part for edits and deletes: one target,
// a valid id, and a delete carries no body.
func checkRefDraft(d Draft) error {
	switch {
	case d.Edits != "" && d.Deletes != "":
		return fmt.Errorf("%w: a message cannot both edit and delete", ErrInvalid)
	case d.Deletes != "" && d.Body != "":
		return fmt.Errorf("%w: a delete carries no body", ErrInvalid)
	case d.Edits != "" && d.Body == "":
		return fmt.Errorf("%w: an edit needs the new body", ErrInvalid)
	}
	return CheckID("target message id", d.ref())
}

// checkResendRef is CheckResend's rule for edits and deletes: a resend
// names the same target as the original, and an ordinary send does not
// resend an edit (or the reverse). It needs orig's Edits and Deletes,
// which a store reads with the targets (Known.Committed of a batch that
// HasRefs).
func checkResendRef(orig Message, d Draft) error {
	if orig.Edits != d.Edits || orig.Deletes != d.Deletes {
		return fmt.Errorf("%w: correlationId %q was already used for another message or edit", ErrInvalid, d.CorrelationID)
	}
	return nil
}

// HasRefs reports whether any valid draft edits or deletes a message: only
// then does a store read targets (Refs) and apply Applies.
func (p *CommitPlan) HasRefs() bool { return p.refs }

// Refs returns the messageIds the valid drafts edit or delete, in draft
// order (repeats possible). Known.Targets must hold those that are in
// history, and Known.Committed's messages their Edits and Deletes (read
// them with the targets: CommittedRefs).
func (p *CommitPlan) Refs() []string {
	if !p.refs {
		return nil
	}
	var ids []string
	for i, d := range p.drafts {
		if p.Results[i].Err == nil && d.isRef() {
			ids = append(ids, d.ref())
		}
	}
	return ids
}

// CommittedRefs completes, after the store read targets (with the ids of
// k.Committed's messages among them), k.Committed's Edits and Deletes from
// k.Targets.
func CommittedRefs(k *Known) {
	for key, m := range k.Committed {
		if t, ok := k.Targets[m.ID]; ok {
			m.Edits, m.Deletes = t.Edits, t.Deletes
			k.Committed[key] = m
		}
	}
}

// checkRef applies the rules of PROTOCOL.md §7.3 to draft i, an edit or a
// delete, from what the store read (k.Targets, updated by the earlier
// drafts of this batch in p.targets): the target is a message of the
// draft's chat in history (else ErrNotFound), for an edit one the draft's
// sender sent (else ErrNotFound too, as if unknown: nothing is told of
// another user's message), an ordinary message, not an edit or a delete
// (ErrInvalid), for a delete sent by the draft's sender or deleted by a
// group admin (k.Admin; nil means sender only; otherwise ErrForbidden),
// and not deleted (ErrDeleted, checked after the permission). It returns the original as it is after this draft.
func (p *CommitPlan) checkRef(d Draft, k Known) (Message, error) {
	id := d.ref()
	orig, ok := p.targets[id]
	if !ok {
		orig, ok = k.Targets[id]
	}
	switch {
	case !ok || orig.ChatID != d.ChatID:
		return Message{}, fmt.Errorf("%w: %q", ErrNoMessage, id)
	case d.Edits != "" && orig.SenderID != d.SenderID:
		// Another user's message is answered as an unknown one (§7.3
		// allows not_found), before its kind or state is looked at, so an
		// edit tells nothing of a message the editor may not read (§7.6,
		// "member" history), as a read receipt or a DELETE of it does not.
		return Message{}, fmt.Errorf("%w: %q", ErrNoMessage, id)
	case orig.Kind() != KindMessage:
		return Message{}, fmt.Errorf("%w: message %q is an edit or a delete; edit or delete the original", ErrInvalid, id)
	}
	// Who may is checked before whether it still can be: another user's
	// deleted message is forbidden to a non-admin too, as it was before
	// the delete.
	if orig.SenderID != d.SenderID && (d.Deletes == "" || k.Admin == nil || !k.Admin(d.ChatID, d.SenderID)) {
		return Message{}, fmt.Errorf("%w: only the sender or a group admin may delete a message", ErrForbidden)
	}
	if orig.Deleted {
		return orig, fmt.Errorf("%w: message %q", ErrDeleted, id)
	}
	if d.Deletes != "" {
		orig = orig.Tombstone()
	} else {
		orig.Body, orig.EditedAt = d.Body, time.Unix(0, d.SentAt.UnixNano()).UTC()
	}
	if p.targets == nil {
		p.targets = map[string]Message{}
	}
	p.targets[id] = orig
	return orig, nil
}

// Apply is what one committed edit or delete does to its original, for
// the store to write in the commit's transaction after the inserts.
type Apply struct {
	// Seq is the edit's or delete's own row; Kind and Ref are to be stored
	// in it.
	Seq  int64
	Kind int
	Ref  string
	// Target is the original's Seq. An edit sets its body to Body and its
	// edited_at to At; a delete sets its body to "" and deleted, and sets
	// the body of every KindEdit row whose ref is Ref to "".
	Target int64
	Body   string
	At     time.Time
}

// Applies lists, after every insert was recorded (Inserted), what the
// inserted edits and deletes do, in draft order (so the last edit of a
// batch wins).
func (p *CommitPlan) Applies() []Apply {
	if !p.refs {
		return nil
	}
	var out []Apply
	for _, i := range p.Inserts {
		m := p.Results[i].Message
		if m.Kind() == KindMessage {
			continue
		}
		out = append(out, Apply{Seq: m.Seq, Kind: m.Kind(), Ref: m.Ref(), Target: p.Results[i].Original.Seq, Body: m.Body, At: m.SentAt})
	}
	return out
}

// CoMembers is implemented by stores that can list, in one query, the
// users who share a chat with a user (PROTOCOL.md §7.4: who is told of its
// presence, whose presence it may ask for). Callers discover it with a
// type assertion and fall back to Store.ChatsOf.
type CoMembers interface {
	// CoMembers returns the users other than user who are members of a
	// chat user is a member of, sorted, without repeats. An unknown user
	// has none. Errors wrap ErrUnavailable.
	CoMembers(ctx context.Context, user string) ([]string, error)
}
