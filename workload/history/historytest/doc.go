// Package historytest is the conformance suite every history.Store runs
// unchanged: the SQLite store today, the PostgreSQL store next.
//
// Run exercises the contract of history.Store as its comments state it:
// direct chats that are idempotent from either side and under concurrent
// creation, groups and their membership rules, the group commit with its
// idempotency key (SenderID, CorrelationID) across and within batches,
// per-draft errors that neither fail the batch nor store anything, history
// paging by the durable sequence with the fail-safe cursor of PROTOCOL.md §4
// (an unknown, purged or foreign cursor starts over, never skips), retention
// purges, and SentAt kept to the nanosecond in UTC.
//
// When the store under test also implements outbox.Log, the suite checks that
// the deliveries Commit reports are exactly the rows the log holds, each
// joined to its history row, and that purging history removes the outbox
// rows of the purged messages. A store that writes no outbox rows (Kafka
// mode) reports no deliveries and adds nothing to its log. Each subtest asks
// newStore for a fresh, empty store, so subtests run in parallel.
//
// The suite imports package outbox (which itself imports history) for
// those checks. That is not an upward import: only the tests of the stores
// (store/sqlite, store/postgres) and of outbox/kafka import this package,
// all of which sit above outbox, and no production package does; the
// stores under test implement both contracts in one transaction, and the
// suite checks that they agree.
package historytest
