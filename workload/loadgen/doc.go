// Package loadgen drives a tetra server with many real WebSocket clients
// (package client) at a target message rate, then reconciles every accepted
// message against what each of its recipients received, live or recovered
// from history: the load test is the proof of "no accepted message is ever
// lost", not just a throughput number.
//
// By default Run starts its own server as a separate process (the same
// binary's `serve` command) so the report's peak RSS and CPU seconds are the
// server's alone; it can also target a running server (Config.URL) or start
// one in process (Config.InProcess, used by tests, which then report no RSS).
//
// Reconciliation: the expected set is, for every accepted message, each
// member of its chat other than the sender. A pair is delivered when the
// recipient's client reported the messageId (its OnMessage is already
// deduplicated across live frames and history syncs). After the send phase
// the generator waits up to Config.Drain for the stragglers, then pages
// history for any pair still missing: found there is "recovered at the
// end" (G3 held), absent is lost, and lost must be 0.
package loadgen
