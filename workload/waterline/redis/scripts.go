package redis

import goredis "github.com/redis/go-redis/v9"

// The Lua scripts behind every write. Each runs atomically on the server, so
// no reader ever sees a client half updated. They share these conventions:
//
//   - ARGV[1] is the key prefix; keys that depend on a client or a partition
//     are built in the script from it (see doc.go for the layout). This is
//     why the index needs a single Redis (optionally replicated, optionally
//     behind Sentinel), not Redis Cluster.
//   - An entry's state is the hash value "part:attempts:key", where key is
//     the 24 hex digits posKey(pos) .. partKey(part) computed by the Go side.
//   - An entry's lease member is key .. attempts as 8 hex digits ..
//     clientID .. NUL .. messageID, scored by the lease in Unix ms. It
//     carries everything Expired reports, so Expired is a plain
//     ZRANGEBYSCORE ... LIMIT with no script and no lookup; the fixed-width
//     position comes first, so equal leases come out lowest position first.
//     A re-send changes the member (attempts), so it is replaced.
//   - A client's pin of a partition is recomputed from its pending set of
//     that partition (ZRANGE 0 0 WITHSCORES) after every change to it: set in
//     the partition's pins when the set is not empty, removed when it is.
//     Nothing ever writes a pin from anything but that minimum.
//   - A script returns -1 for a client that is not registered, before
//     writing anything.

// entryLua holds the helpers shared by the client scripts.
const entryLua = `
local function parse(v)
  local part, att, key = string.match(v, '^([^:]+):([^:]+):(.+)$')
  return part, tonumber(att), key
end
local function member(key, att, cid, id)
  return key .. string.format('%08x', att) .. cid .. '\0' .. id
end
local function repin(pfx, cid, part)
  local top = redis.call('ZRANGE', pfx .. 'pend:' .. cid .. ':' .. part, 0, 0, 'WITHSCORES')
  if #top == 0 then
    redis.call('ZREM', pfx .. 'pins:' .. part, cid)
    redis.call('SREM', pfx .. 'parts:' .. cid, part)
  else
    redis.call('ZADD', pfx .. 'pins:' .. part, top[2], cid)
    redis.call('SADD', pfx .. 'parts:' .. cid, part)
  end
end
`

// sentScript: KEYS = clients, st, lease; ARGV = prefix, cid, leaseMs,
// attempts for a new entry (1), resend ("1": a pending entry gets
// attempts+1 and the lease), then (messageID, partition, pos, key) per
// entry. Returns the client's pending count, or -1.
var sentScript = goredis.NewScript(entryLua + `
if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 0 then return -1 end
local pfx, cid, lease, first, resend = ARGV[1], ARGV[2], ARGV[3], tonumber(ARGV[4]), ARGV[5] == '1'
local touched = {}
for i = 6, #ARGV, 4 do
  local id = ARGV[i]
  local v = redis.call('HGET', KEYS[2], id)
  if v then
    if resend then
      local part, att, key = parse(v)
      redis.call('ZREM', KEYS[3], member(key, att, cid, id))
      redis.call('ZADD', KEYS[3], lease, member(key, att + 1, cid, id))
      redis.call('HSET', KEYS[2], id, part .. ':' .. (att + 1) .. ':' .. key)
    end
  else
    local part, pos, key = ARGV[i+1], ARGV[i+2], ARGV[i+3]
    redis.call('HSET', KEYS[2], id, part .. ':' .. first .. ':' .. key)
    redis.call('ZADD', pfx .. 'pend:' .. cid .. ':' .. part, pos, id)
    redis.call('ZADD', KEYS[3], lease, member(key, first, cid, id))
    touched[part] = true
  end
end
for part in pairs(touched) do repin(pfx, cid, part) end
return redis.call('HLEN', KEYS[2])
`)

