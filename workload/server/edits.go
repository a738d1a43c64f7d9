package server

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/tetra-messenger/tetra/workload/delivery"
	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/ingest"
	"github.com/tetra-messenger/tetra/workload/protocol"
	"github.com/tetra-messenger/tetra/workload/text"
)

// handleDeleteMessage is DELETE /api/chats/{chatId}/messages/{messageId}
// (PROTOCOL.md §7.3): the caller, the message's sender or an admin of the
// group (history.Known.Admin, filled from the admins table), deletes it. The delete is a message of its
// own ("deletes": messageId, empty body) committed through the accept
// pipeline like a send, so it is in the chat's sequence, pushed,
// acknowledged and recovered from history; its commit erases the
// original's body and its edits' bodies in the store. Answers 200
// {"message": tombstone}; deleting a deleted message answers the same
// tombstone. Errors: 400 invalid ids, a request body (the call takes
// none) or an edit/delete named as target,
// 403 a non-member or a message of someone else, 404 no such chat or no
// such message in it, 503 the store or the pipeline is unavailable.
func (s *Server) handleDeleteMessage(w http.ResponseWriter, r *http.Request, user string) {
	if !noBody(w, r) {
		return
	}
	chatID, messageID := r.PathValue("chatId"), r.PathValue("messageId")
	if !validChatID(chatID) || messageID == "" || len(messageID) > protocol.MaxIDLen || !text.Valid(messageID) {
		writeError(w, protocol.CodeInvalid, "chatId and messageId must be 1..128 bytes of valid UTF-8 without U+0000")
		return
	}
	// A message the caller may not see (§7.6) is answered as an unknown
	// one, before anything is tried: neither a 403 nor a tombstone may
	// tell that it exists.
	if seq, ok, err := s.store.MessageSeq(r.Context(), chatID, messageID); err == nil && ok {
		if hidden, err := s.hidden(r.Context(), chatID, user, seq); err == nil && hidden {
			err := fmt.Errorf("%w: %q", history.ErrNoMessage, messageID) // word for word an unknown id's answer
			writeError(w, codeOf(err), clientMessage(err))
			return
		}
	}
	// Each delete gets its own key: a second delete of the same message is
	// answered from the store's state (ErrDeleted), not as a resend.
	id := ulid.Make().String()
	type answer struct {
		res history.Result
		err error
	}
	done := make(chan answer, 1)
	err := s.pipeline.Submit(ingest.Request{
		Draft: history.Draft{
			ID: id, ChatID: chatID, SenderID: user, CorrelationID: "delete-" + id,
			SentAt: time.Now().UTC(), Deletes: messageID,
		},
		Done: func(res history.Result, err error) { done <- answer{res, err} },
	})
	if err != nil {
		writeError(w, protocol.CodeOverloaded, "inbound queue full; retry")
		return
	}
	var a answer
	select {
	case a = <-done:
	case <-r.Context().Done():
		return // the client went away; the delete may still commit
	}
	switch {
	case a.err != nil:
		writeError(w, protocol.CodeUnavailable, "not stored: the store is unavailable; retry")
	case errors.Is(a.res.Err, history.ErrDeleted):
		writeJSON(w, http.StatusOK, map[string]any{"message": delivery.WireMessage(a.res.Original.Tombstone(), "")})
	case a.res.Err != nil:
		writeError(w, codeOf(a.res.Err), clientMessage(a.res.Err))
	default:
		writeJSON(w, http.StatusOK, map[string]any{"message": delivery.WireMessage(a.res.Original, "")})
	}
}
