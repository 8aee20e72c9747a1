-- sliding_window.lua decides one request of a sliding window counter. It
-- mirrors algorithm.SlidingWindow.Step, slidingRetry and slidingFirst
-- (slidingwindow.go) line for line, with the same names.
--
-- KEYS[1]  the subject's key under the limit (Store.Key), which holds the
--          state of a version before this layout (layout 1: a string
--          "<start>:<prev>:<curr>", SlidingWindow.Start, .Prev, .Curr),
--          and is only read, during a rolling upgrade (see
--          sliding_window_load). The state is the counters of its windows
--          (layout 2): a plain integer per window, the field <window start
--          in µs> of the hash KEYS[1] .. ':w' (sliding_window_key), with a
--          TTL past the later window's end.
-- ARGV     one request, as parse_request in common.lua reads it: now_us,
--          limit, period, cost, burst (0), flags (count_rejected 2), id ("").
-- Reply    {allowed 0/1, limit, remaining, reset_after_us, retry_after_us
--          (-1 never), now_us}.
-- Mirrors  algorithm.SlidingWindow.Step, .Expires, slidingRetry and slidingFirst
--          (algorithm/slidingwindow.go)

local SLIDING_WINDOW_FIELDS = {'start', 'prev', 'curr'}

-- sliding_first is slidingFirst: the least elapsed time e in [0, Period)
-- with ceil(prev*(Period-e)/Period) <= room, that is prev*(Period-e) <=
-- room*Period, and whether there is one.
local function sliding_first(p, prev, room)
  if room < 0 then
    return 0, false
  end
  if prev <= room then
    return 0, true
  end
  local e = p.period - floor_div(room * p.period, prev)
  return e, e < p.period
end

-- sliding_retry is slidingRetry.
local function sliding_retry(p, start, prev, curr, cost)
  local e, ok = sliding_first(p, prev, p.limit - curr - cost)
  if ok then
    return start + e
  end
  e, ok = sliding_first(p, curr, p.limit - cost)
  if ok then
    return start + p.period + e
  end
  return start + 2 * p.period
end

-- sliding_window_step is SlidingWindow.Step.
local function sliding_window_step(p, s, now, cost)
  local start, prev, curr = now - mod(now, p.period), 0, 0
  if s.prev <= 0 and s.curr <= 0 then
  elseif start == s.start then
    prev, curr = s.prev, s.curr
  elseif start == s.start + p.period then
    prev = s.curr
  elseif start < s.start then
    -- The clock went backwards: stay in the stored window.
    start, prev, curr = s.start, s.prev, s.curr
  end
  prev, curr = min(prev, p.limit), min(curr, p.limit)
  local elapsed = max(0, now - start)
  local weighted = floor_div(prev * (p.period - elapsed) + p.period - 1, p.period) -- ceil(w)
  local allowed = weighted + curr + cost <= p.limit
  if allowed then
    curr = curr + cost
  elseif p.count_rejected then
    curr = min(curr + cost, p.limit)
  end
  local d = decision(allowed, p.limit, max(0, p.limit - weighted - curr))
  if curr > 0 then
    d.reset_after = start + 2 * p.period - now
  elseif prev > 0 then
    d.reset_after = start + p.period - now
  end
  if allowed then
  elseif cost > p.limit then
    d.retry_after = NEVER
  else
    d.retry_after = sliding_retry(p, start, prev, curr, cost) - now
  end
  if prev <= 0 and curr <= 0 then
    return {start = 0, prev = 0, curr = 0}, d
  end
  return {start = start, prev = prev, curr = curr}, d
end

-- sliding_window_expires is SlidingWindow.Expires.
local function sliding_window_expires(p, s)
  if s.curr > 0 then
    return s.start + 2 * p.period
  elseif s.prev > 0 then
    return s.start + p.period
  end
  return 0
end

-- Layout 2: the counters of the windows. SlidingWindow's state {Start,
-- Prev, Curr} is the counter of the window at Start and of the one before
-- it: the fields <Start> and <Start - Period> of the hash KEYS[1] .. ':w',
-- each the window's start in µs. The state's Start is the latest window
-- with a field, which the field holds even at 0 (a state that moved to a
-- window without counting in it: Prev > 0, Curr 0). A save keeps only
-- the fields of the state's two windows, so a hash never holds a field
-- before Start - Period: that lets sliding_window_load find the state from
-- the four fields around now, and a request that counts in its window
-- moves one counter with one HINCRBY, reading and writing no string. The
-- hash lives until the later window's end (and SLIDING_WINDOW_MARGIN_MS);
-- a zero state deletes it.

-- SLIDING_WINDOW_MARGIN_MS is how long the counters outlive the state's
-- expiry, as FIXED_WINDOW_MARGIN_MS in fixed_window.lua.
local SLIDING_WINDOW_MARGIN_MS = 1000

-- sliding_window_key is the hash of the counters of key.
local function sliding_window_key(key)
  return key .. ':w'
end

