package server

import (
	"net/http"
	"net/http/pprof"
)

// pprofRoutes serves Go's runtime profiles (net/http/pprof) under
// /debug/pprof/ on the server's own port, behind the admin token (the same
// as /admin/stats; mint one with `tetra token --admin`), so a running
// server can be profiled without a second listener:
//
//	curl -H "Authorization: Bearer $ADMIN" "http://host:8080/debug/pprof/profile?seconds=10" > cpu.pprof
//	go tool pprof -top cpu.pprof
//
// Profiles: profile (CPU, ?seconds=), heap, allocs, goroutine, block,
// mutex, threadcreate, trace (?seconds=); /debug/pprof/ lists them. A
// query string that does not parse is 400 invalid (strictQuery), not a
// default ?seconds= the handler would fall back to.
func (s *Server) pprofRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/", s.adminOnly(strictQuery(pprof.Index)))
	mux.HandleFunc("GET /debug/pprof/cmdline", s.adminOnly(strictQuery(pprof.Cmdline)))
	mux.HandleFunc("GET /debug/pprof/profile", s.adminOnly(strictQuery(pprof.Profile)))
	mux.HandleFunc("GET /debug/pprof/symbol", s.adminOnly(strictQuery(pprof.Symbol)))
	mux.HandleFunc("GET /debug/pprof/trace", s.adminOnly(strictQuery(pprof.Trace)))
}
