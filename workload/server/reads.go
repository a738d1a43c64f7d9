package server

import (
	"context"
	"errors"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/metrics"
	"github.com/tetra-messenger/tetra/workload/protocol"
)

// readTarget checks the target of a read receipt from user (PROTOCOL.md
// §3): chatID exists, user is a member, and messageID is a message of that
// chat in the retained history (history.Store.MessageSeq: one indexed
// lookup). It returns the message's Seq, or the error code and message to
// answer with, after counting the refusal in
// tetra_read_receipts_failed_total: not_found for no such chat or a
// messageId that is no message of it, forbidden for a non-member,
// overloaded when the store could not tell (reason unavailable).
func (s *Server) readTarget(ctx context.Context, user, chatID, messageID string) (seq int64, code, msg string) {
	fail := func(reason, code, msg string) (int64, string, string) {
		s.metrics.ReadReceiptFailed(reason)
		return 0, code, msg
	}
	member, err := s.chats.isMember(ctx, chatID, user)
	switch {
	case errors.Is(err, history.ErrNotFound):
		return fail(metrics.ReasonNotFound, protocol.CodeNotFound, "no such chat")
	case err != nil:
		return fail(metrics.ReasonUnavailable, protocol.CodeOverloaded, "read receipt not stored: the store is unavailable")
	case !member:
		return fail(metrics.ReasonForbidden, protocol.CodeForbidden, "not a member of this chat")
	}
	seq, ok, err := s.store.MessageSeq(ctx, chatID, messageID)
	switch {
	case err != nil:
		return fail(metrics.ReasonUnavailable, protocol.CodeOverloaded, "read receipt not stored: the store is unavailable")
	case !ok:
		return fail(metrics.ReasonNotFound, protocol.CodeNotFound, "messageId is not a message of this chat; nothing changed")
	}
	// A message committed while the reader was not a member is none of
	// its messages (§7.6): not_found, as for an unknown id, so a receipt
	// cannot tell that it exists.
	hidden, err := s.hidden(ctx, chatID, user, seq)
	switch {
	case err != nil:
		return fail(metrics.ReasonUnavailable, protocol.CodeOverloaded, "read receipt not stored: the store is unavailable")
	case hidden:
		return fail(metrics.ReasonNotFound, protocol.CodeNotFound, "messageId is not a message of this chat; nothing changed")
	}
	return seq, "", ""
}

// hidden reports whether the message of Seq seq of chatID is one user, a
// member, may not see: one of a "member" group committed before user
// joined or while it was away (PROTOCOL.md §7.6). A shared chat (the
// setting is cached) costs no store call.
func (s *Server) hidden(ctx context.Context, chatID, user string, seq int64) (bool, error) {
	mh, err := s.chats.memberHistory(ctx, chatID)
	if err != nil || !mh {
		return false, err
	}
	sees, err := s.store.Sees(ctx, chatID, user, seq)
	if errors.Is(err, history.ErrNotMember) || errors.Is(err, history.ErrNotFound) {
		return false, nil // the caller's own checks answer these
	}
	return !sees, err
}
