package client

// This file holds fakeServer, a SMALL in-test stand-in for the tetra server.
// It speaks just enough of PROTOCOL.md (hello, send/accepted/error with
// idempotent correlationIds, message push, acks, ping, the chats and history
// endpoints, close codes) to exercise this package's own logic: correlation
// matching, idempotent resend, dedupe, cursors, acks, backoff and
// reconnects. It is not the server and proves nothing about it: the
// end-to-end tests against the real server live in test/ and
// workload/server.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coder/websocket"

	"github.com/tetra-messenger/tetra/workload/protocol"
)

// sendReply tells the fake what to do with one received send frame.
type sendReply struct {
	code  string          // answer this error code instead of accepting
	drop  bool            // close the connection (no close frame) instead of answering
	store bool            // with drop: commit the message first, so only the answer is lost
	hold  <-chan struct{} // answer only once this is closed
	retry int64           // with code: the error's retryAfterMs
}

type fakeChat struct {
	id      string
	kind    string
	title   string
	members []string
	msgs    []protocol.Message
}

type fakeConn struct {
	ws          *websocket.Conn
	user        string
	device      string
	outstanding atomic.Int32
}

type sendEvent struct {
	user string
	send protocol.Send
	n    int // how many times this (user, correlationId) has been received, this one included
}

type historyEvent struct {
	user, chat, since string
}

type fakeServer struct {
	t      testing.TB
	srv    *httptest.Server
	limits protocol.Limits

	// onSend decides the fate of each send; nil accepts everything.
	onSend func(ev sendEvent) sendReply

	mu            sync.Mutex
	seq           int
	chats         map[string]*fakeChat
	byCorr        map[string]string // user + "\x00" + correlationId -> messageId
	seen          map[string]int    // same key -> times received
	conns         map[string]*fakeConn
	tokensInQuery int
	maxOutstand   int32
	creditErrors  int
	mute          bool // stop answering pings
	refuse        int  // close this many connections with 1013 right after hello

	sends   chan sendEvent
	acks    chan []string
	history chan historyEvent
	pings   chan string
}

func newFakeServer(t testing.TB) *fakeServer {
	fs := &fakeServer{
		t:       t,
		limits:  protocol.Limits{MaxBodyBytes: 4096, MaxInFlightSends: 64, SendsPerSecond: 10000},
		chats:   map[string]*fakeChat{},
		byCorr:  map[string]string{},
		seen:    map[string]int{},
		conns:   map[string]*fakeConn{},
		sends:   make(chan sendEvent, 1024),
		acks:    make(chan []string, 1024),
		history: make(chan historyEvent, 1024),
		pings:   make(chan string, 1024),
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /ws", fs.serveWS)
	mux.HandleFunc("GET /api/chats", fs.auth(fs.listChats))
	mux.HandleFunc("POST /api/chats", fs.auth(fs.createChat))
	mux.HandleFunc("GET /api/chats/{id}/messages", fs.auth(fs.listMessages))
	fs.srv = httptest.NewServer(mux)
	t.Cleanup(fs.srv.Close)
	return fs
}

func token(user string) string { return "tok:" + user }

func (fs *fakeServer) userOf(r *http.Request, allowQuery bool) string {
	tok, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok && allowQuery {
		tok = r.URL.Query().Get("token")
	}
	user, ok := strings.CutPrefix(tok, "tok:")
	if !ok || user == "" {
		return ""
	}
	return user
}

func writeErr(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

func (fs *fakeServer) auth(h func(http.ResponseWriter, *http.Request, string)) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		user := fs.userOf(r, false)
		if user == "" {
			writeErr(w, http.StatusUnauthorized, protocol.CodeUnauthorized, "bad token")
			return
		}
		h(w, r, user)
	}
}

func (ch *fakeChat) json() map[string]any {
	return map[string]any{"chatId": ch.id, "kind": ch.kind, "title": ch.title, "members": ch.members}
}

func (fs *fakeServer) listChats(w http.ResponseWriter, _ *http.Request, user string) {
	fs.mu.Lock()
	out := []map[string]any{}
	for _, ch := range fs.chats {
		if slices.Contains(ch.members, user) {
			out = append(out, ch.json())
		}
	}
	fs.mu.Unlock()
	_ = json.NewEncoder(w).Encode(map[string]any{"chats": out})
}

func (fs *fakeServer) createChat(w http.ResponseWriter, r *http.Request, user string) {
	var in struct {
		Kind    string   `json:"kind"`
		Title   string   `json:"title"`
		Members []string `json:"members"`
	}
	if err := json.NewDecoder(r.Body).Decode(&in); err != nil || (in.Kind != "direct" && in.Kind != "group") {
		writeErr(w, http.StatusBadRequest, protocol.CodeInvalid, "bad chat")
		return
	}
	members := append([]string{user}, in.Members...)
	slices.Sort(members)
	members = slices.Compact(members)
	id := in.Kind + ":" + strings.Join(members, ",")
	if in.Kind == "group" {
		id = "g:" + in.Title
	}
	fs.mu.Lock()
	ch, ok := fs.chats[id]
	if !ok {
		ch = &fakeChat{id: id, kind: in.Kind, title: in.Title, members: members}
		fs.chats[id] = ch
	}
	body := ch.json()
	fs.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if ok {
		w.WriteHeader(http.StatusOK)
	} else {
		w.WriteHeader(http.StatusCreated)
	}
	_ = json.NewEncoder(w).Encode(body)
}

