package storecore

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/oklog/ulid/v2"

	"github.com/tetra-messenger/tetra/workload/history"
	"github.com/tetra-messenger/tetra/workload/text"
)

// Nanos converts t to the stored form: Unix nanoseconds.
func Nanos(t time.Time) int64 { return t.UnixNano() }

// FromNanos converts a stored time back: UTC, nanoseconds kept.
func FromNanos(n int64) time.Time { return time.Unix(0, n).UTC() }

// FromNanosOrZero is FromNanos, with 0 (never) as the zero time.
func FromNanosOrZero(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return FromNanos(n)
}

// NewChatID mints a chat id: "c_" followed by a ULID.
func NewChatID() string { return "c_" + ulid.Make().String() }

// Storable reports whether s is text a store can hold (text.Valid: UTF-8,
// no NUL). An id that is not can name no stored row: PostgreSQL would
// refuse it as a parameter, so the lookups answer "none" before asking.
func Storable(s string) bool { return text.Valid(s) }

// ValidUser checks a user id (history.CheckUser, the rule shared by every
// store and the token layer); what names the argument in the error.
func ValidUser(what, id string) error { return history.CheckUser(what, id) }

// Partition is the one partition of a relational outbox.
const Partition int32 = 0

// CheckPartition refuses every partition but Partition; backend ("sqlite",
// "postgres") and its label ("SQLite", "PostgreSQL") name the store in the
// error, op the call.
func CheckPartition(backend, label, op string, p int32) error {
	if p != Partition {
		return fmt.Errorf("%s: outbox %s: unknown partition %d: the %s outbox has only partition 0", backend, op, p, label)
	}
	return nil
}

// SetKind fills the edit and delete fields of m from their columns (kind,
// ref, edited_at in Unix nanoseconds, 0 for never, deleted).
func SetKind(m *history.Message, kind int, ref string, editedAt int64, deleted bool) {
	m.Edits, m.Deletes, m.EditedAt = "", "", FromNanosOrZero(editedAt)
	switch kind {
	case history.KindEdit:
		m.Edits = ref
	case history.KindDelete:
		m.Deletes = ref
	}
	m.Deleted = deleted
}

// notFound is the error of an unknown (or closed) chat.
func notFound(chatID string) error { return fmt.Errorf("%w: chat %q", history.ErrNotFound, chatID) }

// NotFound is the error of an unknown or closed chat: history.ErrNotFound
// naming chatID.
func NotFound(chatID string) error { return notFound(chatID) }

// CheckPageLimit refuses a page limit below 1 (history.Store.Page).
func CheckPageLimit(limit int) error {
	if limit < 1 {
		return fmt.Errorf("%w: page limit %d, want at least 1", history.ErrInvalid, limit)
	}
	return nil
}

// CheckFeedLimit refuses a feed limit below 1 (history.Feed.HistoryAfter).
func CheckFeedLimit(limit int) error {
	if limit < 1 {
		return fmt.Errorf("%w: history feed limit %d, want at least 1", history.ErrInvalid, limit)
	}
	return nil
}

// PurgeCut is the preamble of history.Store.PurgeHistory: ErrInvalid for
// limit < 1; none true when cutoff is before history.MinSentAt (no row can
// be older, nothing to do); else cut, the stored form of cutoff (Unix
// nanoseconds), math.MaxInt64 at or after history.MaxSentAt (every row is
// older).
func PurgeCut(cutoff time.Time, limit int) (cut int64, none bool, err error) {
	if limit < 1 {
		return 0, false, fmt.Errorf("%w: purge limit %d, want at least 1", history.ErrInvalid, limit)
	}
	if cutoff.Before(history.MinSentAt) {
		return 0, true, nil
	}
	cut = int64(math.MaxInt64)
	if cutoff.Before(history.MaxSentAt) {
		cut = Nanos(cutoff)
	}
	return cut, false, nil
}

// OnePartition gives a relational outbox log (outbox.Log) its partitions:
// one, Partition. A store embeds it.
type OnePartition struct{}

// Partitions returns [Partition]: the outbox is one partition.
func (OnePartition) Partitions(context.Context) ([]int32, error) { return []int32{Partition}, nil }

// PartitionOf returns Partition for every recipient.
func (OnePartition) PartitionOf(string) int32 { return Partition }