// ackScript: KEYS = clients, st, lease; ARGV = prefix, cid, messageIDs...
// Returns the client's pending count, or -1.
var ackScript = goredis.NewScript(entryLua + `
if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 0 then return -1 end
local pfx, cid = ARGV[1], ARGV[2]
local touched = {}
for i = 3, #ARGV do
  local id = ARGV[i]
  local v = redis.call('HGET', KEYS[2], id)
  if v then
    local part, att, key = parse(v)
    redis.call('ZREM', pfx .. 'pend:' .. cid .. ':' .. part, id)
    redis.call('HDEL', KEYS[2], id)
    redis.call('ZREM', KEYS[3], member(key, att, cid, id))
    touched[part] = true
  end
end
for part in pairs(touched) do repin(pfx, cid, part) end
return redis.call('HLEN', KEYS[2])
`)

// withdrawScript: KEYS = clients, st, lease, parts; ARGV = prefix, cid.
// Deletes the registration, the pending sets, the state, the lease entries
// and the pins of the client. Returns 1, or 0 when the client was not
// registered (and then touches nothing).
var withdrawScript = goredis.NewScript(entryLua + `
if redis.call('HDEL', KEYS[1], ARGV[2]) == 0 then return 0 end
local pfx, cid = ARGV[1], ARGV[2]
local all = redis.call('HGETALL', KEYS[2])
local batch = {}
for i = 1, #all, 2 do
  local _, att, key = parse(all[i+1])
  batch[#batch+1] = member(key, att, cid, all[i])
  if #batch == 1000 then
    redis.call('ZREM', KEYS[3], unpack(batch))
    batch = {}
  end
end
if #batch > 0 then redis.call('ZREM', KEYS[3], unpack(batch)) end
for _, part in ipairs(redis.call('SMEMBERS', KEYS[4])) do
  redis.call('DEL', pfx .. 'pend:' .. cid .. ':' .. part)
  redis.call('ZREM', pfx .. 'pins:' .. part, cid)
end
redis.call('DEL', KEYS[2], KEYS[4])
return 1
`)

// timeLua reads the server's clock in milliseconds. Scripts that write
// after reading TIME need effects replication, which is the only mode from
// Redis 7 on and is switched on here for older servers.
const timeLua = `
if redis.replicate_commands then pcall(redis.replicate_commands) end
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// holdScript: KEYS = holds:part, holdexp:part, holdparts; ARGV = member
// (owner NUL holder), pos, ttlMs, partition. pos < 0 releases. The expiry is
// the server's TIME plus ttl, so the holders' clocks never matter.
var holdScript = goredis.NewScript(`
if tonumber(ARGV[2]) < 0 then
  redis.call('ZREM', KEYS[1], ARGV[1])
  redis.call('ZREM', KEYS[2], ARGV[1])
  return 0
end
` + timeLua + `
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[3]), ARGV[1])
redis.call('SADD', KEYS[3], ARGV[4])
return 1
`)

// restoreScript: KEYS = clients, st, lease; ARGV = prefix, cid, then
// (messageID, partition, pos, key, attempts, leaseMs) per entry. An entry
// whose messageID is pending is left alone; the others are added with their
// attempts and lease. The pins of the partitions that gained an entry are
// recomputed. Returns the client's pending count, or -1.
var restoreScript = goredis.NewScript(entryLua + `
if redis.call('HEXISTS', KEYS[1], ARGV[2]) == 0 then return -1 end
local pfx, cid = ARGV[1], ARGV[2]
local touched = {}
for i = 3, #ARGV, 6 do
  local id, part, pos, key, att, lease = ARGV[i], ARGV[i+1], ARGV[i+2], ARGV[i+3], tonumber(ARGV[i+4]), ARGV[i+5]
  if redis.call('HEXISTS', KEYS[2], id) == 0 then
    redis.call('HSET', KEYS[2], id, part .. ':' .. att .. ':' .. key)
    redis.call('ZADD', pfx .. 'pend:' .. cid .. ':' .. part, pos, id)
    redis.call('ZADD', KEYS[3], lease, member(key, att, cid, id))
    touched[part] = true
  end
end
for part in pairs(touched) do repin(pfx, cid, part) end
return redis.call('HLEN', KEYS[2])
`)

// identityLua computes the server's identity exactly as Index.Identity
// does (redisinfo.Identity.Key, "run_id/master_replid" from INFO), inside a
// script: were the two to differ, safeLineScript would refuse every pass
// with NOTPRIMED, and this package's SafeLine tests would fail.
const identityLua = `
local function infoField(section, name)
  return string.match(redis.call('INFO', section), name .. ':(%w+)') or ''
