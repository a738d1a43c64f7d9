package server

import (
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/textproto"
	"net/url"
	"path"
	"strings"

	"github.com/tetra-messenger/tetra/workload/protocol"
)

// refuseUpgrade answers, with the JSON error body of every other HTTP
// error ({"error":{"code","message"}}, PROTOCOL.md §2, §7.8), the upgrades
// websocket.Accept would refuse in plain text, and reports whether it did:
// a request that is no WebSocket handshake (426 with Upgrade: websocket,
// or 400 invalid for a bad version or key, as Accept answers them), and a
// browser page of an origin that is neither the request's host nor one of
// patterns (403 forbidden). It runs where Accept ran, after the token
// check and the connection limits, so a missing or bad token stays 401
// (§1) and a user over its connections 429, whatever the handshake.
//
// The checks are those of github.com/coder/websocket v1.8.15's Accept
// (verifyClientRequest, authenticateOrigin), copied rule for rule. Accept
// still runs its own afterwards, so if the two ever differ the origin
// check is never weaker than Accept's: what passes here and fails there
// is still refused, only in plain text (TestE2EUpgradeRefusalsJSON holds
// the copy to the library's answers).
func refuseUpgrade(w http.ResponseWriter, r *http.Request, patterns []string) bool {
	if status, msg := handshakeFault(w, r); status != 0 {
		var b errorBody
		b.Error.Code, b.Error.Message = protocol.CodeInvalid, msg
		writeJSON(w, status, b)
		return true
	}
	if err := checkOrigin(r, patterns); err != nil {
		writeError(w, protocol.CodeForbidden, err.Error())
		return true
	}
	return false
}

// handshakeFault is Accept's verifyClientRequest: the status and message
// of a request that is no WebSocket handshake, or 0; it sets the headers
// Accept sets with them.
func handshakeFault(w http.ResponseWriter, r *http.Request) (int, string) {
	const upgrade = "this endpoint takes a WebSocket handshake (GET with Connection: Upgrade, Upgrade: websocket, Sec-WebSocket-Version: 13 and a Sec-WebSocket-Key)"
	switch {
	case !r.ProtoAtLeast(1, 1):
		return http.StatusUpgradeRequired, fmt.Sprintf("%s: HTTP/1.1 at least, not %q", upgrade, r.Proto)
	case !hasToken(r.Header, "Connection", "Upgrade"), !hasToken(r.Header, "Upgrade", "websocket"):
		w.Header().Set("Connection", "Upgrade")
		w.Header().Set("Upgrade", "websocket")
		return http.StatusUpgradeRequired, upgrade
	case r.Method != http.MethodGet:
		return http.StatusMethodNotAllowed, upgrade
	case r.Header.Get("Sec-WebSocket-Version") != "13":
		w.Header().Set("Sec-WebSocket-Version", "13")
		return http.StatusBadRequest, fmt.Sprintf("only WebSocket version 13 is supported, not %.20q", r.Header.Get("Sec-WebSocket-Version"))
	}
	keys := r.Header.Values("Sec-WebSocket-Key")
	if len(keys) != 1 {
		return http.StatusBadRequest, "one Sec-WebSocket-Key header is required"
	}
	if v, err := base64.StdEncoding.DecodeString(strings.TrimSpace(keys[0])); err != nil || len(v) != 16 {
		return http.StatusBadRequest, "Sec-WebSocket-Key must be 16 bytes in base64"
	}
	return 0, ""
}

// hasToken is Accept's headerContainsTokenIgnoreCase: whether a
// comma-separated value of key is token, in any letter case.
func hasToken(h http.Header, key, token string) bool {
	for _, v := range h[textproto.CanonicalMIMEHeaderKey(key)] {
		for _, t := range strings.Split(strings.TrimSpace(v), ",") {
			if strings.EqualFold(strings.TrimSpace(t), token) {
				return true
			}
		}
	}
	return false
}

// checkOrigin is Accept's authenticateOrigin: no Origin header (not a
// browser) and an Origin whose host is the request's pass; otherwise the
// origin's host, or scheme://host for a pattern with "://", must match one
// of patterns (path.Match, in lower case). A bad pattern refuses, as
// Accept does (it logs it).
func checkOrigin(r *http.Request, patterns []string) error {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return nil
	}
	u, err := url.Parse(origin)
	if err != nil {
		return fmt.Errorf("origin %.100q is not a URL", origin)
	}
	if strings.EqualFold(r.Host, u.Host) {
		return nil
	}
	for _, p := range patterns {
		target := u.Host
		if strings.Contains(p, "://") {
			target = u.Scheme + "://" + u.Host
		}
		ok, err := path.Match(strings.ToLower(p), strings.ToLower(target))
		if errors.Is(err, path.ErrBadPattern) {
			return errors.New("origin not allowed")
		}
		if ok {
			return nil
		}
	}
	if u.Host == "" {
		return fmt.Errorf("origin %.100q is not a URL with a host", origin)
	}
	return fmt.Errorf("origin %.100q is not allowed to open a socket here (--allowed-origins)", u.Host)
}
