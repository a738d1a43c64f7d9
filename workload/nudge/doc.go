// Package nudge sends the offline nudge (docs/nudge.md): the (message,
// recipient) pairs live delivery did not reach, which package delivery
// determines (reason "offline": no connection registered when the message
// was committed; "withdrawn": a reaper withdrew the connection with the
// message in its push window), batched to the embedding application's
// webhook, which may send a mobile push. tetra sends no push itself, and
// the message is in history either way (G1).
//
// A Nudger implements delivery.NudgeSink. The engine hands it nudges
// without waiting: a bounded queue (Config.QueueSize, default 10,000)
// drops the oldest when full; one goroutine posts batches of up to
// Config.BatchSize (default 100) once the oldest queued nudge has waited
// Config.MaxDelay (default 1 s), retrying network errors, timeouts, 5xx
// and 429 with exponential backoff and jitter (200 ms doubling to 30 s);
// any other status drops the batch. Delivery is at least once: the
// receiver deduplicates by Item.ID. Every request is signed with
// HMAC-SHA256 over its timestamp and body (sign.go; Verify is the
// receiver's side, used by workload/cmd/nudge-receiver).
//
// In a fleet (Config.Presence, the Redis index's presence keys, set by
// package backends) the offline candidates are checked against the
// connections of every process before they are sent, and this process
// publishes its own connections there; with the in-process index the
// engine's registry is the presence.
package nudge
