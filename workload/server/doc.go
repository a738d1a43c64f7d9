// Package server wires the workload together and serves it: the HTTP API of
// PROTOCOL.md §2 and §4, the WebSocket endpoint of §3, health endpoints, and
// the background machinery (the accept pipeline of package ingest, live
// delivery of package delivery, history retention).
//
// A Server is a value that tests and the load generator start in process on
// port 0 and stop cleanly: New opens the backends named by Config through
// package backends (the embedded default is SQLite in Config.DataDir and an
// in-process waterline index) and wires the engine and the pipeline over
// them, Start listens, Shutdown drains (refuses new sends, finishes the
// commits in flight, closes sockets with 1001) and releases everything.
// It names no store and no index: a new backend is an edit of package
// backends (which also builds the Kafka relay, Backends.NewRelay; the
// server starts and stops it with the pipeline).
//
// Each WebSocket connection is a session with one reader and one writer
// goroutine, pings on timers (a goroutine exists only while a ping waits
// for its pong) and a bounded outbound queue. The session enforces the
// client's side of the bargain: credits (maxInFlightSends unanswered sends),
// a send rate (golang.org/x/time/rate), the body limit, and a cap on bad
// frames (close 1008). Errors are mapped to the contract's codes in one
// place (errors.go).
package server
