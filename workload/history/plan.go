package history

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// The range of SentAt a store can keep: nanoseconds since 1970 in an int64,
// a second short of either end (1677-09-21 to 2262-04-11).
var (
	MinSentAt = time.Unix(0, math.MinInt64).Add(time.Second)
	MaxSentAt = time.Unix(0, math.MaxInt64).Add(-time.Second)
)

// Key is an idempotency key: (SenderID, CorrelationID) (PROTOCOL.md §3).
type Key struct{ Sender, Correlation string }

// Known is what a store read, inside its commit transaction, about a batch
// of drafts (CommitPlan.Chats, Keys, IDs), for CommitPlan.Decide.
type Known struct {
	// Members maps each known chat the batch names, and the chat of every
	// message in Committed, to its members, sorted; unknown chats are
	// absent.
	Members map[string][]string
	// Committed holds the messages already stored under the batch's keys.
	Committed map[Key]Message
	// UsedIDs holds the batch's message ids that are already in history.
	UsedIDs map[string]bool
	// Targets holds the messages in history that the batch's edits and
	// deletes name (CommitPlan.Refs), by messageId; read only when
	// CommitPlan.HasRefs.
	Targets map[string]Message
	// Admin reports whether user is an admin of group chatID (PROTOCOL.md
	// §7.5: an admin may delete any message); nil means no admins, so
	// only a message's sender may delete it.
	Admin func(chatID, user string) bool
}

// CommitPlan decides a batch of drafts, the commit rules of Store.Commit
// written once for every store. A store makes one (NewCommitPlan: the
// drafts' own checks), reads what Chats, Keys and IDs name inside its
// transaction, calls Decide, inserts the drafts of Inserts in order (a
// history row, then one outbox row per member of Results[i].Members),
// records each with Inserted and calls Finish. Not safe for concurrent use.
type CommitPlan struct {
	drafts []Draft
	// Results has one entry per draft: an Err (a rule violation: the draft
	// stores nothing), a Duplicate (the original message), or, for a draft
	// in Inserts, the message to insert (Seq 0 until Inserted) and its
	// recipients in Members.
	Results []Result
	// Inserts lists the drafts to insert, in draft order.
	Inserts []int

	planned map[Key]int // keys of drafts to insert -> draft index
	dupOf   map[int]int // draft -> the earlier draft of this batch it resends

	refs    bool               // some valid draft edits or deletes (edits.go)
	targets map[string]Message // originals as changed by this batch's edits and deletes
}

// NewCommitPlan checks each draft on its own (CheckDraft, and a SentAt
// in MinSentAt..MaxSentAt); a draft that fails has its Result.Err set
// already.
func NewCommitPlan(drafts []Draft) *CommitPlan {
	p := &CommitPlan{drafts: drafts, Results: make([]Result, len(drafts)), planned: map[Key]int{}, dupOf: map[int]int{}}
	for i, d := range drafts {
		if d.SentAt.Before(MinSentAt) || d.SentAt.After(MaxSentAt) {
			p.Results[i].Err = fmt.Errorf("%w: draft sentAt %v is unset or out of range", ErrInvalid, d.SentAt)
			continue
		}
		p.Results[i].Err = CheckDraft(d)
		if p.Results[i].Err == nil && d.isRef() {
			if p.Results[i].Err = checkRefDraft(d); p.Results[i].Err == nil {
				p.refs = true
			}
		}
	}
	return p
}

// Valid reports whether any draft passed its own checks (else the store
// has nothing to read or write).
func (p *CommitPlan) Valid() bool {
	for _, r := range p.Results {
		if r.Err == nil {
			return true
		}
	}
	return false
}

// Chats returns the chats the valid drafts name, sorted, without repeats.
func (p *CommitPlan) Chats() []string {
	var chats []string
	for i, d := range p.drafts {
		if p.Results[i].Err == nil {
			chats = append(chats, d.ChatID)
		}
	}
	slices.Sort(chats)
	return slices.Compact(chats)
}

// Keys returns the idempotency keys of the valid drafts, in draft order.
func (p *CommitPlan) Keys() []Key {
	var keys []Key
	for i, d := range p.drafts {
		if p.Results[i].Err == nil {
			keys = append(keys, Key{d.SenderID, d.CorrelationID})
		}
	}
	return keys
}

// IDs returns the message ids of the valid drafts, in draft order.
func (p *CommitPlan) IDs() []string {
	var ids []string
	for i, d := range p.drafts {
		if p.Results[i].Err == nil {
			ids = append(ids, d.ID)
		}
	}
	return ids
}

