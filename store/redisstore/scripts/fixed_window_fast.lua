-- fixed_window_fast.lua decides one request of an aligned fixed window
-- exactly as fixed_window.lua does (fixed_window_count), in a script made
-- small: Redis runs a script's whole body per EVALSHA, and fixed_window.lua
-- makes every helper of common.lua and state.lua on each call, several
-- times the cost of the decision. This one takes only the usual request:
-- numbers that need no range check beyond the ones here, no burst, flags
-- 0 or 2 (count_rejected), no id, and a key whose layout-1 state (see
-- fixed_window.lua) is gone. For anything else it changes nothing and
-- answers {FAST_DECLINED}, and the store runs fixed_window.lua, which
-- decides the same request with every check and its error. As a function
-- of the library (Options.Functions), whose helpers are made once per
-- load, it still costs Redis about a third less than fixed_window's
-- function (bench/lua-loop.sh: 13 vs 20 µs per decision on counters that
-- exist, 20 vs 30 on new ones, on a loaded machine).
--
-- KEYS[1]  the subject's key, as in fixed_window.lua: the counters are the
--          hash KEYS[1] .. ':w'.
-- ARGV     the request, as parse_request in common.lua reads it.
-- Reply    as fixed_window.lua's, or {2}.
-- Mirrors  fixed_window_count in fixed_window.lua (TestDifferential runs
--          both: the store sends a single aligned request here first).

local FAST_DECLINED = {2}
local a = ARGV
if #KEYS ~= 1 or #a ~= 7 or a[5] ~= '0' or a[7] ~= '' or (a[6] ~= '0' and a[6] ~= '2') then
  return FAST_DECLINED
end
local now, limit, period, cost = a[1], a[2], a[3], a[4]
-- At most 13 digits: below MAX_LIMIT (2^40) for limit and cost once
-- compared, and below MAX_PERIOD (2^48) for period; now at most 16.
if #now > 16 or #limit > 13 or #period > 15 or #cost > 13
  or not string.match(now .. ':' .. limit .. ':' .. period .. ':' .. cost, '^%-?%d+:%d+:%d+:%d+$') then
  return FAST_DECLINED
end
now, limit, period, cost = now + 0, limit + 0, period + 0, cost + 0
-- The bounds of common.lua: MAX_LIMIT 2^40, MAX_PERIOD 2^48, MAX_NOW 2^52 - 2^48.
if now < -1 or now > 4222124650659840 or limit > 1099511627776 or cost > 1099511627776 or period < 1
  or period > 281474976710656 then
  return FAST_DECLINED
end
local call = redis.call
if now < 0 then
  local t = call('TIME')
  now = t[1] * 1000000 + t[2]
end
-- start = now - mod(now, period), with floor_div's correction (common.lua).
local q = math.floor(now / period)
if q * period > now then
  q = q - 1
elseif (q + 1) * period <= now then
  q = q + 1
end
local start = q * period
local stop = start + period
local key = KEYS[1]
local wkey, field = key .. ':w', string.format('%d', start)
local count, allowed
if cost == 0 then
  local v = call('HGET', wkey, field)
  if not v then
    -- A later window's counter or a layout-1 state: fixed_window.lua.
    if call('EXISTS', wkey, key) > 0 then
      return FAST_DECLINED
    end
    count = 0
  elseif #v > 16 or not string.match(v, '^%d+$') then
    return FAST_DECLINED
  else
    count = v + 0
  end
  allowed = count <= limit
  if not allowed and a[6] == '2' and count > limit + 1 then
    call('HINCRBY', wkey, field, limit + 1 - count)
    count = limit + 1
  end
else
  local n = call('HINCRBY', wkey, field, cost)
  if n == cost then
    -- This HINCRBY made the counter: as fixed_window_count, but a new
    -- hash on a key with a layout-1 state (fixed_window_seed), or a later
    -- window's counter (fixed_window_later), is left to fixed_window.lua.
    local ttl = math.max(math.floor((stop - now + 999) / 1000), 1000) + 1000
    if call('PEXPIRE', wkey, ttl, 'NX') == 1 then
      if call('EXISTS', key) == 1 then
        call('DEL', wkey)
        return FAST_DECLINED
      end
    else
      local fields = call('HKEYS', wkey)
      for _, f in ipairs(fields) do
        local w = tonumber(f)
        if w and w > start then
          call('HDEL', wkey, field)
          return FAST_DECLINED
        end
      end
      for _, f in ipairs(fields) do
        local w = tonumber(f)
        if w and w < start then
          call('HDEL', wkey, f)
        end
      end
      call('PEXPIRE', wkey, ttl, 'GT')
    end
  end
  count = n
  allowed = n <= limit
  if allowed then
  elseif a[6] == '2' then
    if n > limit + 1 then
      count = limit + 1
      call('HINCRBY', wkey, field, count - n)
    end
  else
    count = n - cost
    if count == 0 then
      call('HDEL', wkey, field)
    else
      call('HINCRBY', wkey, field, -cost)
    end
  end
end
local remaining, reset_after, retry_after = 0, 0, 0
if count < limit then
  remaining = limit - count
end
if count > 0 then
  reset_after = stop - now
end
if allowed then
  allowed = 1
else
  allowed = 0
  if cost > limit then
    retry_after = -1
  else
    retry_after = stop - now
  end
end
return {allowed, limit, remaining, reset_after, retry_after, now}
