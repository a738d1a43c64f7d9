// Package history defines tetra's durable truth: chats, their members, and
// the message history, together with the transaction that accepts messages.
//
// History is the record of what was said, keyed for retrieval by chat and
// ordered by a durable, monotonic sequence (Message.Seq, history.id in SQL)
// assigned at commit. Identity (the ULID messageId) is never used as order:
// paging resolves the client's messageId cursor to its sequence position
// server-side, and an unresolvable cursor falls back to the start of the
// retained conversation (PROTOCOL.md §4), so recovery degrades to a full
// sync and never to a gap (paper invariant I5).
//
// Store.Commit is the group commit of the accept pipeline: in one
// transaction it writes each message's history row first and then one outbox
// row per recipient (paper invariant I1), or only the history rows when the
// outbox lives elsewhere (Kafka, where a relay feeds the log from history).
// Implementations live in ../store/sqlite and ../store/postgres (what they
// share in ../store/storecore) and all run the conformance suite in
// ./historytest.
//
// ChatAPI (chatapi.go) is what PROTOCOL.md §7 adds: pages in both
// directions, the chat list by activity, admins, and what a member may
// read. Membership intervals are kept by sequence, not by clock: an add
// starts one after the highest Seq committed then, a removal ends it at its
// cutoff, and Visibility applies them to every page, last message and
// unread count of a "member" group.
package history