end
local live = infoField('server', 'run_id') .. '/' .. infoField('replication', 'master_replid')
`

// safeLineScript: KEYS = pins:part, holds:part, holdexp:part, primed:<owner>,
// owners; ARGV = identity, prefix. Refuses with a NOTPRIMED error, before
// reading anything else, unless the server's identity is ARGV[1], this
// owner's primed flag records it and every live owner's primed flag records
// it too. Then drops the holds whose expiry is at or before the server's
// TIME and returns the minimum of the lowest pin and the lowest live hold,
// or nil. One script, so no flush, restart or failover can fall between the
// checks and the minimum.
var safeLineScript = goredis.NewScript(timeLua + identityLua + `
if live ~= ARGV[1] then
  return redis.error_reply('NOTPRIMED the server is ' .. live .. ', not ' .. ARGV[1])
end
if redis.call('GET', KEYS[4]) ~= ARGV[1] then
  return redis.error_reply('NOTPRIMED this owner is not primed with ' .. ARGV[1])
end
for _, owner in ipairs(redis.call('SMEMBERS', KEYS[5])) do
  if redis.call('EXISTS', ARGV[2] .. 'alive:' .. owner) == 1 and redis.call('GET', ARGV[2] .. 'primed:' .. owner) ~= ARGV[1] then
    return redis.error_reply('NOTPRIMED the live owner ' .. owner .. ' is not primed with ' .. ARGV[1])
  end
