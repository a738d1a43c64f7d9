package client

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/tetra-messenger/tetra/workload/protocol"
)

// Defaults applied by New to the zero fields of Config.
const (
	DefaultDevice             = "default"
	DefaultBackoffMin         = 100 * time.Millisecond
	DefaultBackoffMax         = 5 * time.Second
	DefaultAckDelay           = time.Duration(0) // acks leave as soon as the writer is free
	DefaultAckBatch           = 256
	DefaultLimitRetryWait     = 100 * time.Millisecond
	DefaultHistoryPageSize    = 500
	DefaultDedupeWindow       = 4096
	DefaultMaxUnsyncedPerChat = 4096
	DefaultHandshakeTimeout   = 10 * time.Second
	DefaultWriteTimeout       = 10 * time.Second
	DefaultHTTPTimeout        = 30 * time.Second
)

// maxFrameBytes is the read limit of the client's WebSocket: far above any
// frame the server sends (a message frame is at most maxBodyBytes of body,
// escaped, plus ids), so only a broken peer hits it.
const maxFrameBytes = 1 << 20

// Config configures a Client. Only URL and Token are required; every zero
// field takes the default named in its comment. Durations are wall-clock
// durations; counts are numbers of ids or messages.
type Config struct {
	// URL is the server's base URL, http://host:port or https://host:port,
	// optionally with a path prefix. The WebSocket endpoint is URL + "/ws"
	// (ws:// or wss://), the API is URL + "/api/...". ws:// and wss:// are
	// accepted too and mapped to http:// and https://.
	URL string

	// Token is the JWT sent as "Authorization: Bearer <token>" on every HTTP
	// request and on the WebSocket upgrade.
	Token string

	// TokenInQuery also passes the token as the token= query parameter of
	// the upgrade, as browsers must. The header is sent either way.
	TokenInQuery bool

	// TokenRefresh, when set, supplies a new token for the same user. The
	// application owns identity and mints tokens (PROTOCOL.md §1), so the
	// client asks it: RefreshBefore ahead of the current token's exp
	// claim (read from the JWT without verifying it; a token without exp
	// is never refreshed), the client calls TokenRefresh, sends the new
	// token on the live connection ({"type":"refresh"}, answered
	// {"type":"refreshed"}) and uses it for every later HTTP call and
	// (re)connect, so the server never closes the socket with 4005 (token
	// expired). It is also called before a (re)connect when the token has
	// expired, and once after an upgrade answered HTTP 401 (when it then
	// supplies another token the client retries instead of stopping).
	//
	// ctx ends after HTTPTimeout or when the connection ends; a call that
	// fails (an error or an empty token) is reported to OnError and retried
	// with the client's backoff while the connection lives. It runs on a
	// goroutine of its own, never concurrently with itself, and may call
	// the application's own services; Close waits for it to return.
	// Default nil: the token is used until the server refuses it (close
	// 4005 on the socket, then HTTP 401 on the next upgrade, which stops
	// the client).
	TokenRefresh func(ctx context.Context) (string, error)

	// RefreshBefore is how long before the token's exp TokenRefresh is
	// called; a token with less than twice that left is refreshed halfway
	// through what is left. Default DefaultRefreshBefore (30 s).
	RefreshBefore time.Duration

	// Device is the device name of the connection (the device= query
	// parameter). Default DefaultDevice ("default"). The server keeps one
	// live connection per (user, device).
	Device string

	// OnMessage is called once per new messageId, whether the message came
	// live or from the history sync that follows every (re)connect. The
	// client's own sends (once accepted) count as seen and are not reported.
	// Messages are reported with Type set to protocol.TypeMessage.
	//
	// Callbacks (OnMessage, OnRead, OnChat, OnTyping, OnPresence, OnState, OnError) are never called
	// concurrently with each other. They run on the client's own
	// goroutines: a slow callback delays reads and acks, and a callback must
	// not wait on the client (Send, Read, WaitConnected): hand the work to
	// another goroutine instead.
	OnMessage func(protocol.Message)

	// OnRead is called for every read receipt the server forwards: other
	// members' (UserID is theirs) and this user's own from its other
	// devices (UserID is this user's: mark the chat read up to MessageID
	// here too). See PROTOCOL.md §3 read.
	OnRead func(protocol.Read)

	// OnChat is called for every chat event (PROTOCOL.md §3): ChatAdded
	// when this user was added to a chat (the client syncs its history
	// from then on), ChatRemoved when it was removed or left (the client
	// stops syncing it), ChatUpdated when the members of one of its chats
	// changed. The event's Chat has LastRead but no Unread (HasUnread is
	// false).
	OnChat func(ChatEvent)

	// OnTyping is called for every typing frame the server forwards:
	// UserID is typing in ChatID (PROTOCOL.md §7.4; show it for
	// protocol.TypingShown after the last one).
	OnTyping func(protocol.Typing)

	// OnPresence is called for every presence change of a user who shares
	// a chat with this user (PROTOCOL.md §7.4).
	OnPresence func(protocol.Presence)

	// OnState is called on every change of the connection state.
	OnState func(StateChange)

	// OnError is called with failures that no call returns: error frames
	// that answer no pending send, history syncs that failed (they are
	// retried), connection attempts that failed (they are retried).
	OnError func(error)

	// BackoffMin and BackoffMax bound the exponential backoff between
	// reconnection attempts and between retries of an overloaded send: the
	// n-th consecutive wait is min(BackoffMin*2^n, BackoffMax), jittered
	// uniformly to [d/2, d]. Defaults DefaultBackoffMin (100 ms) and
	// DefaultBackoffMax (5 s).
	BackoffMin, BackoffMax time.Duration

	// ManualAck turns automatic acknowledgement off. By default (false) the
	// client acknowledges every message frame on receipt, before OnMessage
	// runs, duplicates included (a duplicate means the server did not see
	// the earlier ack). With ManualAck the caller acknowledges with
	// Client.Ack; duplicates, which the caller never sees, are still acked
	// by the client. (The zero value means "auto", hence the negative name.)
	ManualAck bool

	// AckDelay is how long acks are held to be coalesced into one ack frame.
	// Default 0: an ack frame leaves as soon as the writer goroutine is
	// free, carrying every id that arrived meanwhile, so acks batch by
	// themselves under load and add no latency when idle. A positive delay
	// makes fewer, bigger frames, but the server withdraws a connection
	// with too many unacknowledged messages (close 4003, max-pending, 20 by
	// default and not announced in hello): keep it to a few milliseconds.
	// Whatever the delay, a frame leaves as soon as AckBatch ids wait.
	AckDelay time.Duration

	// AckBatch is the most ids per ack frame, 1..protocol.MaxAckIDs.
	// Default DefaultAckBatch (256).
	AckBatch int

	// LimitRetryWait is the wait (jittered to [w/2, w]) before a send
	// answered rate_limited or credit_exhausted is retried. Default
	// DefaultLimitRetryWait (100 ms).
	LimitRetryWait time.Duration

	// ReturnLimitErrors makes Send return rate_limited and credit_exhausted
	// as *Error instead of retrying them.
	ReturnLimitErrors bool

	// DisableRateLimit turns off the client-side send rate limiter, which by
	// default paces send frames at hello's sendsPerSecond so a well-behaved
	// client is not answered rate_limited.
	DisableRateLimit bool

	// SendBurst is the burst of the client-side rate limiter. Default: the
	// server's sendsPerSecond (one second's worth), the usual server bucket.
	SendBurst int

	// ReconnectOnSuperseded makes the client reconnect after close 4001.
	// By default (false) a 4001 close stops the client with ErrSuperseded:
	// another connection of the same (user, device) took over, and
	// reconnecting would take it back, the two connections evicting each
	// other forever.
	ReconnectOnSuperseded bool

	// Chats lists the chat ids to resynchronise after every (re)connect.
	// Default: GET /api/chats. Chats the client learnt of otherwise (a live
	// message, CreateDirect, InitialCursors...) are synced too.
	Chats func(ctx context.Context) ([]string, error)

	// InitialCursors seeds the per-chat cursors (chat id -> the last
	// messageId already processed), for example from Client.Cursors saved by
	// an earlier run. Without a cursor a chat is synced from the beginning
	// of its retained history.
	InitialCursors map[string]string

	// HistoryPageSize is the limit= of history requests, 1..1000. Default
	// DefaultHistoryPageSize (500).
	HistoryPageSize int

	// DedupeWindow is how many recently seen messageIds the client
	// remembers to drop live redeliveries, whatever their chat. Default
	// DefaultDedupeWindow (4096). See the package documentation for the
	// memory bound.
	DedupeWindow int

	// MaxUnsyncedPerChat bounds the ids a chat may hold beyond its cursor
	// (received live, not yet confirmed by a history page): when a chat
	// reaches it the client pages that chat's history in the background to
	// advance the cursor and forget them. Default DefaultMaxUnsyncedPerChat
	// (4096); a negative value disables the catch-up (unbounded).
	MaxUnsyncedPerChat int

	// PingInterval, when positive, sends {"type":"ping"} at this interval and
	// drops the connection (and reconnects) when nothing at all (frame,
	// pong or WebSocket ping) was received for three intervals: dead-peer
	// detection. Default 0: no application pings and no such check; the
	// server's WebSocket pings are answered automatically, the server closes
	// idle connections (4004), and TCP keep-alive ends dead ones.
	PingInterval time.Duration

	// HandshakeTimeout bounds one connection attempt: the upgrade and the
	// hello frame. Default DefaultHandshakeTimeout (10 s).
	HandshakeTimeout time.Duration

	// WriteTimeout bounds the write of one frame; a write that takes longer
	// drops the connection. Default DefaultWriteTimeout (10 s).
	WriteTimeout time.Duration

	// HTTPTimeout bounds one HTTP API call when the caller's context has no
	// earlier deadline. Default DefaultHTTPTimeout (30 s).
	HTTPTimeout time.Duration

	// HTTPClient carries the HTTP API calls and the WebSocket upgrades.
	// Default: a client shared by every Client of the process, HTTP/1.1 with
	// keep-alive (up to 64 idle connections per host), so thousands of
	// clients in one load generator reuse connections. Its Timeout must be
	// zero (use contexts).
	HTTPClient *http.Client
}

