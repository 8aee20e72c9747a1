-- zset.lua: the sorted-set helpers of sliding_window_log and concurrency,
-- whose state is one member per unit. Included after common.lua.

local CHUNK = 1000 -- members per ZADD/ZREM/ZMSCORE: unpack has a limit

-- HOLD_MS: a sorted set whose TTL ends sooner than this loses its TTL while
-- a script changes it (hold), so that it cannot expire halfway through;
-- scripts run in far less.
local HOLD_MS = 100

-- hold removes the TTL of a sorted set about to expire, before the script
-- changes it, and reports whether it did: the script then sets a TTL again.
local function hold(key)
  local pttl = call('PTTL', key)
  if pttl >= 0 and pttl < HOLD_MS then
    -- Only a sorted set: PERSIST on a foreign key would change it before
    -- the script fails on its type.
    local t = call('TYPE', key)['ok']
    if t ~= 'zset' then
      fail('state', 'the key holds a ' .. t .. ', not a zset')
    end
    call('PERSIST', key)
    return true
  end
  return false
end

-- zchunks runs a command that takes members (ZMSCORE, ZREM) on
-- members[1..n] in chunks, calling each(reply) per chunk.
local function zchunks(cmd, key, members, each)
  local i = 1
  while i <= #members do
    local j = min(i + CHUNK - 1, #members)
    local r = call(cmd, key, unpack(members, i, j))
    if each then
      each(r)
    end
    i = j + 1
  end
end

-- zadd adds every member of members with one score, in chunks.
local function zadd(key, score, members)
  local i = 1
  while i <= #members do
    local args = {}
    local j = min(i + CHUNK - 1, #members)
    for k = i, j do
      args[#args + 1] = score
      args[#args + 1] = members[k]
    end
    call('ZADD', key, unpack(args))
    i = j + 1
  end
end

-- zscore_at is the score of the member at rank i (0-based, -1 the last).
local function zscore_at(key, i)
  local r = call('ZRANGE', key, i, i, 'WITHSCORES')
  return tonumber(r[2])
end

