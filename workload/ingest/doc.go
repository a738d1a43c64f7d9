// Package ingest is the accept pipeline: a bounded inbound queue feeding a
// group committer that writes history (and the outbox) in batched
// transactions, then answers the senders, then hands the committed messages
// to live delivery — persist, ack, hand-off, in that strict order, so an
// `accepted` or a live `message` frame is only ever about a committed
// message (G1).
//
// Submit never blocks: when the queue (default 8000) is full the send is shed
// with ErrOverloaded and the client gets the `overloaded` error code. The
// committer takes up to BatchSize drafts (default 72) or whatever arrived
// within BatchWait (default 10 ms) of the first, whichever comes first, and
// commits them in one history.Store.Commit; while sends arrive BatchWait or
// more apart (a moving average of their gaps), it does not wait at all, so
// a lone send at a low rate commits at once. When a backlog is already
// queued at that point, the same transaction also takes it, up to MaxBatch
// (default 8 x 72), so under load each fsync carries more messages rather
// than the queue growing. A failed commit answers every
// draft of the batch with ErrOverloaded-style failure: nothing was stored and
// the client may resend with the same correlationId.
//
// Read receipts take the same path at lower value: a separate batcher
// (default 64 receipts or 10 ms) saves them in one transaction and then
// hands them off for fan-out to the other online members.
package ingest
