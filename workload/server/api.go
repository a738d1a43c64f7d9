package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/tetra-messenger/tetra/workload/auth"
	"github.com/tetra-messenger/tetra/workload/delivery"
	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/protocol"
	"github.com/tetra-messenger/tetra/workload/text"
)

// History page limits (PROTOCOL.md §4).
const (
	DefaultPageLimit = 100
	MaxPageLimit     = 1000
	maxRequestBody   = 64 << 10
	requestTimeout   = 10 * time.Second
)

// toChatJSON is c on the wire (PROTOCOL.md §2). unread, when not nil, is
// the caller's count; lastRead nil is sent as {}.
func toChatJSON(c history.Chat, unread *int) protocol.Chat {
	members := c.Members
	if members == nil {
		members = []string{}
	}
	lastRead := c.LastRead
	if lastRead == nil {
		lastRead = map[string]string{}
	}
	out := protocol.Chat{ChatID: c.ID, Kind: c.Kind, Title: c.Title, Members: members,
		CreatedBy: c.CreatedBy, LastRead: lastRead, Unread: unread}
	addChatAPI(&out, c) // PROTOCOL.md §7 fields (chatapi.go)
	return out
}

// zero is the unread count of a chat just created.
func zero() *int { n := 0; return &n }

func (s *Server) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", s.handleReady)
	if s.cfg.MetricsAddr == "" {
		mux.Handle("GET /metrics", s.metrics.Handler()) // else on its own listener (Start)
	}
	mux.HandleFunc("POST /api/chats", s.authed(s.handleCreateChat))
	mux.HandleFunc("GET /api/chats", s.authed(s.handleListChats))
	mux.HandleFunc("POST /api/chats/{chatId}/members", s.authed(s.handleAddMember))
	mux.HandleFunc("DELETE /api/chats/{chatId}/members/{userId}", s.authed(s.handleRemoveMember))
	mux.HandleFunc("GET /api/chats/{chatId}/messages", s.authed(s.handleMessages))
	s.chatAPIRoutes(mux) // PROTOCOL.md §7.2, §7.5 (chatapi.go)
	mux.HandleFunc("DELETE /api/chats/{chatId}/messages/{messageId}", s.authed(s.handleDeleteMessage))
	mux.HandleFunc("GET /api/presence", s.authed(s.handlePresence))
	mux.HandleFunc("GET /ws", s.handleWS)
	mux.HandleFunc("GET /admin/stats", s.adminOnly(s.handleAdminStats))
	mux.HandleFunc("POST /admin/rebuild", s.adminOnly(s.handleAdminRebuild))
	s.adminPageRoutes(mux) // operator page and GET /admin/series (admin_page.go)
	s.webRoutes(mux)       // browser client and demo endpoints (webui.go)
	// JSON 404 and 405 for what matches no pattern (front.go); CORS for
	// the allowed origins' pages (cors.go).
	return s.withCORS(s.front(mux))
}

// recoverer turns a panic in a handler into a 500 and a log line instead of
// a dropped connection; no panic is expected, this is the last line.
func recoverer(s *Server, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			if v := recover(); v != nil {
				if v == http.ErrAbortHandler {
					panic(v)
				}
				s.log.Error("handler panic", "path", r.URL.Path, "panic", fmt.Sprint(v))
				writeError(w, protocol.CodeUnavailable, "internal error")
			}
		}()
		next.ServeHTTP(w, r)
	})
}

// bearer extracts the token from "Authorization: Bearer <token>".
func bearer(r *http.Request) string {
	h := r.Header.Get("Authorization")
	if len(h) > 7 && strings.EqualFold(h[:7], "bearer ") {
		return strings.TrimSpace(h[7:])
	}
	return ""
}

type authedHandler func(w http.ResponseWriter, r *http.Request, user string)

