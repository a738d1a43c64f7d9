package history

import "sync"

// MaxCachedChats bounds a MemberCache; it is emptied when full.
const MaxCachedChats = 100_000

// MemberCache is a store's cache of member lists for Commit: chat id to
// sorted members, every list read at or after one membership epoch (the
// counter every member change bumps in its own transaction), so an entry
// is exact until the epoch moves. The epoch only goes forward. Unknown
// chats are never cached (one may be created). The zero value is an empty
// cache at epoch 0; safe for concurrent use.
type MemberCache struct {
	mu    sync.Mutex
	epoch int64
	chats map[string][]string
}

// Get returns chatID's cached list when the cache holds lists of epoch.
func (m *MemberCache) Get(epoch int64, chatID string) ([]string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.epoch != epoch {
		return nil, false
	}
	ms, ok := m.chats[chatID]
	return ms, ok
}

// Lookup returns the cache's epoch and its lists of chats (those cached).
func (m *MemberCache) Lookup(chats []string) (int64, map[string][]string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	found := make(map[string][]string, len(chats))
	for _, c := range chats {
		if ms, ok := m.chats[c]; ok {
			found[c] = ms
		}
	}
	return m.epoch, found
}

// Store adds lists read at or after epoch (nil lists, unknown chats, are
// skipped). A newer epoch empties the cache first; lists of an older epoch
// than the cache's are dropped.
func (m *MemberCache) Store(epoch int64, lists map[string][]string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if epoch < m.epoch {
		return
	}
	if m.chats == nil || epoch > m.epoch || len(m.chats)+len(lists) > MaxCachedChats {
		m.chats = map[string][]string{}
		m.epoch = epoch
	}
	for c, ms := range lists {
		if ms != nil {
			m.chats[c] = ms
		}
	}
}
