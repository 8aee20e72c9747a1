-- sliding_window_multi.lua decides the requests of a coalesced run (see
-- multi.lua) that are all usual requests of sliding windows, each exactly
-- as sliding_window_fast.lua decides one request, in a script made small,
-- as fixed_window_multi.lua is for fixed windows: Redis runs a script's
-- whole body per EVALSHA, and multi.lua makes every helper of common.lua,
-- state.lua and sliding_window.lua on each run, and reads, checks and
-- replies each request through them. Here the windows of each parameter
-- set (their starts, fields and TTL) are found once per run, the server's
-- TIME read once, and whether a request's key holds a layout-1 state (see
-- sliding_window.lua) is asked once for the keys of the run, by the first
-- request that makes a new hash (EXISTS of its key and every later one).
-- A new hash is told by PEXPIRE NX after the write that makes its counter
-- (every hash of counters has a TTL), not by an EXISTS before it. A key
-- that comes again in a set (a hot key: coalesced runs are of calls on
-- one group of keys) is read once per set, its state then kept in the
-- script, and what the set's requests add to its counter is sent as one
-- HINCRBY at the set's end.
--
-- A request this script does not take changes nothing and answers
-- DECLINED, as multi.lua answers a request that failed: the store decides
-- it again alone (sliding_window_fast.lua, then sliding_window.lua), which
-- decides it with every check and its error. It declines a request of a
-- parameter set whose numbers it does not take (the checks of
-- sliding_window_fast.lua), one with a cost that is not 0 to 2^40 in
-- decimal, and one whose state sliding_window_fast.lua declines: a later
-- window's counter, a foreign value, counts above the limit, a zero state,
-- a hash of other windows than the three before now's (one of the window
-- two before, an ended state its TTL's margin outlives, it reads as the
-- zero state and makes anew, as sliding_window.lua does) or a layout-1
-- state at a new hash's key.
--
-- KEYS     the requests' keys, as in sliding_window.lua (the counters are
--          the hash KEYS[i] .. ':w'), grouped by parameter set: those of
--          set 1, then those of set 2, ...
-- ARGV     n_sets, then per set SET_WIDTH strings: now_us, limit, period
--          and flags (0 or 2) as parse_request in common.lua reads them
--          (burst 0, id ""), and the number of its requests (at least 1);
--          then per key its cost.
-- Reply    one flat array: per set, now_us and the µs to the end of now's
--          window (0 and 0 for a set it declined), then per key of the set
--          its decision packed in one integer, remaining * 8 + reset * 2 +
--          allowed (0/1), where reset is 2 if the window's counter is above
--          0 after the request, else 1 if the one before is, else 0 — and,
--          after the integer of a request it denied, its retry_after_us (-1
--          never) — or DECLINED for a request it left unchanged. The Go side
--          unpacks the reply of sliding_window.lua: {allowed, the set's
--          limit, remaining, reset_after_us (the end of the window after
--          now's, of now's, or 0), retry_after_us (0 if allowed), now_us}.
-- Mirrors  sliding_window_fast.lua per request (TestSlidingMultiDifferential
--          runs the coalesced runs of both).

local DECLINED = -1
local SET_WIDTH = 5
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

-- floor_div is common.lua's.
local function floor_div(x, y)
  local q = floor(x / y)
  if q * y > x then
    q = q - 1
  elseif (q + 1) * y <= x then
    q = q + 1
  end
  return q
end

-- sliding_first and sliding_retry are sliding_window_fast.lua's.
local function sliding_first(period, prev, room)
  if room < 0 then
    return 0, false
  end
  if prev <= room then
    return 0, true
  end
  local e = period - floor_div(room * period, prev)
  return e, e < period
end

local function sliding_retry(limit, period, start, prev, curr, cost)
  local e, ok = sliding_first(period, prev, limit - curr - cost)
  if ok then
    return start + e
  end
  e, ok = sliding_first(period, curr, limit - cost)
  if ok then
    return start + period + e
  end
  return start + 2 * period
end