// Decide applies the rules to every valid draft in order, from what the
// store read: a sender outside the chat (ErrNotMember) or an unknown chat
// (ErrNotFound) is refused, unless its key is taken: the idempotency key
// is checked before the rules, so a resend after the sender left still
// answers the original; a taken key (committed before, or by an earlier
// draft of this batch) with the original's chat and body is a Duplicate,
// with another chat or body ErrInvalid (CheckResend); a message id already
// used is ErrInvalid; everything else is to insert.
func (p *CommitPlan) Decide(k Known) {
	used := k.UsedIDs
	if used == nil {
		used = map[string]bool{}
	}
	for i, d := range p.drafts {
		if p.Results[i].Err != nil {
			continue
		}
		key := Key{d.SenderID, d.CorrelationID}
		ms, known := k.Members[d.ChatID]
		if _, member := slices.BinarySearch(ms, d.SenderID); !known || !member {
			if p.duplicate(i, key, k) {
				continue
			}
			if !known {
				p.Results[i].Err = fmt.Errorf("%w: chat %q", ErrNotFound, d.ChatID)
				continue
			}
			p.Results[i] = Result{
				Err:     fmt.Errorf("%w: %q in chat %q", ErrNotMember, d.SenderID, d.ChatID),
				Members: slices.Clone(ms),
			}
			continue
		}
		if p.duplicate(i, key, k) {
			continue
		}
		if used[d.ID] {
			p.Results[i].Err = fmt.Errorf("%w: message id %q is already used", ErrInvalid, d.ID)
			continue
		}
		var orig Message
		if d.isRef() {
			var err error
			if orig, err = p.checkRef(d, k); err != nil {
				p.Results[i] = Result{Err: err, Original: orig}
				continue
			}
		}
		used[d.ID] = true
		p.planned[key] = i
		p.Inserts = append(p.Inserts, i)
		p.Results[i] = Result{
			Message: Message{
				ID:            d.ID,
				ChatID:        d.ChatID,
				SenderID:      d.SenderID,
				SenderDevice:  d.SenderDevice,
				CorrelationID: d.CorrelationID,
				Body:          d.Body,
				SentAt:        time.Unix(0, d.SentAt.UnixNano()).UTC(),
				Edits:         d.Edits,
				Deletes:       d.Deletes,
			},
			Members:  slices.Clone(ms),
			Original: orig,
		}
	}
}

// duplicate fills the result of draft i when its key is taken and reports
// whether it did.
func (p *CommitPlan) duplicate(i int, key Key, k Known) bool {
	d := p.drafts[i]
	if orig, ok := k.Committed[key]; ok {
		// A deleted original's body is erased (and its edits' bodies) and
		// an edited one's is the edit's: the body the key was first sent
		// with is gone, so a resend is judged by its chat alone (a client resending a send
		// whose answer it missed, after the message was edited or
		// deleted, gets the original's id, not "another body").
		// An edit of a message deleted since has its body erased too
		// (erased edits are the only edits with an empty body: an edit's
		// body is never blank).
		body := orig.Body
		if orig.Deleted || !orig.EditedAt.IsZero() || (orig.Kind() == KindEdit && orig.Body == "") {
			body = d.Body
		}
		err := CheckResend(orig.ChatID, body, d)
		if err == nil && (p.refs || orig.Kind() != KindMessage) {
			// A plain send under an edit's or delete's key is not its
			// resend (PROTOCOL.md §7.3: the rules of §3 hold for edits).
			err = checkResendRef(orig, d)
		}
		if err != nil {
			p.Results[i] = Result{Err: err}
			return true
		}
		p.Results[i] = Result{Message: orig, Duplicate: true, Members: slices.Clone(k.Members[orig.ChatID])}
		return true
	}
	if j, ok := p.planned[key]; ok {
		err := CheckResend(p.drafts[j].ChatID, p.drafts[j].Body, d)
		if err == nil && (p.drafts[j].isRef() || d.isRef()) {
			err = checkResendRef(Message{Edits: p.drafts[j].Edits, Deletes: p.drafts[j].Deletes}, d)
		}
		if err != nil {
			p.Results[i] = Result{Err: err}
			return true
		}
		// Completed with the original's Seq by Finish.
		p.dupOf[i] = j
		p.Results[i] = Result{Duplicate: true, Members: slices.Clone(p.Results[j].Members)}
		return true
	}
	return false
}

// Inserted records that draft i of Inserts was stored with seq and, with
// an outbox, deliveries (one per member, in member order).
func (p *CommitPlan) Inserted(i int, seq int64, deliveries []Delivery) {
	p.Results[i].Message.Seq = seq
	p.Results[i].Deliveries = deliveries
}

// Finish completes the resends of drafts inserted in this batch with their
// original's stored message and returns Results.
func (p *CommitPlan) Finish() []Result {
	for i, j := range p.dupOf {
		p.Results[i].Message = p.Results[j].Message
	}
	return p.Results
}
