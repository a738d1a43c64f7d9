package client

import (
	"context"
	"fmt"
	"net/url"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/tetra-messenger/tetra/workload/protocol"
)

// DefaultRefreshBefore is how long before its exp a token is refreshed
// (Config.TokenRefresh), for tokens that live long enough; a shorter-lived
// token is refreshed halfway through what is left of it.
const DefaultRefreshBefore = 30 * time.Second

// tokenState is the client's current token and its exp claim.
type tokenState struct {
	mu  sync.Mutex
	tok string
	exp time.Time // zero: none, or not a JWT
}

// tokenSub reads the sub claim of a JWT without verifying it: the user
// the server will see; "" when the token has none or is not a JWT.
func tokenSub(tok string) string {
	var claims jwt.RegisteredClaims
	if _, _, err := jwt.NewParser().ParseUnverified(tok, &claims); err != nil {
		return ""
	}
	return claims.Subject
}

// tokenExp reads the exp claim of a JWT without verifying it (the server
// does that); the zero time when the token has none or is not a JWT.
func tokenExp(tok string) time.Time {
	var claims jwt.RegisteredClaims
	if _, _, err := jwt.NewParser().ParseUnverified(tok, &claims); err != nil || claims.ExpiresAt == nil {
		return time.Time{}
	}
	return claims.ExpiresAt.Time
}

func (ts *tokenState) set(tok string) {
	exp := tokenExp(tok)
	ts.mu.Lock()
	ts.tok, ts.exp = tok, exp
	ts.mu.Unlock()
}

func (ts *tokenState) get() (string, time.Time) {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.tok, ts.exp
}

// Token returns the token the client uses now: Config.Token, or the last
// one Config.TokenRefresh supplied.
func (c *Client) Token() string {
	tok, _ := c.tok.get()
	return tok
}

// dialURL is the WebSocket URL with the current token in the query when
// Config.TokenInQuery asks for it.
func (c *Client) dialURL(tok string) string {
	if !c.cfg.TokenInQuery {
		return c.wsURL
	}
	u, err := url.Parse(c.wsURL)
	if err != nil {
		return c.wsURL
	}
	q := u.Query()
	q.Set("token", tok)
	u.RawQuery = q.Encode()
	return u.String()
}

// refreshIn returns how long to wait before refreshing a token that
// expires at exp, and false when it needs no refresh (no TokenRefresh, or
// no exp).
func (c *Client) refreshIn(exp time.Time) (time.Duration, bool) {
	if c.cfg.TokenRefresh == nil || exp.IsZero() {
		return 0, false
	}
	left := time.Until(exp)
	before := min(c.cfg.RefreshBefore, left/2)
	return max(left-before, 0), true
}

// fetchToken calls Config.TokenRefresh (bounded by HTTPTimeout), installs
// the new token and returns it. An error is wrapped; the current token is
// kept.
func (c *Client) fetchToken(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.HTTPTimeout)
	defer cancel()
	tok, err := c.cfg.TokenRefresh(ctx)
	if err == nil && tok == "" {
		err = fmt.Errorf("it returned an empty token")
	}
	if err != nil {
		return "", fmt.Errorf("client: TokenRefresh: %w", err)
	}
	c.tok.set(tok)
	return tok, nil
}

// freshForDial refreshes the token before a (re)connect when it has
// expired (the upgrade would get 401). Failures are reported; the dial
// then goes ahead with the old token and its answer decides.
func (c *Client) freshForDial(ctx context.Context) {
	_, exp := c.tok.get()
	if c.cfg.TokenRefresh == nil || exp.IsZero() || time.Now().Before(exp) {
		return
	}
	if _, err := c.fetchToken(ctx); err != nil {
		c.emitError(err)
	}
}

// refreshResult is what a background TokenRefresh call produced.
type refreshResult struct {
	tok string
	err error
}

// refreshOnConn fetches a new token and hands it to the live connection
// cn with a refresh frame (PROTOCOL.md §1); the server answers refreshed,
// or an error (reported through OnError) that leaves the old expiry. It
// runs on a goroutine of its own and reports on done.
func (c *Client) refreshOnConn(ctx context.Context, cn *conn, done chan<- refreshResult) {
	tok, err := c.fetchToken(ctx)
	if err == nil {
		err = cn.enqueue(ctx, protocol.Encode(protocol.Refresh{Type: protocol.TypeRefresh, Token: tok}))
		if err != nil {
			// The connection is gone; the next one dials with tok.
			err = nil
		}
	}
	done <- refreshResult{tok: tok, err: err}
}
