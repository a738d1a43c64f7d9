package storecore

import (
	"fmt"
	"time"

	"github.com/tetra-messenger/tetra/workload/history"
)

// DirectPair validates the users of a direct chat (history.Store.CreateDirect)
// and orders them: lo < hi, the order the pair is stored in, so the same
// chat comes back whichever side asks. Invalid user ids and a == b give
// ErrInvalid.
func DirectPair(a, b string) (lo, hi string, err error) {
	if err := ValidUser("user id", a); err != nil {
		return "", "", err
	}
	if err := ValidUser("member id", b); err != nil {
		return "", "", err
	}
	if a == b {
		return "", "", fmt.Errorf("%w: a direct chat needs two different users", history.ErrInvalid)
	}
	return min(a, b), max(a, b), nil
}

// NewDirect is the direct chat of the ordered pair lo < hi a backend writes
// when the pair has none: a new id, shared history, created now (at the
// stored precision).
func NewDirect(lo, hi string) history.Chat {
	return history.Chat{
		ID:        NewChatID(),
		Kind:      history.KindDirect,
		Members:   []string{lo, hi},
		History:   history.HistoryShared,
		CreatedAt: FromNanos(Nanos(time.Now())),
	}
}

// NewGroup validates spec (history.CheckGroup, history.CheckHistory) and
// returns the group chat a backend writes: spec.Creator plus spec.Members,
// duplicates removed, sorted, the creator its admin (PROTOCOL.md §7.5),
// the title trimmed, created now. Invalid user ids, a bad title, too many
// members and an unknown history setting give ErrInvalid.
func NewGroup(spec history.GroupSpec) (history.Chat, error) {
	title, all, err := history.CheckGroup(spec.Creator, spec.Title, spec.Members)
	if err != nil {
		return history.Chat{}, err
	}
	hist, err := history.CheckHistory(spec.History)
	if err != nil {
		return history.Chat{}, err
	}
	return history.Chat{
		ID:        NewChatID(),
		Kind:      history.KindGroup,
		Title:     title,
		CreatedBy: spec.Creator,
		Members:   all,
		Admins:    []string{spec.Creator},
		History:   hist,
		CreatedAt: FromNanos(Nanos(time.Now())),
	}, nil
}
