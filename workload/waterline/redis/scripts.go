package redis

import goredis "github.com/redis/go-redis/v9"

// The Lua scripts behind every write. Each runs atomically on the server, so
// no reader ever sees a client half updated. They share these conventions:
//
//   - ARGV[1] is the key prefix; keys that depend on a client or a partition
//     are built in the script from it (see doc.go for the layout). This is
//     why the index needs a single Redis (optionally replicated, optionally
//     behind Sentinel), not Redis Cluster.
//   - A client's pin of a partition is the lowest position of its pending
//     entries there, which the process keeps (pending.go): the pins script
//     writes the value the process computed, present in the partition's
//     pins when the client has something pending there, absent when not.
//     Nothing in Redis is derived from an acknowledged id.
//   - The pins script takes many clients in one call (a flight), checks
//     every client's registration with one HMGET and returns one result
//     per client: -1 for a client that is not registered, before writing
//     anything for it. Writes to a partition's pins are gathered and made
//     once per call, not once per client.

// entryLua holds the helpers shared by the client scripts. The pins
// script avoids Lua work that is not a command: no string.format, one
// concatenation per string a command needs.
const entryLua = `
local call, sub, find, tonumber, unpack = redis.call, string.sub, string.find, tonumber, unpack
local function parse(v)
  local a = find(v, ':', 1, true)
  return sub(v, 1, a - 1), sub(v, a + 1)
end
-- num reads a count argument; '1' is the common one and needs no strtod.
local function num(s)
  if s == '1' then return 1 end
  return tonumber(s)
end
local function bulk(cmd, key, list, flag)
  for i = 1, #list, 1000 do
    if flag then
      call(cmd, key, flag, unpack(list, i, math.min(i + 999, #list)))
    else
      call(cmd, key, unpack(list, i, math.min(i + 999, #list)))
    end
  end
end
-- batches lists the clients of a pins call: from ARGV[3] on, each
-- client's block is cid, n, fixed-2 more arguments and n items of per
-- arguments each. It returns the cids and the index of each block.
local function batches(fixed, per)
  local cids, at, i = {}, {}, 3
  while i <= #ARGV do
    cids[#cids+1] = ARGV[i]
    at[#at+1] = i
    i = i + fixed + per * num(ARGV[i+1])
  end
  return cids, at
end
local function hmget(key, fields)
  if #fields <= 1000 then return call('HMGET', key, unpack(fields)) end
  local out = {}
  for i = 1, #fields, 1000 do
    local r = call('HMGET', key, unpack(fields, i, math.min(i + 999, #fields)))
    for j = 1, #r do out[i + j - 1] = r[j] end
  end
  return out
end
-- setPins writes pins: set[part] maps cid to its pin (a position) or to
-- false (no pin: ZREM), written with one ZADD and one ZREM per partition.
-- A partition a client gets a pin in is listed in the client's parts
-- unless its registration (reg[cid], the value in KEYS[1]) says it is
-- listed already: parts only grows while the client is registered, and
-- the registration remembers what it holds after a NUL, as ";part;"
-- items, so that a client's pins after its first in a partition write no
-- parts.
local function setPins(pfx, set, reg, key)
  local marked = {}
  for part, pp in pairs(set) do
    local args, gone, item = {}, {}, ';' .. part .. ';'
    for cid, pos in pairs(pp) do
      if pos then
        args[#args+1] = pos
        args[#args+1] = cid
        local v = reg[cid]
        local nul = find(v, '\0', 1, true)
        if not (nul and find(v, item, nul, true)) then
          call('SADD', pfx .. 'parts:' .. cid, part)
          if nul then reg[cid] = v .. sub(item, 2) else reg[cid] = v .. '\0' .. item end
          marked[#marked+1] = cid
        end
      else
        gone[#gone+1] = cid
      end
    end
    bulk('ZADD', pfx .. 'pins:' .. part, args)
    bulk('ZREM', pfx .. 'pins:' .. part, gone)
  end
  if #marked > 0 then
    local args = {}
    for _, cid in ipairs(marked) do
      args[#args+1] = cid
      args[#args+1] = reg[cid]
    end
    bulk('HSET', key, args)
  end
end
`

// pinsScript: KEYS = clients, pinseq; ARGV = prefix, seq, then per
// client: cid, n, and n pairs (partition, pin): the client's pin of that
// partition as a position, or "" for none. Refuses with a STALEPINS error,
// writing nothing, unless seq is above the last seq it ran for this owner
// (a script that timed out on the process's side may still reach the
// server after a newer one, and must not undo it). Writes the pins of the
// clients that are registered (one HMGET of their registrations) and
// returns one result per client: 1, or -1 for a client that is not
// registered (nothing written for it).
var pinsScript = goredis.NewScript(entryLua + `
local pfx = ARGV[1]
if tonumber(ARGV[2]) <= tonumber(call('GET', KEYS[2]) or '0') then
  return redis.error_reply('STALEPINS flight ' .. ARGV[2] .. ' came after a newer one')
end
call('SET', KEYS[2], ARGV[2])
local cids, at = batches(2, 2)
local reg = hmget(KEYS[1], cids)
local out, set, regOf = {}, {}, {}
for b = 1, #cids do
  if reg[b] then
    local cid, j0 = cids[b], at[b]
    regOf[cid] = regOf[cid] or reg[b]
    for j = j0 + 2, j0 + 1 + 2 * num(ARGV[j0+1]), 2 do
      local part, pos = ARGV[j], ARGV[j+1]
      local pp = set[part]
      if not pp then pp = {}; set[part] = pp end
      if pos == '' then pp[cid] = false else pp[cid] = pos end
    end
    out[b] = 1
  else
    out[b] = -1
  end
end
setPins(pfx, set, regOf, KEYS[1])
return out
`)

// withdrawScript: KEYS = clients, parts; ARGV = prefix, cid. Deletes the
// registration, the pins and the parts set of the client. Returns 1, or 0
// when the client was not registered (and then touches nothing).
var withdrawScript = goredis.NewScript(entryLua + `
if call('HDEL', KEYS[1], ARGV[2]) == 0 then return 0 end
local pfx, cid = ARGV[1], ARGV[2]
for _, part in ipairs(call('SMEMBERS', KEYS[2])) do
  call('ZREM', pfx .. 'pins:' .. part, cid)
end
call('DEL', KEYS[2])
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
  redis.call('DEL', kc, pfx .. 'lease:' .. owner, pfx .. 'primed:' .. owner, pfx .. 'pinseq:' .. owner)
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
