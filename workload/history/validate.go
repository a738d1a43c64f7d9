package history

import (
	"fmt"
	"slices"
	"strings"

	"github.com/tetra-messenger/tetra/workload/text"
)

// MaxIDBytes bounds chat ids, message ids and correlation ids, in bytes, as
// the wire does (protocol.MaxIDLen).
const MaxIDBytes = 128

// The validation every Store applies before it writes (PROTOCOL.md §3, one
// rule for every backend: package text). Each returns nil or an error
// wrapping ErrInvalid that names the field.

// CheckUser checks a user id (text.User); what names it in the error.
func CheckUser(what, id string) error {
	if err := text.User(what, id); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// CheckText checks free text, a body or a title (text.Check).
func CheckText(what, s string) error {
	if err := text.Check(what, s); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// CheckID checks an id: 1..MaxIDBytes bytes of valid text (text.ID).
func CheckID(what, id string) error {
	if err := text.ID(what, id, MaxIDBytes); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	return nil
}

// CheckDraft checks what the ingest stage must have filled in and every
// text of a draft: the message id, chat id and correlation id (CheckID),
// the sender (CheckUser), the device and the body (CheckText; the wire
// bounds their lengths). SentAt is the store's to check (its storable
// range).
func CheckDraft(d Draft) error {
	for _, c := range []struct{ what, id string }{
		{"message id", d.ID}, {"chat id", d.ChatID}, {"correlationId", d.CorrelationID},
	} {
		if err := CheckID(c.what, c.id); err != nil {
			return err
		}
	}
	if err := CheckUser("sender id", d.SenderID); err != nil {
		return err
	}
	if err := CheckText("device", d.SenderDevice); err != nil {
		return err
	}
	return CheckText("body", d.Body)
}

// CheckRead checks a read receipt: chat and message ids (CheckID) and the
// reader (CheckUser).
func CheckRead(r Read) error {
	if err := CheckID("read receipt chat id", r.ChatID); err != nil {
		return err
	}
	if err := CheckID("read receipt message id", r.MessageID); err != nil {
		return err
	}
	return CheckUser("read receipt user id", r.UserID)
}

// CheckResend applies the idempotency-key rule to a draft whose (SenderID,
// CorrelationID) is already taken by a message of chat origChat with body
// origBody (committed earlier, or earlier in the same batch): the same chat
// and body make it a resend (a Duplicate of the original); another chat or
// body is refused with an error wrapping ErrInvalid, and nothing is stored
// (PROTOCOL.md §3, as payment APIs treat a reused idempotency key).
func CheckResend(origChat, origBody string, d Draft) error {
	switch {
	case d.ChatID != origChat:
		return fmt.Errorf("%w: correlationId %q was already used for a message to another chat", ErrInvalid, d.CorrelationID)
	case d.Body != origBody:
		return fmt.Errorf("%w: correlationId %q was already used for a message with another body", ErrInvalid, d.CorrelationID)
	}
	return nil
}

// CheckRemove applies the rule of PROTOCOL.md §2 DELETE members, shared
// by every store, to a removal of user by by from chat c as read in the
// removal's transaction: by must be a member (ErrNotMember), c a group
// (ErrInvalid), and by either user itself (leaving) or one of c.Admins
// (ErrForbidden; PROTOCOL.md §7.5: any admin, not only the creator). Whether user is a member is not checked: removing a
// non-member changes nothing.
func CheckRemove(c Chat, by, user string) error {
	switch {
	case !c.HasMember(by):
		return fmt.Errorf("%w: %q in chat %q", ErrNotMember, by, c.ID)
	case c.Kind != KindGroup:
		return fmt.Errorf("%w: members can be removed from group chats only", ErrInvalid)
	case by != user && !c.IsAdmin(by):
		return fmt.Errorf("%w: only an admin of the group may remove another member; a member may remove itself (leave)", ErrForbidden)
	}
	return nil
}

// Limits on chat input every store applies; a request beyond them fails
// with ErrInvalid. (The HTTP API also caps a title at 200 bytes before
// trimming; PROTOCOL.md additions list the sizes.)
const (
	// MaxTitleBytes is the longest group title accepted, in bytes, after
	// surrounding white space is trimmed.
	MaxTitleBytes = 256
	// MaxGroupMembers is the largest group, creator included; CreateGroup
	// and AddMember refuse to grow a group beyond it.
	MaxGroupMembers = 1000
)

// CheckGroup applies the rules of a new group (Store.CreateGroup, shared by
// every store): the creator and every member are user ids (CheckUser), the
// title trimmed of surrounding white space is at most MaxTitleBytes of
// valid text (CheckText), and the members, creator included, sorted and
// without repeats, are at most MaxGroupMembers. It returns the trimmed
// title and that member list.
func CheckGroup(creator, title string, members []string) (string, []string, error) {
	if err := CheckUser("creator id", creator); err != nil {
		return "", nil, err
	}
	title = strings.TrimSpace(title)
	if len(title) > MaxTitleBytes {
		return "", nil, fmt.Errorf("%w: title is longer than %d bytes", ErrInvalid, MaxTitleBytes)
	}
	if err := CheckText("title", title); err != nil {
		return "", nil, err
	}
	all := make([]string, 0, len(members)+1)
	all = append(all, creator)
	for _, m := range members {
		if err := CheckUser("member id", m); err != nil {
			return "", nil, err
		}
		all = append(all, m)
	}
	slices.Sort(all)
	all = slices.Compact(all)
	if len(all) > MaxGroupMembers {
		return "", nil, fmt.Errorf("%w: a group has at most %d members", ErrInvalid, MaxGroupMembers)
	}
	return title, all, nil
}
