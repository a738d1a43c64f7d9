package server

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"sync"

	"github.com/tetra-messenger/tetra/workload/auth"
	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/protocol"
	"github.com/tetra-messenger/tetra/workload/text"
)

// The chat calls of PROTOCOL.md §7.2 and §7.5: one chat, rename, admins.
// Every admin change sends an "updated" chat event to the devices of all
// the group's members, on every process of a fleet, before the answer.

func (s *Server) chatAPIRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/chats/{chatId}", s.authed(s.handleGetChat))
	mux.HandleFunc("PATCH /api/chats/{chatId}", s.authed(s.handleRename))
	mux.HandleFunc("POST /api/chats/{chatId}/admins", s.authed(s.handleAddAdmin))
	mux.HandleFunc("DELETE /api/chats/{chatId}/admins/{userId}", s.authed(s.handleRemoveAdmin))
}

// addChatAPI sets the §7 fields of c on out: admins and history for groups
// (§7.5, §7.6), lastMessage and lastActivity when the store filled them
// (§7.2).
func addChatAPI(out *protocol.Chat, c history.Chat) {
	if c.Kind == history.KindGroup {
		out.Admins = c.Admins
		if out.Admins == nil {
			out.Admins = []string{}
		}
		out.History = c.History
		if out.History == "" {
			out.History = history.HistoryShared
		}
	}
	if c.LastMessage != nil {
		m := wireMessage(*c.LastMessage)
		out.LastMessage = &m
	}
	if !c.LastActivity.IsZero() {
		t := c.LastActivity.UTC()
		out.LastActivity = &t
	}
}

// bodyKeyCache maps a request struct type to its JSON keys.
var bodyKeyCache sync.Map

// bodyKeys lists the JSON keys of the struct v points to, from its json
// tags: the only keys a request body may hold (PROTOCOL.md §7.7).
func bodyKeys(v any) []string {
	t := reflect.TypeOf(v)
	if k, ok := bodyKeyCache.Load(t); ok {
		return k.([]string)
	}
	var keys []string
	if t.Kind() == reflect.Pointer && t.Elem().Kind() == reflect.Struct {
		st := t.Elem()
		for i := range st.NumField() {
			name, _, _ := strings.Cut(st.Field(i).Tag.Get("json"), ",")
			if name != "" && name != "-" {
				keys = append(keys, name)
			}
		}
	}
	bodyKeyCache.Store(t, keys)
	return keys
}

// chatPath reads and checks the chatId of the path, answering 400 when it
// is no id.
func chatPath(w http.ResponseWriter, r *http.Request) (string, bool) {
	chatID := r.PathValue("chatId")
	if !validChatID(chatID) {
		writeError(w, protocol.CodeInvalid, "chatId must be 1..128 bytes of valid UTF-8 without U+0000")
		return "", false
	}
	return chatID, true
}

// handleGetChat is GET /api/chats/{chatId} (PROTOCOL.md §7.2): the chat as
// the caller sees it in its list; 403 for a non-member, 404 for an unknown
// or closed chat.
func (s *Server) handleGetChat(w http.ResponseWriter, r *http.Request, user string) {
	chatID, ok := chatPath(w, r)
	if !ok {
		return
	}
	c, err := s.store.ChatFor(r.Context(), chatID, user)
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, toChatJSON(c, &c.Unread))
}

// handleRename is PATCH /api/chats/{chatId} {"title":"..."} (PROTOCOL.md
// §7.5): any admin of a group; 403 for a member who is not one or a
// non-member, 400 for a direct chat or a bad title, 404 for an unknown
// chat.
func (s *Server) handleRename(w http.ResponseWriter, r *http.Request, user string) {
	chatID, ok := chatPath(w, r)
	if !ok {
		return
	}
	var req struct {
		Title *string `json:"title"`
	}
	if !decodeBody(w, r, &req) {
		return
	}
	if req.Title == nil {
		writeError(w, protocol.CodeInvalid, "title is required")
		return
	}
	if len(*req.Title) > 200 || !text.Valid(*req.Title) {
		// The same bound as a group's creation (handleCreateChat).
		writeError(w, protocol.CodeInvalid, "title must be at most 200 bytes of UTF-8 without U+0000")
		return
	}
	s.adminChange(w, r, user, func(ctx context.Context) (history.Chat, bool, error) {
		return s.store.Rename(ctx, chatID, user, *req.Title)
	})
}

// handleAddAdmin is POST /api/chats/{chatId}/admins {"userId":"..."}
// (PROTOCOL.md §7.5): an admin makes a member an admin; 400 when userId is
// not a member.
func (s *Server) handleAddAdmin(w http.ResponseWriter, r *http.Request, user string) {
	chatID, ok := chatPath(w, r)
	if !ok {
		return
	}
	var req struct {
		UserID string `json:"userId"`
	}
	if !decodeBody(w, r, &req) {
		return
	}
	if err := auth.ValidUser(req.UserID); err != nil {
		writeError(w, protocol.CodeInvalid, "userId: "+clientMessage(err))
		return
	}
	s.adminChange(w, r, user, func(ctx context.Context) (history.Chat, bool, error) {
		return s.store.AddAdmin(ctx, chatID, user, req.UserID)
	})
}

// handleRemoveAdmin is DELETE /api/chats/{chatId}/admins/{userId}
// (PROTOCOL.md §7.5): an admin steps down (userId must be the caller, else
// 403). When no admin is left the member who joined earliest becomes one.
func (s *Server) handleRemoveAdmin(w http.ResponseWriter, r *http.Request, user string) {
	if !noBody(w, r) {
		return
	}
	chatID, ok := chatPath(w, r)
	if !ok {
		return
	}
	target := r.PathValue("userId")
	if err := auth.ValidUser(target); err != nil {
		writeError(w, protocol.CodeInvalid, "userId: "+clientMessage(err))
		return
	}
	s.adminChange(w, r, user, func(ctx context.Context) (history.Chat, bool, error) {
		return s.store.RemoveAdmin(ctx, chatID, user, target)
	})
}

// adminChange runs change; on success it sends "updated" to every member's
// devices (on every process) when the store says the call changed the
// chat (a no-op of PROTOCOL.md §7.5 sends nothing: renaming to the same
// title, making an admin of an admin, stepping down when not an admin or
// alone), and answers 200 with the chat as the caller sees it either way.
func (s *Server) adminChange(w http.ResponseWriter, r *http.Request, user string, change func(context.Context) (history.Chat, bool, error)) {
	chat, changed, err := change(r.Context())
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	if changed {
		s.chatUpdated(r.Context(), chat)
	}
	writeJSON(w, http.StatusOK, s.callerView(r.Context(), chat, user))
}

// chatUpdated sends an "updated" chat event (PROTOCOL.md §3, §7.5) with
// chat, read markers included, to the devices of all its members, on this
// process and, published before this returns, on the others of a fleet.
func (s *Server) chatUpdated(ctx context.Context, chat history.Chat) {
	if marks, err := s.store.ReadMarks(ctx, chat.ID); err == nil {
		chat.LastRead = marks
	}
	frame := protocol.Encode(protocol.ChatEvent{Type: protocol.TypeChat, Event: protocol.ChatUpdated, Chat: toChatJSON(chat, nil)})
	if err := s.engine.BroadcastNow(ctx, chat.Members, frame); err != nil {
		s.log.Warn("chat event not published to the other processes", "chat", chat.ID, "event", protocol.ChatUpdated, "err", err)
	}
}
