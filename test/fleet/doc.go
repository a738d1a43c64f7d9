// Package fleet_test runs several real `tetra serve` child processes on one
// PostgreSQL database and one Redis prefix (a fleet: distinct
// --index-owner, same --index-prefix) and kills or stalls one of them under
// load:
//
//   - SIGKILL of one process: the survivors' GC reaps the dead owner's pins
//     once its heartbeat lapses, so the outbox its unacknowledged messages
//     held drains within the owner TTL (not the 26 h age backstop); the dead
//     process's clients reconnect to a survivor and recover every message
//     from history, exactly once.
//   - SIGSTOP of one process for longer than its owner TTL: the other
//     process reaps it while it is stopped; on SIGCONT it learns at its next
//     heartbeat that it was reaped, closes its sockets with 1001, its
//     clients recover from history, and it keeps serving new connections.
//   - SIGKILL and restart in place (the same --index-owner, as a pod
//     restarted by its kubelet): the new process proves its predecessor
//     dead (the PostgreSQL session lock on the owner name is free) and
//     takes its owner record over at once instead of waiting out the owner
//     TTL.
//
// The in-process counterparts are in workload/server/fleet_e2e_test.go.
// The tests need PostgreSQL and Redis (internal/testenv): they skip loudly
// without them, and fail under CI=true.
package fleet_test
