package redis

import (
	"context"
	"net/url"
	"time"
)

// kTyping is the key of a (user, chat)'s typing gate; both query-escaped
// like kDevice's.
func (x *Index) kTyping(user, chat string) string {
	return x.cfg.Prefix + "typing:" + url.QueryEscape(chat) + ":" + url.QueryEscape(user)
}

// TypingGate reports whether a typing frame of user in chat may be
// forwarded now (PROTOCOL.md §7.4: at most one per (user, chat) every
// interval in the whole deployment): true for the first call of each
// interval on any process sharing the prefix, false for the others until
// interval has passed since it. One SET NX PX; the key expires by itself.
// Errors wrap waterline.ErrUnavailable.
func (x *Index) TypingGate(ctx context.Context, user, chat string, interval time.Duration) (bool, error) {
	cctx, cancel := x.call(ctx)
	defer cancel()
	ok, err := x.rdb.SetNX(cctx, x.kTyping(user, chat), "1", interval).Result()
	if err != nil {
		return false, unavailable("typing gate", err)
	}
	return ok, nil
}
