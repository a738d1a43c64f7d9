// Package storecore is the part of the relational stores (../sqlite and
// ../postgres) that is the same algorithm on both: the rules of a change
// of members or admins (validate, lock, load, check, write) and of the
// reads of PROTOCOL.md §7 (validate, snapshot, membership, page or fill),
// written once against small interfaces whose methods are one statement
// (or one keyed read) of the backend's dialect, as river's riverdriver
// splits its job queue from its drivers.
//
// A backend implements Backend (Begin a change, Read a snapshot), ChangeTx
// and ReadTx; its exported methods of history.Store call the functions
// here. Commit, the group commit, stays in each backend (its statements are
// prepared and batched per dialect for CPU); so do the statements
// themselves, whose dialects differ.
//
// The helpers written once (Nanos, FromNanos, NewChatID, Storable,
// CheckPartition, SetKind) are the stored forms both backends share.
// Errors follow history.Store: rule violations wrap history.ErrInvalid,
// ErrNotFound, ErrNotMember or ErrForbidden, everything else the backend's
// history.ErrUnavailable.
package storecore