// sharedHTTPClient is the default HTTPClient: HTTP/1.1 only (a WebSocket
// upgrade needs it), generous keep-alive.
var sharedHTTPClient = func() *http.Client {
	t := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:          0, // no global cap
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		ForceAttemptHTTP2:     false,
		TLSNextProto:          map[string]func(string, *tls.Conn) http.RoundTripper{},
	}
	return &http.Client{Transport: t}
}()

// withDefaults validates cfg and returns it with defaults applied, plus the
// base http(s) URL and the WebSocket URL.
func (cfg Config) withDefaults() (Config, *url.URL, string, error) {
	bad := func(field, format string, args ...any) (Config, *url.URL, string, error) {
		return cfg, nil, "", fmt.Errorf("client: config %s: %s", field, fmt.Sprintf(format, args...))
	}
	if cfg.URL == "" {
		return bad("URL", "required (the server's base URL, http://host:port)")
	}
	base, err := url.Parse(cfg.URL)
	if err != nil {
		return bad("URL", "%v", err)
	}
	switch base.Scheme {
	case "http", "https":
	case "ws":
		base.Scheme = "http"
	case "wss":
		base.Scheme = "https"
	default:
		return bad("URL", "scheme must be http, https, ws or wss, got %q", base.Scheme)
	}
	if base.Host == "" {
		return bad("URL", "has no host")
	}
	base.Path = strings.TrimRight(base.Path, "/")
	base.RawPath = ""
	base.RawQuery, base.Fragment = "", ""
	if cfg.Token == "" {
		return bad("Token", "required (a JWT whose sub is the user id)")
	}
	if cfg.Device == "" {
		cfg.Device = DefaultDevice
	}
	if len(cfg.Device) > protocol.MaxIDLen {
		return bad("Device", "at most %d bytes", protocol.MaxIDLen)
	}

	durations := []struct {
		name string
		p    *time.Duration
		def  time.Duration
	}{
		{"BackoffMin", &cfg.BackoffMin, DefaultBackoffMin},
		{"BackoffMax", &cfg.BackoffMax, DefaultBackoffMax},
		{"LimitRetryWait", &cfg.LimitRetryWait, DefaultLimitRetryWait},
		{"HandshakeTimeout", &cfg.HandshakeTimeout, DefaultHandshakeTimeout},
		{"WriteTimeout", &cfg.WriteTimeout, DefaultWriteTimeout},
		{"HTTPTimeout", &cfg.HTTPTimeout, DefaultHTTPTimeout},
		{"RefreshBefore", &cfg.RefreshBefore, DefaultRefreshBefore},
	}
	for _, d := range durations {
		switch {
		case *d.p < 0:
			return bad(d.name, "must be >= 0 (0 means the default %v), got %v", d.def, *d.p)
		case *d.p == 0:
			*d.p = d.def
		}
	}
	if cfg.AckDelay < 0 {
		return bad("AckDelay", "must be >= 0 (0 sends acks as soon as possible), got %v", cfg.AckDelay)
	}
	if cfg.PingInterval < 0 {
		return bad("PingInterval", "must be >= 0 (0 disables application pings), got %v", cfg.PingInterval)
	}
	if cfg.BackoffMin > cfg.BackoffMax {
		return bad("BackoffMin", "%v is above BackoffMax %v", cfg.BackoffMin, cfg.BackoffMax)
	}

	ints := []struct {
		name     string
		p        *int
		def, max int
	}{
		{"AckBatch", &cfg.AckBatch, DefaultAckBatch, protocol.MaxAckIDs},
		{"HistoryPageSize", &cfg.HistoryPageSize, DefaultHistoryPageSize, 1000},
		{"DedupeWindow", &cfg.DedupeWindow, DefaultDedupeWindow, 1 << 24},
		{"SendBurst", &cfg.SendBurst, 0, 1 << 20},
	}
	for _, n := range ints {
		switch {
		case *n.p < 0 || *n.p > n.max:
			return bad(n.name, "must be in 0..%d (0 means the default), got %d", n.max, *n.p)
		case *n.p == 0:
			*n.p = n.def
		}
	}
	switch {
	case cfg.MaxUnsyncedPerChat == 0:
		cfg.MaxUnsyncedPerChat = DefaultMaxUnsyncedPerChat
	case cfg.MaxUnsyncedPerChat < 0:
		cfg.MaxUnsyncedPerChat = -1
	}

	if cfg.HTTPClient == nil {
		cfg.HTTPClient = sharedHTTPClient
	}
	if cfg.HTTPClient.Timeout != 0 {
		return bad("HTTPClient", "Timeout must be 0 (the client bounds calls with contexts; see HTTPTimeout)")
	}

	ws := *base
	if ws.Scheme == "https" {
		ws.Scheme = "wss"
	} else {
		ws.Scheme = "ws"
	}
	ws.Path = base.Path + "/ws"
	q := url.Values{"device": {cfg.Device}}
	ws.RawQuery = q.Encode() // the token joins at each dial (Client.dialURL)
	return cfg, base, ws.String(), nil
}
