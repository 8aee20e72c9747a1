-- gcra_multi.lua decides the usual GCRA requests of a coalesced run (see
-- multi.lua), or one request alone, each exactly as gcra.lua decides it
-- (algorithm.GCRA.Step), in a script made small, as fixed_window_multi.lua
-- is for the fixed window: Redis runs a script's whole body per EVALSHA,
-- and multi.lua makes every helper of common.lua, state.lua and rate.lua
-- on each run, and reads, checks, steps and replies each request through
-- them (tables per request and per decision). Here the rate of each
-- parameter set (T = period/limit and Burst*T) is found once per run, the
-- server's TIME read once, and a request carries one argument, its cost.
--
-- The script decides only what it must write: whether each request is
-- admitted and the state after. The rest of a decision (remaining, reset
-- and retry) the store computes with algorithm.GCRA.Step from what this
-- script replies, the state the request found, and checks that Step
-- admits what this script admitted.
--
-- A key is read once per run (GET) and written once at its end, as
-- multi.lua does (MULTI_STATE): a SET with the expiry of the last request
-- that changed it, or a DEL for a full bucket; nothing for a state its
-- requests did not change.
--
-- A request this script does not take changes nothing and answers
-- DECLINED, as multi.lua answers a request that failed: the store decides
-- it again alone with gcra.lua, which decides it with every check and its
-- error. It declines the requests of a parameter set whose numbers it does
-- not take (a limit of 0, a burst that does not fit, anything out of
-- range, flags: the store sends none), one with a cost that is not 0 to
-- 2^40 in decimal, and every request of a key that holds something else
-- than a GCRA state.
--
-- KEYS     the requests' keys (a GCRA state, see gcra.lua), grouped by
--          parameter set: those of set 1, then those of set 2, ... A key
--          may come more than once.
-- ARGV     n_sets, then per set SET_WIDTH strings: now_us, limit, period
--          and burst as parse_request in common.lua reads them (flags 0,
--          id ""), and the number of its requests (at least 1); then per
--          key its cost.
-- Reply    one flat array: per set, now_us (0 for a set it declined), then
--          per key of the set two integers: tat_us - now_us of the state
--          the request found, after the step's first line (tat = max(tat,
--          now), so at least 0), and its tat_frac * 2 + allowed (0/1); or
--          DECLINED and 0 for a request it left unchanged.
-- Mirrors  gcra_step in gcra.lua (algorithm.GCRA.Step): TestGCRAMultiDifferential
--          runs both.

local DECLINED = -1
local SET_WIDTH = 5
local MAX_EXACT = 4503599627370496 -- 2^52, algorithm.MaxExact
local MAX_PERIOD = 281474976710656 -- 2^48
local call, match, floor, format = redis.call, string.match, math.floor, string.format
local keys, a = KEYS, ARGV
local nk = #keys
local n_sets = tonumber(a[1])
if nk == 0 or not n_sets or n_sets < 1 or n_sets > nk or n_sets % 1 ~= 0 or #a ~= 1 + n_sets * SET_WIDTH + nk then
  return redis.error_reply('ERR floodgate: args: want a number of sets, ' .. SET_WIDTH .. ' arguments per set and 1 per key')
end
-- The sets' counts first, so that an error is raised before any write.
local total = 0
for j = 1, n_sets do
  local m = tonumber(a[1 + j * SET_WIDTH])
  if not m or m < 1 or m % 1 ~= 0 then
    return redis.error_reply('ERR floodgate: args: set ' .. j .. ' counts ' .. tostring(a[1 + j * SET_WIDTH]) .. ' keys')
  end
  total = total + m
end
if total ~= nk then
  return redis.error_reply('ERR floodgate: args: the sets count ' .. total .. ' keys, not the ' .. nk .. ' passed')
end

-- floor_div is floorDiv (common.lua): a/b rounded down, for 0 <= a <=
-- MAX_EXACT and 0 < b <= MAX_EXACT.
local function floor_div(x, y)
  local q = floor(x / y)
  if q * y > x then
    q = q - 1
  elseif (q + 1) * y <= x then
    q = q + 1
  end
  return q
end

