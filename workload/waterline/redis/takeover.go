package redis

import (
	"context"

	goredis "github.com/redis/go-redis/v9"
)

// takeOverScript: KEYS = alive:<owner>; ARGV = token. When another token
// holds the owner's liveness record, puts this one in its place with the
// record's remaining TTL (KEEPTTL, Redis 6+) and returns 1; otherwise
// (free, or already this token's) changes nothing and returns 0.
var takeOverScript = goredis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'KEEPTTL')
  return 1
end
return 0
`)

// TakeOver makes this process the holder of its owner's liveness record
// when another process's token holds it, and reports whether it replaced
// one; Acquire then succeeds at once instead of waiting up to the owner TTL
// for the record to lapse. The record keeps its remaining TTL, so a take-over
// never outlives what the previous holder left.
//
// Call it only with proof that the holder is dead, such as
// postgres.DB.LockOwner (the server does, at start): a live holder would get
// waterline.ErrOwnerTaken at its next heartbeat and close its connections.
// It is not part of waterline.Fleet because the proof comes from the store,
// which the index does not know.
func (x *Index) TakeOver(ctx context.Context) (bool, error) {
	cctx, cancel := x.call(ctx)
	defer cancel()
	n, err := takeOverScript.Run(cctx, x.rdb, x.aliveKeys()[:1], x.token).Int64()
	if err != nil {
		return false, unavailable("take over the owner record", err)
	}
	return n == 1, nil
}
