-- fixed_window_multi.lua decides the requests of a coalesced run (see
-- multi.lua) that are all usual requests of aligned fixed windows, each
-- exactly as fixed_window_fast.lua decides one request, in a script made
-- small: Redis runs a script's whole body per EVALSHA, and multi.lua makes
-- every helper of common.lua, state.lua and fixed_window.lua on each run,
-- and reads, checks and replies each request through them. Here the work
-- per request is its commands: the window of each parameter set (its
-- start, field and TTL) is found once per run, the server's TIME read once,
-- and whether a request's key holds a layout-1 state (see fixed_window.lua)
-- is asked once for the keys of the run, by the first request that makes a
-- new hash (EXISTS of its key and every later one), rather than once per
-- new counter.
--
-- A request this script does not take changes nothing and answers
-- DECLINED, as multi.lua answers a request that failed: the store decides
-- it again alone (fixed_window_fast.lua, then fixed_window.lua), which
-- decides it with every check and its error. It declines a request of a
-- parameter set whose numbers it does not take (the checks of
-- fixed_window_fast.lua), one with a cost that is not 0 to 2^40 in
-- decimal, one whose counter is new in a hash that holds a later window's
-- (a clock gone backwards: fixed_window_later), one whose hash is new on a
-- key that holds a layout-1 state (fixed_window_seed), and a cost-0 peek
-- at a counter that is not there (either of the two) or not a count.
--
-- KEYS     the requests' keys, as in fixed_window.lua (the counters are
--          the hash KEYS[i] .. ':w'), grouped by parameter set: those of
--          set 1, then those of set 2, ...
-- ARGV     n_sets, then per set SET_WIDTH strings: now_us, limit, period
--          and flags (0 or 2) as parse_request in common.lua reads them
--          (burst 0, id ""), and the number of its requests (at least 1);
--          then per key its cost.
-- Reply    one flat array: per set, now_us and the µs to the end of its
--          window (0 and 0 for a set it declined), then per key of the set
--          its decision packed in one integer, remaining * 4 + 2 if the
--          counter is above 0 + allowed (0/1), or DECLINED for a request it
--          left unchanged. The Go side unpacks the decision fixed_window.lua
--          replies: {allowed, the set's limit, remaining, reset_after_us
--          (the window's end if the counter is above 0, else 0),
--          retry_after_us (0 if allowed, else -1 if cost > limit, else the
--          window's end), now_us}. A reply of 6 integers per request cost
--          Redis more than the rest of the script for a request whose
--          counter exists.
-- Mirrors  fixed_window_fast.lua per request (TestDifferential runs the
--          coalesced runs of both).

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
local out = {}
local clock = nil -- the server's time, read once
-- checked: the index of the first key, from which on no key holds a
-- layout-1 state (EXISTS of them all answered 0); nk + 1 before the first
-- asks; false once that EXISTS found one, when each new hash asks alone.
local checked = nk + 1
local k = 0 -- the index of the last key decided
local arg = 1 + n_sets * SET_WIDTH -- the index of the last cost read
for j = 1, n_sets do
  local s = 1 + (j - 1) * SET_WIDTH
  local now, limit, period, flags, m = a[s + 1], a[s + 2], a[s + 3], a[s + 4], a[s + 5] + 0
  local ok = (flags == '0' or flags == '2') and #now <= 16 and #limit <= 13 and #period <= 15
    and match(now .. ':' .. limit .. ':' .. period, '^%-?%d+:%d+:%d+$')
  if ok then
    now, limit, period = now + 0, limit + 0, period + 0
    -- The bounds of common.lua: MAX_LIMIT 2^40, MAX_PERIOD 2^48, MAX_NOW 2^52 - 2^48.
    ok = now >= -1 and now <= 4222124650659840 and limit <= 1099511627776 and period >= 1 and period <= 281474976710656
  end
  local o = #out
  if not ok then
    -- fixed_window_fast.lua declines them too: the store's single path
    -- gives each its answer or its error.
    out[o + 1], out[o + 2] = 0, 0
    for i = o + 3, o + 2 + m do
      out[i] = DECLINED
    end
    k, arg = k + m, arg + m
  else
    local counting = flags == '2'
    if now < 0 then
      if not clock then
        local t = call('TIME')
        clock = t[1] * 1000000 + t[2]
      end
      now = clock
    end
    -- start = now - mod(now, period), with floor_div's correction (common.lua).
    local q = floor(now / period)
    if q * period > now then
      q = q - 1
    elseif (q + 1) * period <= now then
      q = q + 1
    end
    local start = q * period
    local stop = start + period
    local field = format('%d', start)
    local ttl = math.max(floor((stop - now + 999) / 1000), 1000) + 1000
    out[o + 1], out[o + 2] = now, stop - now
    o = o + 2
    for _ = 1, m do
      k, arg = k + 1, arg + 1
      local key, cost = keys[k], a[arg]
      local wkey = key .. ':w'
      local count, allowed, declined = 0, false, false
      if cost == '1' then
        cost = 1
      elseif #cost <= 13 and match(cost, '^%d+$') and cost + 0 <= 1099511627776 then
        cost = cost + 0
      else
        declined = true
      end
      if declined then
      elseif cost == 0 then
        local v = call('HGET', wkey, field)
        if not v then
          -- A later window's counter or a layout-1 state: fixed_window.lua.
          if call('EXISTS', wkey, key) > 0 then
            declined = true
          end
        elseif #v > 16 or not match(v, '^%d+$') then
          declined = true
        else
          count = v + 0
        end
        if not declined then
          allowed = count <= limit
          if not allowed and counting and count > limit + 1 then
            call('HINCRBY', wkey, field, limit + 1 - count)
            count = limit + 1
          end
        end
      else
        local n = call('HINCRBY', wkey, field, cost)
        if n == cost then
          -- This HINCRBY made the counter: as fixed_window_fast.lua.
          if call('PEXPIRE', wkey, ttl, 'NX') == 1 then
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
          else
            local fields = call('HKEYS', wkey)
            for _, f in ipairs(fields) do
              local w = tonumber(f)
              if w and w > start then
                call('HDEL', wkey, field)
                declined = true
                break
              end
            end
            if not declined then
              for _, f in ipairs(fields) do
                local w = tonumber(f)
                if w and w < start then
                  call('HDEL', wkey, f)
                end
              end
              call('PEXPIRE', wkey, ttl, 'GT')
            end
          end
        end
        if not declined then
          count = n
          allowed = n <= limit
          if allowed then
          elseif counting then
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
      end
      o = o + 1
      if declined then
        out[o] = DECLINED
      else
        local x = 0
        if count < limit then
          x = (limit - count) * 4
        end
        if count > 0 then
          x = x + 2
        end
        if allowed then
          x = x + 1
        end
        out[o] = x
      end
    end
  end
end
return out