-- sliding_window_num is the counter v (an HMGET's value) of field in the
-- hash wkey: nil when absent; a value that is not a count is an error (a
-- foreign key), raised before any write.
local function sliding_window_num(wkey, field, v)
  if not v then
    return nil
  end
  if #v > 16 or not match(v, '^%d+$') then
    fail('state', 'the key ' .. wkey .. ' holds ' .. format('%q', string.sub(v, 1, 64)) .. ' at ' .. field .. ', not a count')
  end
  return v + 0
end

-- sliding_window_load reads the state of key at now: {start, prev, curr}
-- as the counters hold it (the latest window with a field, its counter
-- and the one of the window before it), with wkey, its hash, and stored,
-- whether the hash exists (false: a state read from the layout-1 string,
-- written by a version before layout 2 during a rolling upgrade, which is
-- only read, so that what older instances admitted is counted; see
-- docs/redis.md, "Upgrading").
--
-- As a hash holds no field before its latest window's predecessor, the
-- fields of now's window w and the windows around it say where the state
-- is: a field at w + Period means a later state (the clock went
-- backwards), else one at w means the state is at w, else one at w -
-- Period that it is there, else one at w - 2 Period that it is there
-- (ended, which Step reads as the zero state). With none of them, the
-- hash is absent, or holds a state of a window at least two later or
-- before, found from its fields.
local function sliding_window_load(key, p, now)
  local period = p.period
  local start = now - mod(now, period)
  local wkey = sliding_window_key(key)
  local f0, f1, f2, f3 = format('%d', start - 2 * period), format('%d', start - period), format('%d', start), format('%d', start + period)
  local v = call('HMGET', wkey, f0, f1, f2, f3)
  local c0, c1, c2, c3 = sliding_window_num(wkey, f0, v[1]), sliding_window_num(wkey, f1, v[2]),
    sliding_window_num(wkey, f2, v[3]), sliding_window_num(wkey, f3, v[4])
  if not c3 then
    if c2 then
      return {start = start, prev = c1 or 0, curr = c2, wkey = wkey, stored = true}
    elseif c1 then
      return {start = start - period, prev = c0 or 0, curr = c1, wkey = wkey, stored = true}
    elseif c0 then
      -- The field before it is gone or was never read: Step reads an
      -- ended state as the zero state whatever its Prev.
      return {start = start - 2 * period, prev = 0, curr = c0, wkey = wkey, stored = true}
    elseif call('EXISTS', wkey, key) == 0 then
      -- A new key: one command for both.
      return {start = 0, prev = 0, curr = 0, wkey = wkey, stored = false}
    elseif call('EXISTS', wkey) == 0 then
      local s = load_state(key, SLIDING_WINDOW_FIELDS)
      s.wkey, s.stored = wkey, false
      return s
    end
  end
  local latest = nil
  for _, f in ipairs(call('HKEYS', wkey)) do
    local w = tonumber(f)
    if w and (not latest or w > latest) then
      latest = w
    end
  end
  if not latest then
    fail('state', 'the key ' .. wkey .. ' holds no window counter')
  end
  local fp, fc = format('%d', latest - period), format('%d', latest)
  v = call('HMGET', wkey, fp, fc)
  return {start = latest, prev = sliding_window_num(wkey, fp, v[1]) or 0, curr = sliding_window_num(wkey, fc, v[2]) or 0,
    wkey = wkey, stored = true}
end

-- sliding_window_save stores s, a step (or refund) at now of old
-- (sliding_window_load's, at the same now), on the counters: nothing for
-- a state equal to old (as save_state), the hash deleted for the zero
-- state; in old's window, the counters that changed (a request that
-- counts: one HINCRBY); in the window after it, old's counter kept as the
-- new Prev, the one before it deleted, the new window's made, and the TTL
-- moved to its end; else (a new hash, or a state of a later window) the
-- two counters alone, in a hash made anew.
local function sliding_window_save(key, p, old, s, now)
  if s.start == old.start and s.prev == old.prev and s.curr == old.curr then
    return
  end
  local wkey, period = old.wkey, p.period
  if s.prev <= 0 and s.curr <= 0 then
    if old.stored then
      call('DEL', wkey)
    end
    return
  end
  local fp, fc = format('%d', s.start - period), format('%d', s.start)
  if old.stored and s.start == old.start then
    if s.prev ~= old.prev then
      call('HSET', wkey, fp, s.prev)
    end
    if s.curr ~= old.curr then
      call('HINCRBY', wkey, fc, s.curr - old.curr)
    end
    return
  end
  local ttl = ttl_ms(s.start + 2 * period, now) + SLIDING_WINDOW_MARGIN_MS
  if old.stored and s.start == old.start + period then
    call('HDEL', wkey, format('%d', old.start - period))
    if s.prev ~= old.curr then
      call('HSET', wkey, fp, s.prev, fc, s.curr)
    else
      call('HSET', wkey, fc, s.curr)
    end
    call('PEXPIRE', wkey, ttl)
    return
  end
  if old.stored then
    call('DEL', wkey)
  end
  if s.prev > 0 then
    call('HSET', wkey, fp, s.prev, fc, s.curr)
  else
    call('HSET', wkey, fc, s.curr)
  end
  call('PEXPIRE', wkey, ttl)
end

-- sliding_window_apply decides r at now on the counters and stores the
-- state, as memstore does.
local function sliding_window_apply(key, p, r, now)
  local old = sliding_window_load(key, p, now)
  local s, d = sliding_window_step(p, old, now, r.cost)
  sliding_window_save(key, p, old, s, now)
  return d
end

-- main
return single('sliding_window', sliding_window_apply, KEYS, ARGV)