func (fs *fakeServer) listMessages(w http.ResponseWriter, r *http.Request, user string) {
	id := r.PathValue("id")
	since := r.URL.Query().Get("since")
	limit, _ := strconv.Atoi(r.URL.Query().Get("limit"))
	if limit <= 0 {
		limit = 100
	}
	fs.mu.Lock()
	ch := fs.chats[id]
	if ch == nil || !slices.Contains(ch.members, user) {
		fs.mu.Unlock()
		writeErr(w, http.StatusForbidden, protocol.CodeForbidden, "not a member of "+id)
		return
	}
	start := 0
	for i, m := range ch.msgs {
		if m.MessageID == since {
			start = i + 1
		}
	}
	end := min(start+limit, len(ch.msgs))
	page := slices.Clone(ch.msgs[start:end])
	more := end < len(ch.msgs)
	fs.mu.Unlock()
	fs.history <- historyEvent{user: user, chat: id, since: since}
	_ = json.NewEncoder(w).Encode(map[string]any{"messages": page, "hasMore": more})
}

func (fs *fakeServer) serveWS(w http.ResponseWriter, r *http.Request) {
	user := fs.userOf(r, true)
	if user == "" {
		writeErr(w, http.StatusUnauthorized, protocol.CodeUnauthorized, "bad token")
		return
	}
	device := r.URL.Query().Get("device")
	if device == "" {
		device = "default"
	}
	ws, err := websocket.Accept(w, r, nil)
	if err != nil {
		return
	}
	fc := &fakeConn{ws: ws, user: user, device: device}
	key := user + "/" + device
	fs.mu.Lock()
	if r.URL.Query().Get("token") != "" {
		fs.tokensInQuery++
	}
	old := fs.conns[key]
	fs.conns[key] = fc
	limits := fs.limits
	fs.mu.Unlock()
	if old != nil {
		go old.ws.Close(protocol.CloseSuperseded, "superseded")
	}
	ctx := context.Background()
	hello := protocol.Hello{Type: protocol.TypeHello, UserID: user, Device: device, ConnectionID: fmt.Sprint(time.Now().UnixNano()), Limits: limits}
	if err := ws.Write(ctx, websocket.MessageText, protocol.Encode(hello)); err != nil {
		return
	}
	fs.mu.Lock()
	refuse := fs.refuse > 0
	if refuse {
		fs.refuse--
	}
	fs.mu.Unlock()
	if refuse { // as tetra does when live delivery is unavailable
		_ = ws.Close(websocket.StatusTryAgainLater, "live delivery unavailable, retry")
		return
	}
	defer func() {
		fs.mu.Lock()
		if fs.conns[key] == fc {
			delete(fs.conns, key)
		}
		fs.mu.Unlock()
		_ = ws.CloseNow()
	}()
	for {
		_, b, err := ws.Read(ctx)
		if err != nil {
			return
		}
		f, err := protocol.DecodeClient(b, limits.MaxBodyBytes)
		if err != nil {
			pe := err.(*protocol.Error)
			_ = ws.Write(ctx, websocket.MessageText, protocol.Encode(protocol.ErrorFrame{Type: protocol.TypeError, CorrelationID: pe.CorrelationID, Code: pe.Code, Message: pe.Message}))
			continue
		}
		switch {
		case f.Send != nil:
			if !fs.handleSend(fc, *f.Send) {
				return
			}
		case f.Ack != nil:
			fs.acks <- f.Ack.MessageIDs
		case f.Ping != nil:
			fs.mu.Lock()
			mute := fs.mute
			fs.mu.Unlock()
			fs.pings <- user
			if !mute {
				_ = ws.Write(ctx, websocket.MessageText, []byte(`{"type":"pong"}`))
			}
		case f.Read != nil:
			rd := *f.Read
			rd.UserID = user
			fs.fanout(rd.ChatID, fc, protocol.Encode(rd))
		}
	}
}

