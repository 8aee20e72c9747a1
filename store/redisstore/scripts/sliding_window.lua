-- sliding_window.lua decides one request of a sliding window counter. It
-- mirrors algorithm.SlidingWindow.Step, slidingRetry and slidingFirst
-- (slidingwindow.go) line for line, with the same names.
--
-- KEYS[1]  the state: a string "<start>:<prev>:<curr>" (SlidingWindow.Start,
--          .Prev, .Curr), with a TTL until SlidingWindow.Expires (at least
--          MIN_TTL_MS); absent for the zero state.
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

-- sliding_window_apply loads the state, steps it and stores it, as memstore does.
local function sliding_window_apply(key, p, r, now)
  local old = load_state(key, SLIDING_WINDOW_FIELDS)
  local s, d = sliding_window_step(p, old, now, r.cost)
  local old_exp = 0
  if r.now < 0 then -- the server's time: see save_state
    old_exp = sliding_window_expires(p, old)
  end
  save_state(key, SLIDING_WINDOW_FIELDS, old, s, sliding_window_expires(p, s), now, old_exp)
  return d
end

-- main
return single('sliding_window', sliding_window_apply, KEYS, ARGV)
