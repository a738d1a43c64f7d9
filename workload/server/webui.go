package server

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/tetra-messenger/tetra/workload/config"
	"github.com/tetra-messenger/tetra/workload/protocol"
	"github.com/tetra-messenger/tetra/workload/web"
)

// DemoUsers are the users the demo switch signs in as (Config.Demo).
var DemoUsers = []string{"alice", "bob", "carol"}

// DemoTokenTTL is the default lifetime of a demo token (Config.DemoTokenTTL).
const DemoTokenTTL = 24 * time.Hour

// ErrDemoConflict is returned by Config.CheckDemo when Demo is asked for
// outside the embedded default.
var ErrDemoConflict = errors.New("server: --demo conflict")

// CheckDemo reports whether Demo may run with this configuration. The demo
// endpoint mints tokens for anyone who asks, so it runs only on the embedded
// default (SQLite, in-process index) with the secret persisted in the data
// directory, never with TETRA_JWT_SECRET (a secret shared with a real
// application) nor with another store or index. The error names the
// conflict. It returns nil when Demo is off.
func (c Config) CheckDemo() error {
	if !c.Demo {
		return nil
	}
	var why []string
	if c.JWTSecret != "" {
		why = append(why, "--demo and TETRA_JWT_SECRET cannot be used together (the demo would mint tokens "+
			"that every service holding that secret trusts); unset TETRA_JWT_SECRET or drop --demo")
	}
	if c.Store != "" && c.Store != "sqlite" && !strings.HasPrefix(c.Store, "sqlite://") {
		why = append(why, "--demo runs on the embedded SQLite store only, not --store "+config.RedactURL(c.Store))
	}
	if c.Index != "" && c.Index != "memory" {
		why = append(why, "--demo runs on the in-process index only, not --index "+config.RedactURL(c.Index))
	}
	if c.Outbox != "" {
		why = append(why, "--demo runs on the embedded outbox only, not --outbox "+config.RedactURL(c.Outbox))
	}
	if len(why) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrDemoConflict, strings.Join(why, "; "))
}

// demoOn reports whether the demo endpoints answer: Demo asked for and
// allowed. `tetra serve` refuses to start when CheckDemo fails; a server
// built in process with a conflicting Config keeps the demo off instead.
func (s *Server) demoOn() bool { return s.cfg.Demo && s.cfg.CheckDemo() == nil }

// webRoutes serves the browser client (package web) at "/" and "/static/",
// and the demo endpoints under "/demo/":
//
//	GET  /demo/users                -> 200 {"users":["alice","bob","carol"]}
//	POST /demo/token {"user":"bob"} -> 200 {"token":"...","user":"bob"}
//
// Both answer 404 unless the demo is on, so the page shows its demo switch
// only when GET /demo/users succeeds.
func (s *Server) webRoutes(mux *http.ServeMux) {
	if s.cfg.Demo && !s.demoOn() {
		s.log.Error("demo disabled: configuration conflict", "err", s.cfg.CheckDemo())
	} else if s.demoOn() {
		s.log.Warn("DEMO MODE: POST /demo/token mints tokens for " + strings.Join(DemoUsers, ", ") + " for anyone; never expose this server")
	}
	h := web.Handler()
	mux.Handle("GET /{$}", h)
	mux.Handle("GET /static/", h)
	mux.HandleFunc("GET /demo/users", s.handleDemoUsers)
	mux.HandleFunc("POST /demo/token", s.handleDemoToken)
}

func (s *Server) handleDemoUsers(w http.ResponseWriter, r *http.Request) {
	if !s.demoOn() {
		writeError(w, protocol.CodeNotFound, "the demo is off (tetra serve --demo)")
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"users": DemoUsers})
}

func (s *Server) handleDemoToken(w http.ResponseWriter, r *http.Request) {
	if !s.demoOn() {
		writeError(w, protocol.CodeNotFound, "the demo is off (tetra serve --demo)")
		return
	}
	var req struct {
		User string `json:"user"`
	}
	if !decodeBody(w, r, &req) {
		return
	}
	if !slices.Contains(DemoUsers, req.User) {
		writeError(w, protocol.CodeInvalid, "user must be one of "+strings.Join(DemoUsers, ", "))
		return
	}
	ttl := s.cfg.DemoTokenTTL
	if ttl <= 0 {
		ttl = DemoTokenTTL
	}
	tok, err := s.signer.Issue(req.User, ttl)
	if err != nil {
		writeError(w, protocol.CodeInvalid, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"token": tok, "user": req.User})
}