func (s *Server) authed(h authedHandler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		user, err := s.signer.Verify(bearer(r))
		if err != nil {
			writeError(w, protocol.CodeUnauthorized, "missing, malformed, expired or wrongly signed token")
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), requestTimeout)
		defer cancel()
		h(w, r.WithContext(ctx), user)
	}
}

// decodeBody reads a JSON object body into v, answering itself when it
// cannot: 413 too_large over maxRequestBody, else 400 invalid.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBody))
	var tooLarge *http.MaxBytesError
	switch {
	case errors.As(err, &tooLarge):
		writeError(w, protocol.CodeTooLarge, fmt.Sprintf("request body over %d bytes", maxRequestBody))
		return false
	case err != nil:
		writeError(w, protocol.CodeInvalid, "request body unreadable")
		return false
	}
	// encoding/json would turn invalid UTF-8 into U+FFFD and store it;
	// PROTOCOL.md §3 refuses it alike everywhere.
	if !utf8.Valid(body) {
		writeError(w, protocol.CodeInvalid, "request body is not valid UTF-8")
		return false
	}
	// Decoded like frames (PROTOCOL.md §7.7): repeated, unknown or
	// miscased keys and lone surrogate escapes are refused, naming the key.
	if err := protocol.CheckBody(body, bodyKeys(v)); err != nil {
		writeError(w, protocol.CodeInvalid, err.(*protocol.Error).Message)
		return false
	}
	if err := json.Unmarshal(body, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field != "" {
			writeError(w, protocol.CodeInvalid, fmt.Sprintf("field %q has the wrong type", te.Field))
		} else {
			writeError(w, protocol.CodeInvalid, "request body must be a JSON object")
		}
		return false
	}
	return true
}

// noBody answers 400 invalid, and returns false, when a call that takes
// no request body (the DELETE calls of PROTOCOL.md §2, §7.3, §7.5) is sent
// one: a body is refused, never ignored, as an unknown key is (§7.7). An
// empty body (Content-Length 0 or none) is what these calls take.
func noBody(w http.ResponseWriter, r *http.Request) bool {
	var one [1]byte
	n, _ := io.ReadFull(r.Body, one[:])
	if n > 0 {
		writeError(w, protocol.CodeInvalid, "this call takes no request body")
		return false
	}
	return true
}

func validUserIDs(ids []string) error {
	for _, id := range ids {
		if err := auth.ValidUser(id); err != nil {
			return fmt.Errorf("members: %s", clientMessage(err))
		}
	}
	return nil
}

func (s *Server) handleCreateChat(w http.ResponseWriter, r *http.Request, user string) {
	var req struct {
		Kind    string   `json:"kind"`
		Title   string   `json:"title"`
		Members []string `json:"members"`
		History string   `json:"history"` // PROTOCOL.md §7.6, groups only
	}
	if !decodeBody(w, r, &req) {
		return
	}
	if err := validUserIDs(req.Members); err != nil {
		writeError(w, protocol.CodeInvalid, err.Error())
		return
	}
	switch req.Kind {
	case history.KindDirect:
		var peers []string
		for _, m := range req.Members {
			if m != user && !slices.Contains(peers, m) {
				peers = append(peers, m)
			}
		}
		if len(peers) != 1 {
			writeError(w, protocol.CodeInvalid, "a direct chat needs exactly one other member in members")
			return
		}
		if req.History != "" && req.History != history.HistoryShared {
			writeError(w, protocol.CodeInvalid, `history: a direct chat's history is "shared"`)
			return
		}
		budget := s.chargeCreate(w, user)
		if budget == nil {
			return
		}
		chat, created, err := s.store.CreateDirect(r.Context(), user, peers[0])
		if err != nil || !created {
			budget() // nothing was created: the token goes back
		}
		if err != nil {
			s.writeStoreError(w, r, err)
			return
		}
		status := http.StatusOK
		if created {
			status = http.StatusCreated
			s.chatCreated(r.Context(), chat)
		}
		writeJSON(w, status, toChatJSON(chat, zero()))
	case history.KindGroup:
		if len(req.Title) > 200 || !text.Valid(req.Title) {
			writeError(w, protocol.CodeInvalid, "title must be at most 200 bytes of UTF-8 without U+0000")
			return
		}
		if len(req.Members) > 1000 {
			writeError(w, protocol.CodeInvalid, "a group has at most 1000 members")
			return
		}
		budget := s.chargeCreate(w, user)
		if budget == nil {
			return
		}
		chat, err := s.store.CreateGroupWith(r.Context(), history.GroupSpec{Creator: user, Title: req.Title,
			Members: req.Members, History: req.History})
		if err != nil {
			budget()
			s.writeStoreError(w, r, err)
			return
		}
		s.chatCreated(r.Context(), chat)
		writeJSON(w, http.StatusCreated, toChatJSON(chat, zero()))
	default:
		writeError(w, protocol.CodeInvalid, `kind must be "direct" or "group"`)
	}
}