-- states[key]: {tat, frac, old_tat, old_frac, now} of a key read in this
-- run (now: the time of the last request that changed it, false if none
-- did), or false for a key that holds no GCRA state; order: the keys read,
-- in the order first read.
local states, order = {}, {}
local out = {}
local clock = nil -- the server's time, read once
local k = 0 -- the index of the last key decided
local arg = 1 + n_sets * SET_WIDTH -- the index of the last cost read
for j = 1, n_sets do
  local s = 1 + (j - 1) * SET_WIDTH
  local now, limit, period, burst, m = a[s + 1], a[s + 2], a[s + 3], a[s + 4], a[s + 5] + 0
  local ok = #now <= 16 and #limit <= 13 and #period <= 15 and #burst <= 13
    and match(now .. ':' .. limit .. ':' .. period .. ':' .. burst, '^%-?%d+:%d+:%d+:%d+$')
  local q, r, burst_t, burst_t_f
  if ok then
    now, limit, period, burst = now + 0, limit + 0, period + 0, burst + 0
    -- The bounds of common.lua (MAX_LIMIT 2^40, MAX_PERIOD 2^48, MAX_NOW
    -- 2^52 - 2^48) and check_params's bucketFits; a limit of 0 (deny_all)
    -- is gcra.lua's.
    ok = now >= -1 and now <= 4222124650659840 and limit >= 1 and limit <= 1099511627776 and period >= 1
      and period <= MAX_PERIOD and burst >= 1 and burst <= 1099511627776 and burst <= floor_div(MAX_EXACT, limit)
    if ok then
      -- T = q + r/limit (new_rate), Burst*T (times).
      q = floor_div(period, limit)
      r = period - q * limit
      ok = (q == 0 or burst <= floor_div(MAX_PERIOD, q)) and burst * q + floor_div(burst * r + limit - 1, limit) <= MAX_PERIOD
      if ok then
        local x = burst * r
        local d = floor_div(x, limit)
        burst_t, burst_t_f = burst * q + d, x - d * limit
      end
    end
  end
  local o = #out
  if not ok then
    out[o + 1] = 0
    for i = o + 2, o + 1 + 2 * m, 2 do
      out[i], out[i + 1] = DECLINED, 0
    end
    k, arg = k + m, arg + m
  else
    if now < 0 then
      if not clock then
        local t = call('TIME')
        clock = t[1] * 1000000 + t[2]
      end
      now = clock
    end
    out[o + 1] = now
    o = o + 1
    for _ = 1, m do
      k, arg = k + 1, arg + 1
      local key, cost = keys[k], a[arg]
      local st = states[key]
      if st == nil then
        local v = call('GET', key)
        if not v then
          st = {0, 0, 0, 0, false}
        else
          local x1, x2 = match(v, '^(%-?%d+):(%-?%d+)$')
          if not x1 or #x1 > 16 or #x2 > 16 then
            st = false
          else
            x1, x2 = x1 + 0, x2 + 0
            st = {x1, x2, x1, x2, false}
          end
        end
        states[key] = st
        order[#order + 1] = key
      end
      if cost == '1' then
        cost = 1
      elseif #cost <= 13 and match(cost, '^%d+$') and cost + 0 <= 1099511627776 then
        cost = cost + 0
      else
        cost = false
      end
      if not st or not cost then
        out[o + 1], out[o + 2] = DECLINED, 0
      else
        -- gcra_step: tat = max(norm(tat), now).
        local tat, tat_f = st[1], st[2]
        if tat_f >= limit then
          tat_f = limit - 1
        end
        if tat_f < 0 then
          tat_f = 0
        end
        if tat < now then
          tat, tat_f = now, 0
        end
        out[o + 1] = tat - now
        local found_f = tat_f
        local allowed = 0
        if cost <= burst then
          -- next = tat + cost*T; allow_at = next - Burst*T.
          local x = cost * r
          local d = floor_div(x, limit)
          local n_us, n_f = tat + cost * q + d, tat_f + x - d * limit
          if n_f >= limit then
            n_us, n_f = n_us + 1, n_f - limit
          end
          local at_us, at_f = n_us - burst_t, n_f - burst_t_f
          if at_f < 0 then
            at_us, at_f = at_us - 1, at_f + limit
          end
          if at_us < now or (at_us == now and at_f <= 0) then
            allowed = 1
            tat, tat_f = n_us, n_f
          end
        end
        out[o + 2] = found_f * 2 + allowed
        -- A bucket full again (tat <= now) is the zero state.
        if not (now < tat or (now == tat and 0 < tat_f)) then
          tat, tat_f = 0, 0
        end
        if tat ~= st[1] or tat_f ~= st[2] then
          st[1], st[2], st[5] = tat, tat_f, now
        end
      end
      o = o + 2
    end
  end
end
-- The writes, as multi_save: a state its requests changed, with the TTL
-- of the last one that changed it (gcra_expires, ttl_ms).
for _, key in ipairs(order) do
  local st = states[key]
  if st and st[5] and (st[1] ~= st[3] or st[2] ~= st[4]) then
    if st[1] == 0 and st[2] == 0 then
      call('DEL', key)
    else
      local exp = st[1]
      if st[2] > 0 then
        exp = exp + 1
      end
      local ttl = floor_div(math.max(exp - st[5], 0) + 999, 1000)
      if ttl < 1000 then
        ttl = 1000
      end
      call('SET', key, format('%d:%d', st[1], st[2]), 'PX', ttl)
    end
  end
end
return out