end
local dead = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)
for i = 1, #dead, 1000 do
  local batch = {}
  for j = i, math.min(i + 999, #dead) do batch[#batch+1] = dead[j] end
  redis.call('ZREM', KEYS[2], unpack(batch))
  redis.call('ZREM', KEYS[3], unpack(batch))
end
local best = nil
local pin = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #pin > 0 then best = tonumber(pin[2]) end
local hold = redis.call('ZRANGE', KEYS[2], 0, 0, 'WITHSCORES')
if #hold > 0 and (best == nil or tonumber(hold[2]) < best) then best = tonumber(hold[2]) end
if best == nil then return false end
return best
`)

// resetOwnerLua forgets one owner's clients (their pending sets, state,
// pins), its lease set, its holds and its primed flag. Other owners' state
// is not touched. Keys are built from the prefix and the owner.
const resetOwnerLua = `
local function resetOwner(pfx, owner)
  local kc = pfx .. 'clients:' .. owner
  for _, cid in ipairs(redis.call('HKEYS', kc)) do
    for _, part in ipairs(redis.call('SMEMBERS', pfx .. 'parts:' .. cid)) do
      redis.call('DEL', pfx .. 'pend:' .. cid .. ':' .. part)
      redis.call('ZREM', pfx .. 'pins:' .. part, cid)
    end
    redis.call('DEL', pfx .. 'st:' .. cid, pfx .. 'parts:' .. cid)
  end
  redis.call('DEL', kc, pfx .. 'lease:' .. owner, pfx .. 'primed:' .. owner)
  local mine = owner .. '\0'
  for _, part in ipairs(redis.call('SMEMBERS', pfx .. 'holdparts')) do
    local hk, ek = pfx .. 'holds:' .. part, pfx .. 'holdexp:' .. part
    for _, m in ipairs(redis.call('ZRANGE', hk, 0, -1)) do
      if string.sub(m, 1, #mine) == mine then
        redis.call('ZREM', hk, m)
        redis.call('ZREM', ek, m)
      end
    end
  end
end
`

// resetScript: KEYS = clients, lease, primed, holdparts (declared for
// tooling; the script builds them from the prefix); ARGV = prefix, owner.
var resetScript = goredis.NewScript(resetOwnerLua + `
resetOwner(ARGV[1], ARGV[2])
return 1
`)

// claimScript: KEYS = dev:<user> NUL <device>; ARGV = ttlMs, channel, user,
// device, connID, owner. The epoch is the server's TIME in microseconds,
// raised above the device's previous epoch if the clock went back; it is
// stored with the ttl and published with the claim in the same step, so no
// process can see the key without the announcement having been sent.
var claimScript = goredis.NewScript(`
if redis.replicate_commands then pcall(redis.replicate_commands) end
local t = redis.call('TIME')
local e = tonumber(t[1]) * 1000000 + tonumber(t[2])
local prev = tonumber(redis.call('GET', KEYS[1]) or '0')
if e <= prev then e = prev + 1 end
local es = string.format('%.0f', e)
redis.call('SET', KEYS[1], es, 'PX', ARGV[1])
redis.call('PUBLISH', ARGV[2], 'c' .. cjson.encode({u = ARGV[3], d = ARGV[4], c = ARGV[5], o = ARGV[6], e = es}))
return es
`)

// heartbeatScript: KEYS = alive:<owner>, reaped:<owner>, owners; ARGV =
// owner, ttlMs, token. Marks the owner alive for ttl (the record holds this
// process's token) and lists it among the owners ReapDead watches. Returns
// 1 when a tombstone said the owner was reaped since its last heartbeat
// (and clears it), 0 otherwise, and -1 without writing when another
// process's token holds the record.
var heartbeatScript = goredis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[3] then return -1 end
local reaped = redis.call('DEL', KEYS[2])
redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[2])
redis.call('SADD', KEYS[3], ARGV[1])
return reaped
`)

// acquireScript: KEYS and ARGV as heartbeatScript. Takes the record only
// if it is free (or already this token's); clears an old tombstone.
// Returns 1 when held, 0 when another token holds it.
var acquireScript = goredis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[3] then return 0 end
redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[2])
redis.call('DEL', KEYS[2])
redis.call('SADD', KEYS[3], ARGV[1])
return 1
`)

// releaseScript: KEYS = alive:<owner>; ARGV = token. Deletes the record
// if this token holds it.
var releaseScript = goredis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// reapScript: KEYS = owners; ARGV = prefix, tombstoneMs. For every listed
// owner without a live alive:<owner> key: reset its state (resetOwner),
// leave a tombstone reaped:<owner> for its next heartbeat, and unlist it.
// Returns the owners reaped.
var reapScript = goredis.NewScript(resetOwnerLua + `
local pfx = ARGV[1]
local out = {}
for _, owner in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if redis.call('EXISTS', pfx .. 'alive:' .. owner) == 0 then
    resetOwner(pfx, owner)
    redis.call('SET', pfx .. 'reaped:' .. owner, '1', 'PX', ARGV[2])
    redis.call('SREM', KEYS[1], owner)
    out[#out+1] = owner
  end
end
return out
`)

// laggardsScript: KEYS = owners; ARGV = prefix, identity. Returns the listed
// owners that are alive and whose primed flag is absent or differs from
// identity.
var laggardsScript = goredis.NewScript(`
local pfx, out = ARGV[1], {}
for _, owner in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  if redis.call('EXISTS', pfx .. 'alive:' .. owner) == 1 and redis.call('GET', pfx .. 'primed:' .. owner) ~= ARGV[2] then
    out[#out+1] = owner
  end
end
return out
`)

// identityAgeScript: KEYS = tetra-identity-seen:<identity>; ARGV = ttlMs. Records the
// server's TIME (ms) the first time an identity is seen (kept ttl after the
// last call) and returns the milliseconds since.
var identityAgeScript = goredis.NewScript(timeLua + `
local first = tonumber(redis.call('GET', KEYS[1]) or '')
if first == nil then first = now end
redis.call('SET', KEYS[1], string.format('%.0f', first), 'PX', ARGV[1])
return now - first
`)

// bindScript: KEYS = outbox, owners; ARGV = prefix, outboxID, owner.
// Records outboxID as the outbox the prefix indexes, unless another one is
// recorded and an owner other than ARGV[3] is alive: then returns that
// outbox and the live owner, writing nothing. Returns {} when bound.
var bindScript = goredis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur and cur ~= ARGV[2] then
  for _, owner in ipairs(redis.call('SMEMBERS', KEYS[2])) do
    if owner ~= ARGV[3] and redis.call('EXISTS', ARGV[1] .. 'alive:' .. owner) == 1 then
      return {cur, owner}
    end
  end
end
redis.call('SET', KEYS[1], ARGV[2])
return {}
`)