// handleListChats is GET /api/chats?limit=&cursor= (PROTOCOL.md §2,
// §7.2): the caller's chats by lastActivity, newest first, each with its
// lastMessage; limit defaults to 100 (history.DefaultListLimit) and is
// capped at history.MaxListLimit; nextCursor is present while more follow.
// A cursor this server did not give is 400 invalid.
func (s *Server) handleListChats(w http.ResponseWriter, r *http.Request, user string) {
	q, ok := queryValues(w, r)
	if !ok {
		return
	}
	limit, ok := queryLimit(w, q, history.DefaultListLimit, history.MaxListLimit)
	if !ok {
		return
	}
	chats, next, err := s.store.ChatList(r.Context(), user, q.Get("cursor"), limit)
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	out := make([]protocol.Chat, 0, len(chats))
	for _, c := range chats {
		out = append(out, toChatJSON(c, &c.Unread))
	}
	body := map[string]any{"chats": out}
	if next != "" {
		body["nextCursor"] = next
	}
	writeJSON(w, http.StatusOK, body)
}

// validChatID applies the wire's id rule (PROTOCOL.md §3, package text) to
// a chat id in a path.
func validChatID(id string) bool {
	return text.ID("chatId", id, protocol.MaxIDLen) == nil
}

// handleAddMember is POST /api/chats/{chatId}/members (PROTOCOL.md §2):
// 200 with the chat as the caller sees it; the added user's devices get a
// chat "added" event, the other members' "updated" (§3), on every process.
func (s *Server) handleAddMember(w http.ResponseWriter, r *http.Request, user string) {
	chatID := r.PathValue("chatId")
	if !validChatID(chatID) {
		writeError(w, protocol.CodeInvalid, "chatId must be 1..128 bytes of valid UTF-8 without U+0000")
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
	// Whether the call changed anything decides the events: the store
	// says, from the change's own transaction (adding a member changes
	// nothing and sends nothing), so a concurrent change of the same
	// member cannot make this miss an event or send a false one.
	chat, changed, err := s.store.AddMemberChanged(r.Context(), chatID, user, req.UserID)
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	s.chats.put(chat)
	if changed {
		s.chatEvents(r.Context(), chat, req.UserID, protocol.ChatAdded)
	}
	writeJSON(w, http.StatusOK, s.callerView(r.Context(), chat, user))
}

// handleRemoveMember is DELETE /api/chats/{chatId}/members/{userId}
// (PROTOCOL.md §2, §7.5): leave (userId is the caller) or removal by an
// admin of the group; group chats only. 200 with the chat after the change; 400
// invalid for bad ids or a direct chat, 403 forbidden for a non-member or
// a member who is not an admin removing another member, 404 for an
// unknown or closed chat. The last member leaving closes the group. The removed user's connections stop receiving the
// chat's messages at once, on every process (delivery.Engine.Exclude); its
// devices get a chat "removed" event, the remaining members' "updated".
func (s *Server) handleRemoveMember(w http.ResponseWriter, r *http.Request, user string) {
	if !noBody(w, r) {
		return
	}
	chatID := r.PathValue("chatId")
	if !validChatID(chatID) {
		writeError(w, protocol.CodeInvalid, "chatId must be 1..128 bytes of valid UTF-8 without U+0000")
		return
	}
	target := r.PathValue("userId")
	if err := auth.ValidUser(target); err != nil {
		writeError(w, protocol.CodeInvalid, "userId: "+clientMessage(err))
		return
	}
	// The store says whether target was removed (removing a non-member
	// changes nothing), from the removal's own transaction: a check made
	// before the call could miss a concurrent add and leave a removed
	// user's pending messages on its way to it.
	chat, cutoff, changed, err := s.store.RemoveMemberChanged(r.Context(), chatID, user, target)
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	s.chats.forget(chatID)
	if changed {
		// Before the answer: the exclusion is published to the other
		// processes, then applied here.
		if err := s.engine.Exclude(r.Context(), target, chatID, cutoff); err != nil {
			s.log.Warn("member removed; the other processes were not told to drop its pending messages (they stop at its next reconnect)", "chat", chatID, "user", target, "err", err)
		}
		s.chatEvents(r.Context(), chat, target, protocol.ChatRemoved)
	}
	if user == target {
		writeJSON(w, http.StatusOK, toChatJSON(chat, nil))
		return
	}
	writeJSON(w, http.StatusOK, s.callerView(r.Context(), chat, user))
}

// callerView is chat on the wire with its read markers and, when the
// caller's chat list can be read, its unread count; a failure to read them
// leaves them out rather than failing a change that was made.
func (s *Server) callerView(ctx context.Context, chat history.Chat, user string) protocol.Chat {
	if c, err := s.store.ChatFor(ctx, chat.ID, user); err == nil {
		return toChatJSON(c, &c.Unread)
	}
	if marks, err := s.store.ReadMarks(ctx, chat.ID); err == nil {
		chat.LastRead = marks
	}
	return toChatJSON(chat, nil)
}

// chatEvents sends the chat events of a membership change of changed
// (PROTOCOL.md §3): event (added or removed) to changed's devices, updated
// to the devices of chat's other members, on this process and, published
// before this returns, on the others of a fleet. chat is the chat after
// the change, with its read markers; events carry no unread count.
func (s *Server) chatEvents(ctx context.Context, chat history.Chat, changed, event string) {
	if marks, err := s.store.ReadMarks(ctx, chat.ID); err == nil {
		chat.LastRead = marks
	}
	wire := toChatJSON(chat, nil)
	others := make([]string, 0, len(chat.Members))
	for _, m := range chat.Members {
		if m != changed {
			others = append(others, m)
		}
	}
	send := func(users []string, event string) {
		if len(users) == 0 {
			return
		}
		frame := protocol.Encode(protocol.ChatEvent{Type: protocol.TypeChat, Event: event, Chat: wire})
		if err := s.engine.BroadcastNow(ctx, users, frame); err != nil {
			s.log.Warn("chat event not published to the other processes", "chat", chat.ID, "event", event, "err", err)
		}
	}
	send([]string{changed}, event)
	send(others, protocol.ChatUpdated)
}

// chatCreated sends an "added" chat event (PROTOCOL.md §3) to the devices
// of every member of a chat just created, the creator's included (its
// other devices learn of it too), on every process of a fleet: a chat one
// is put in appears without a reload, as for a member added later.
func (s *Server) chatCreated(ctx context.Context, chat history.Chat) {
	frame := protocol.Encode(protocol.ChatEvent{Type: protocol.TypeChat, Event: protocol.ChatAdded, Chat: toChatJSON(chat, nil)})
	if err := s.engine.BroadcastNow(ctx, chat.Members, frame); err != nil {
		s.log.Warn("chat event not published to the other processes", "chat", chat.ID, "event", protocol.ChatAdded, "err", err)
	}
}

// handleMessages is GET /api/chats/{chatId}/messages (PROTOCOL.md §4,
// §7.1, §7.6): since pages forward, before backward (before=end, or a
// before that does not resolve, is the newest page), both oldest first;
// since and before together are 400 invalid. A non-member gets 403, an
// unknown or closed chat 404, read from the store (not the chat cache), so
// a member removed a moment ago on any process is refused at once.
func (s *Server) handleMessages(w http.ResponseWriter, r *http.Request, user string) {
	chatID := r.PathValue("chatId")
	if !validChatID(chatID) {
		writeError(w, protocol.CodeInvalid, "chatId must be 1..128 bytes of valid UTF-8 without U+0000")
		return
	}
	q, ok := queryValues(w, r)
	if !ok {
		return
	}
	limit, ok := queryLimit(w, q, DefaultPageLimit, MaxPageLimit)
	if !ok {
		return
	}
	_, hasSince := q["since"]
	_, hasBefore := q["before"]
	if hasSince && hasBefore {
		writeError(w, protocol.CodeInvalid, "since and before cannot be used together")
		return
	}
	pq := history.PageQuery{ChatID: chatID, User: user, Since: q.Get("since"), Limit: limit}
	if len(pq.Since) > protocol.MaxIDLen || !text.Valid(pq.Since) {
		pq.Since = "" // unresolvable: full sync (PROTOCOL.md §4)
	}
	if hasBefore {
		pq.Before = q.Get("before")
		if pq.Before == "" || len(pq.Before) > protocol.MaxIDLen || !text.Valid(pq.Before) {
			pq.Before = history.PageEnd // unresolvable: the newest page (§7.1)
		}
	}
	msgs, more, err := s.store.Messages(r.Context(), pq)
	if err != nil {
		s.writeStoreError(w, r, err)
		return
	}
	out := make([]protocol.Message, len(msgs))
	for i, m := range msgs {
		out[i] = wireMessage(m)
	}
	writeJSON(w, http.StatusOK, map[string]any{"messages": out, "hasMore": more})
}

// wireMessage is m as history pages show it (PROTOCOL.md §4).
func wireMessage(m history.Message) protocol.Message { return delivery.WireMessage(m, "") }

// queryValues parses r's query string strictly. r.URL.Query() drops every
// pair that fails to parse (a bad percent-escape such as cursor=%%%, a
// semicolon separator) without a word, so a malformed cursor or limit
// would be read as absent and answered with the first page; here a query
// string url.ParseQuery refuses is answered 400 invalid, as a bad cursor
// is (PROTOCOL.md §2: bad input gets 400), and ok is false. Every handler
// that reads query parameters reads them through it.
func queryValues(w http.ResponseWriter, r *http.Request) (url.Values, bool) {
	q, err := url.ParseQuery(r.URL.RawQuery)
	if err != nil {
		writeError(w, protocol.CodeInvalid, "malformed query string: "+err.Error())
		return nil, false
	}
	return q, true
}

// strictQuery is h behind queryValues, for handlers that read the query
// themselves (net/http/pprof's, pprof.go).
func strictQuery(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if _, ok := queryValues(w, r); ok {
			h(w, r)
		}
	}
}

// queryLimit reads the limit query parameter of q (from queryValues): def
// when absent, capped at max (a huge limit is capped, not refused);
// anything but a positive integer is answered 400 invalid and ok is false.
func queryLimit(w http.ResponseWriter, q url.Values, def, max int) (int, bool) {
	v := q.Get("limit")
	if v == "" {
		return def, true
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if errors.Is(err, strconv.ErrRange) && v[0] != '-' {
		n, err = int64(max), nil
	}
	if err != nil || n < 1 {
		writeError(w, protocol.CodeInvalid, "limit must be a positive integer")
		return 0, false
	}
	return int(min(n, int64(max))), true
}
