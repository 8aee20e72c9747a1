-- sliding_window_fast.lua decides one request of a sliding window exactly
-- as sliding_window.lua does (sliding_window_load, sliding_window_step,
-- sliding_window_save), in a script made small: Redis runs a script's whole
-- body per EVALSHA, and sliding_window.lua makes every helper of
-- common.lua and state.lua on each call, several times the cost of the
-- decision. This one takes only the usual request: numbers that need no
-- range check beyond the ones here, no burst, flags 0 or 2
-- (count_rejected), no id, and a key whose state is in now's window or
-- the one before (or absent, with no layout-1 state), with counts within
-- the limit. For anything else it changes nothing and answers
-- {FAST_DECLINED}, and the store runs sliding_window.lua, which decides
-- the same request with every check and its error.
--
-- KEYS[1]  the subject's key, as in sliding_window.lua: the counters are
--          the hash KEYS[1] .. ':w'.
-- ARGV     the request, as parse_request in common.lua reads it.
-- Reply    as sliding_window.lua's, or {2}.
-- Mirrors  sliding_window_step, sliding_retry and sliding_first in
--          sliding_window.lua (algorithm.SlidingWindow.Step, slidingRetry,
--          slidingFirst), on the state sliding_window_load reads, stored
--          as sliding_window_save stores it (TestDifferential and
--          TestSlidingWindowCounters run both: the store sends a single
--          request here first).

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
-- The bounds of common.lua: MAX_LIMIT 2^40, MAX_NOW 2^52 - 2^48, and
-- check_params's for sliding_window: (limit+1) * period at most 2^52,
-- period at most 2^47.
if now < -1 or now > 4222124650659840 or limit > 1099511627776 or cost > 1099511627776 or period < 1
  or period > 140737488355328 or (limit + 1) * period > 4503599627370496 then
  return FAST_DECLINED
end
local call = redis.call
if now < 0 then
  local t = call('TIME')
  now = t[1] * 1000000 + t[2]
end

-- floor_div is common.lua's.
local function floor_div(x, y)
  local q = math.floor(x / y)
  if q * y > x then
    q = q - 1
  elseif (q + 1) * y <= x then
    q = q + 1
  end
  return q
end

-- sliding_first and sliding_retry are sliding_window.lua's.
local function sliding_first(prev, room)
  if room < 0 then
    return 0, false
  end
  if prev <= room then
    return 0, true
  end
  local e = period - floor_div(room * period, prev)
  return e, e < period
end

local function sliding_retry(start, prev, curr)
  local e, ok = sliding_first(prev, limit - curr - cost)
  if ok then
    return start + e
  end
  e, ok = sliding_first(curr, limit - cost)
  if ok then
    return start + period + e
  end
  return start + 2 * period
end

-- count is a counter's value, or nil when absent, false when not a count.
local function count(v)
  if not v then
    return nil
  end
  if #v > 16 or not string.match(v, '^%d+$') then
    return false
  end
  return v + 0
end

local start = now - (now - floor_div(now, period) * period)
local key = KEYS[1]
local wkey = key .. ':w'
local f1, f2 = string.format('%d', start - period), string.format('%d', start)
local v = call('HMGET', wkey, f1, f2, string.format('%d', start + period))
local c1, c2 = count(v[1]), count(v[2])
if v[3] or c1 == false or c2 == false then
  -- A later window's state (the clock went backwards), or a foreign value:
  -- sliding_window.lua.
  return FAST_DECLINED
end
-- The state as sliding_window_load reads it, brought to now's window as
-- sliding_window_step brings it (moved: in the window before now's).
local prev, curr, moved, ended = 0, 0, false, false
if c2 then
  prev, curr = c1 or 0, c2
  if prev <= 0 and curr <= 0 then
    return FAST_DECLINED
  end
elseif c1 then
  prev, moved = c1, true
  if prev <= 0 then
    return FAST_DECLINED
  end
else
  local n = call('EXISTS', wkey, key)
  if n > 0 then
    -- The hash holds an ended state (its latest window two before now's:
    -- a hash outlives its state by its TTL's margin, a whole window of a
    -- second), read as the zero state and its hash made anew, as
    -- sliding_window.lua does, if that window's counter is there and no
    -- layout-1 key is (n counts the hash); else a state of another window,
    -- or a layout-1 state: sliding_window.lua.
    if n > 1 or not count(call('HGET', wkey, string.format('%d', start - 2 * period))) then
      return FAST_DECLINED
    end
    ended = true
  end
end
if prev > limit or curr > limit then
  -- Step's clamps, which the store writes back: sliding_window.lua.
  return FAST_DECLINED
end
local was = curr
-- sliding_window_step, from its clamps on.
local elapsed = math.max(0, now - start)
local weighted = floor_div(prev * (period - elapsed) + period - 1, period) -- ceil(w)
local allowed = weighted + curr + cost <= limit
if allowed then
  curr = curr + cost
elseif a[6] == '2' then
  curr = math.min(curr + cost, limit)
end
local remaining, reset_after, retry_after = math.max(0, limit - weighted - curr), 0, 0
if curr > 0 then
  reset_after = start + 2 * period - now
elseif prev > 0 then
  reset_after = start + period - now
end
if allowed then
elseif cost > limit then
  retry_after = -1
else
  retry_after = sliding_retry(start, prev, curr) - now
end
-- sliding_window_save.
if moved then
  call('HDEL', wkey, string.format('%d', start - 2 * period))
  call('HSET', wkey, f2, curr)
  call('PEXPIRE', wkey, math.max(math.floor((start + 2 * period - now + 999) / 1000), 1000) + 1000)
elseif not c2 then
  if ended then
    call('DEL', wkey)
  end
  if curr > 0 then
    call('HSET', wkey, f2, curr)
    call('PEXPIRE', wkey, math.max(math.floor((start + 2 * period - now + 999) / 1000), 1000) + 1000)
  end
elseif curr ~= was then
  call('HINCRBY', wkey, f2, curr - was)
end
if allowed then
  allowed = 1
else
  allowed = 0
end
return {allowed, limit, remaining, reset_after, retry_after, now}