// handleSend processes one send; false means the connection was dropped.
func (fs *fakeServer) handleSend(fc *fakeConn, s protocol.Send) bool {
	key := fc.user + "\x00" + s.CorrelationID
	fs.mu.Lock()
	fs.seen[key]++
	ev := sendEvent{user: fc.user, send: s, n: fs.seen[key]}
	fs.mu.Unlock()
	fs.sends <- ev

	n := fc.outstanding.Add(1)
	fs.mu.Lock()
	fs.maxOutstand = max(fs.maxOutstand, n)
	limit := fs.limits.MaxInFlightSends
	fs.mu.Unlock()
	if limit > 0 && int(n) > limit {
		fc.outstanding.Add(-1)
		fs.mu.Lock()
		fs.creditErrors++
		fs.mu.Unlock()
		fs.answer(fc, protocol.ErrorFrame{Type: protocol.TypeError, CorrelationID: s.CorrelationID, Code: protocol.CodeCreditExhausted, Message: "too many sends in flight"})
		return true
	}

	var rep sendReply
	if fs.onSend != nil {
		rep = fs.onSend(ev)
	}
	if rep.drop {
		if rep.store {
			fs.commit(fc, s, false)
		}
		_ = fc.ws.CloseNow()
		return false
	}
	finish := func() {
		// Like the server, free the credit before the answer leaves: the
		// client may send again as soon as it reads it.
		if rep.code != "" {
			fc.outstanding.Add(-1)
			fs.answer(fc, protocol.ErrorFrame{Type: protocol.TypeError, CorrelationID: s.CorrelationID, Code: rep.code, Message: "fake says " + rep.code, RetryAfterMs: rep.retry})
			return
		}
		acc := fs.commit(fc, s, true)
		fc.outstanding.Add(-1)
		fs.answer(fc, acc)
	}
	if rep.hold != nil {
		go func() { <-rep.hold; finish() }()
	} else {
		finish()
	}
	return true
}

// commit stores s once per (user, correlationId) and optionally pushes it to
// the other members' connections; it returns the accepted answer.
func (fs *fakeServer) commit(fc *fakeConn, s protocol.Send, push bool) protocol.Accepted {
	key := fc.user + "\x00" + s.CorrelationID
	fs.mu.Lock()
	id, dup := fs.byCorr[key]
	var m protocol.Message
	if !dup {
		fs.seq++
		id = fmt.Sprintf("m%06d", fs.seq)
		fs.byCorr[key] = id
		m = protocol.Message{MessageID: id, CorrelationID: s.CorrelationID, ChatID: s.ChatID, SenderID: fc.user, Body: s.Body, SentAt: time.Now().UTC()}
		if ch := fs.chats[s.ChatID]; ch != nil {
			ch.msgs = append(ch.msgs, m)
		}
	}
	fs.mu.Unlock()
	if !dup && push {
		m.Type = protocol.TypeMessage
		fs.fanout(s.ChatID, fc, protocol.Encode(m))
	}
	return protocol.Accepted{Type: protocol.TypeAccepted, CorrelationID: s.CorrelationID, MessageID: id, ChatID: s.ChatID, SentAt: time.Now().UTC()}
}

func (fs *fakeServer) answer(fc *fakeConn, frame any) {
	_ = fc.ws.Write(context.Background(), websocket.MessageText, protocol.Encode(frame))
}

// fanout writes frame to every connection of the chat's members except
// the sending one.
func (fs *fakeServer) fanout(chat string, from *fakeConn, frame []byte) {
	fs.mu.Lock()
	var targets []*fakeConn
	if ch := fs.chats[chat]; ch != nil {
		for _, c := range fs.conns {
			if c != from && slices.Contains(ch.members, c.user) {
				targets = append(targets, c)
			}
		}
	}
	fs.mu.Unlock()
	for _, c := range targets {
		_ = c.ws.Write(context.Background(), websocket.MessageText, frame)
	}
}

// addChat creates a chat directly.
func (fs *fakeServer) addChat(id string, members ...string) {
	fs.mu.Lock()
	fs.chats[id] = &fakeChat{id: id, kind: "group", title: id, members: members}
	fs.mu.Unlock()
}

// store commits a message from sender into chat's history without pushing
// it (a message the recipient missed live) and returns it.
func (fs *fakeServer) store(chat, sender, body string) protocol.Message {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.seq++
	m := protocol.Message{MessageID: fmt.Sprintf("m%06d", fs.seq), CorrelationID: fmt.Sprintf("c%06d", fs.seq), ChatID: chat, SenderID: sender, Body: body, SentAt: time.Now().UTC()}
	fs.chats[chat].msgs = append(fs.chats[chat].msgs, m)
	return m
}

// push writes m as a message frame to every connection of user (it may be
// a duplicate: that is the point).
func (fs *fakeServer) push(user string, m protocol.Message) {
	m.Type = protocol.TypeMessage
	fs.mu.Lock()
	var targets []*fakeConn
	for _, c := range fs.conns {
		if c.user == user {
			targets = append(targets, c)
		}
	}
	fs.mu.Unlock()
	if len(targets) == 0 {
		fs.t.Errorf("fake: push to %s: no connection", user)
	}
	for _, c := range targets {
		_ = c.ws.Write(context.Background(), websocket.MessageText, protocol.Encode(m))
	}
}

// closeUser closes every connection of user with code.
func (fs *fakeServer) closeUser(user string, code websocket.StatusCode) {
	fs.mu.Lock()
	var targets []*fakeConn
	for _, c := range fs.conns {
		if c.user == user {
			targets = append(targets, c)
		}
	}
	fs.mu.Unlock()
	for _, c := range targets {
		_ = c.ws.Close(code, "fake closes")
	}
}
