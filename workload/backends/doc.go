// Package backends opens everything a tetra process stores in or
// coordinates through, in one place: the history store (SQLite or
// PostgreSQL), the outbox (the store's own, or a Kafka topic with the relay
// that feeds it), the waterline index (in process or Redis) with the user
// presence kept beside it, and the token signer whose secret may live in
// the data directory. Package server takes the result and only wires the
// HTTP API, the WebSocket endpoint and the pipeline over it; a new backend
// is an edit here, not in the HTTP package.
//
// Open runs the steps in this order, each undone by Close in reverse if a
// later one fails (and by Close at the end of the process):
//
//  1. the outbox URL is checked (Kafka);
//  2. the store is opened: SQLite under an exclusive lock of its directory
//     (datadir.go: the embedded default is one process only), or
//     PostgreSQL;
//  3. the token secret is read or created (auth.LoadSecret), only now that
//     the embedded default's directory is locked;
//  4. the Kafka outbox is opened (Config.Outbox set);
//  5. the waterline index is opened (Config.Index);
//  6. on PostgreSQL, the instance lock and the owner lock are taken
//     (locks.go): a process that disagrees with the running fleet on the
//     Redis deployment, key prefix or token secret is refused, naming what
//     differs (fleet.go), and a process restarted in place takes its dead
//     predecessor's owner record over;
//  7. the fleet identity is recorded in the store for the next process's
//     refusal to name;
//  8. Config.WrapStore, when set, wraps the store (fault injection).
//
// The locks of steps 2 and 6 guard the whole life of what Open opened, so
// Close releases them last, after the index, the Kafka log and the store
// are closed.
//
// Errors keep the "server:" prefix and the wording they had when this code
// lived in package server: `tetra serve` prints them, the operator quotes
// the last line in its CrashLooping condition and docs/operator.md shows
// them.
package backends