local out = {}
local clock = nil -- the server's time, read once
-- checked: the index of the first key, from which on no key holds a
-- layout-1 state (EXISTS of them all answered 0); nk + 1 before the first
-- asks; false once that EXISTS found one, when each new hash asks alone.
local checked = nk + 1
local k = 0 -- the index of the last key decided
local arg = 1 + n_sets * SET_WIDTH -- the index of the last cost read
local o = 0 -- the index of the last integer of out
for j = 1, n_sets do
  local s = 1 + (j - 1) * SET_WIDTH
  local now, limit, period, flags, m = a[s + 1], a[s + 2], a[s + 3], a[s + 4], a[s + 5] + 0
  local ok = (flags == '0' or flags == '2') and #now <= 16 and #limit <= 13 and #period <= 15
    and match(now .. ':' .. limit .. ':' .. period, '^%-?%d+:%d+:%d+$')
  if ok then
    now, limit, period = now + 0, limit + 0, period + 0
    -- The bounds of sliding_window_fast.lua: MAX_LIMIT 2^40, MAX_NOW 2^52
    -- - 2^48, and check_params's for sliding_window.
    ok = now >= -1 and now <= 4222124650659840 and limit <= 1099511627776 and period >= 1
      and period <= 140737488355328 and (limit + 1) * period <= 4503599627370496
  end
  if not ok then
    -- sliding_window_fast.lua declines them too: the store's single path
    -- gives each its answer or its error.
    out[o + 1], out[o + 2] = 0, 0
    for i = o + 3, o + 2 + m do
      out[i] = DECLINED
    end
    o, k, arg = o + 2 + m, k + m, arg + m
  else
    local counting = flags == '2'
    if now < 0 then
      if not clock then
        local t = call('TIME')
        clock = t[1] * 1000000 + t[2]
      end
      now = clock
    end
    local start = floor_div(now, period) * period
    local f0, f1, f2, f3 = format('%d', start - 2 * period), format('%d', start - period), format('%d', start),
      format('%d', start + period)
    local ttl = math.max(floor((start + 2 * period - now + 999) / 1000), 1000) + 1000
    local elapsed = now - start
    local left = start + period - now
    out[o + 1], out[o + 2] = now, left
    o = o + 2
    -- known: per key decided in this set, its state after that decision
    -- ({prev, curr}, as the hash holds it once the set's pending HINCRBY
    -- is sent); pending: those keys in order, whose counter the end of the
    -- set moves by one HINCRBY of what the set's requests added.
    local known, pending = {}, {}
    for _ = 1, m do
      k, arg = k + 1, arg + 1
      local key, cost = keys[k], a[arg]
      local wkey = key .. ':w'
      local declined = false
      local e = known[key]
      if cost == '1' then
        cost = 1
      elseif #cost <= 13 and match(cost, '^%d+$') and cost + 0 <= 1099511627776 then
        cost = cost + 0
      else
        declined = true
      end
      local prev, curr, moved, new = 0, 0, false, false
      if declined then
      elseif e then
        prev, curr = e[1], e[2]
      else
        local v = call('HMGET', wkey, f1, f2, f3)
        local v1, v2 = v[1], v[2]
        if v[3] then
          declined = true -- a later window's state: sliding_window.lua
        elseif v2 then
          if #v2 > 16 or not match(v2, '^%d+$') then
            declined = true
          else
            curr = v2 + 0
            if v1 then
              if #v1 > 16 or not match(v1, '^%d+$') then
                declined = true
              else
                prev = v1 + 0
              end
            end
            declined = declined or (prev <= 0 and curr <= 0)
          end
        elseif v1 then
          if #v1 > 16 or not match(v1, '^%d+$') then
            declined = true
          else
            prev, moved = v1 + 0, true
            declined = prev <= 0
          end
        else
          new = true
        end
        declined = declined or prev > limit or curr > limit
      end
      if not declined then
        local was = curr
        -- sliding_window_step, from its clamps on.
        local weighted = floor_div(prev * (period - elapsed) + period - 1, period) -- ceil(w)
        local allowed = weighted + curr + cost <= limit
        if allowed then
          curr = curr + cost
        elseif counting then
          curr = math.min(curr + cost, limit)
        end
        -- sliding_window_save, as sliding_window_fast.lua writes it.
        if moved then
          call('HDEL', wkey, f0)
          call('HSET', wkey, f2, curr)
          call('PEXPIRE', wkey, ttl)
        elseif not new then
          if not e then
            e = {prev, was, 0}
            known[key] = e
            pending[#pending + 1] = key
          end
          e[3] = e[3] + curr - was
        elseif curr > 0 then
          call('HSET', wkey, f2, curr)
          if call('PEXPIRE', wkey, ttl, 'NX') == 0 then
            local v0 = call('HGET', wkey, f0)
            if v0 and #v0 <= 16 and match(v0, '^%d+$') then
              -- The hash holds an ended state: its latest window two
              -- before now's (a hash outlives its state by its TTL's
              -- margin, a whole window of a second). sliding_window_load
              -- reads it as at that window, Step as the zero state, and
              -- sliding_window_save makes the hash anew, as here; no
              -- layout-1 state is read beside an existing hash.
              call('DEL', wkey)
              call('HSET', wkey, f2, curr)
              call('PEXPIRE', wkey, ttl)
            else
              -- The hash was there, of other windows: sliding_window.lua.
              call('HDEL', wkey, f2)
              declined = true
            end
          else
            if checked and k < checked then
              if call('EXISTS', unpack(keys, k, nk)) == 0 then
                checked = k
              else
                checked = false
              end
            end
            if not checked and call('EXISTS', key) == 1 then
              call('DEL', wkey)
              declined = true
            end
          end
        elseif call('EXISTS', wkey, key) > 0 then
          -- A state of another window, or a layout-1 state: sliding_window.lua.
          declined = true
        end
        if not declined then
          if e then
            e[2] = curr
          elseif moved or (new and curr > 0) then
            -- Its hash now holds this window's counter (at curr, maybe 0
            -- if moved) and the one before.
            known[key] = {prev, curr, 0}
            pending[#pending + 1] = key
          end
          local x = 0
          if curr > 0 then
            x = 4
          elseif prev > 0 then
            x = 2
          end
          local remaining = limit - weighted - curr
          if remaining > 0 then
            x = x + remaining * 8
          end
          o = o + 1
          if allowed then
            out[o] = x + 1
          else
            out[o] = x
            o = o + 1
            if cost > limit then
              out[o] = -1
            else
              out[o] = sliding_retry(limit, period, start, prev, curr, cost) - now
            end
          end
        end
      end
      if declined then
        o = o + 1
        out[o] = DECLINED
      end
    end
    for _, key in ipairs(pending) do
      local d = known[key][3]
      if d ~= 0 then
        call('HINCRBY', key .. ':w', f2, d)
      end
    end
  end
end
return out
