// Package outboxtest is the conformance suite every outbox.Log runs
// unchanged: the SQLite and PostgreSQL outboxes, whose rows are appended by
// history.Store.Commit, and the Kafka log, whose rows a relay appends.
//
// A backend describes itself with a Harness: the Log under test and an
// Append function that commits one message for a set of recipients the way
// production does (a history transaction, or a relayed Kafka transaction)
// and reports the rows it produced. Run then checks the linear contract:
// Scan order and its after/limit semantics, positions that only grow and
// are never reused after DeleteBelow, DeleteBelow as a prefix delete that
// counts what it removed, a Head that never goes back and bounds every later
// row from below, and Stats.
//
// The key hazard of a log scanned by position is a transaction that takes a
// position early and commits late: a follower that already scanned past a
// later row would skip it forever. The suite appends from many goroutines
// while a follower scans forward from its last position, and checks that the
// follower saw every row exactly once, in order. A backend whose
// transactions can commit out of order also provides Harness.Hold, with
// which the suite commits two transactions in reverse order on purpose.
package outboxtest
