-- fixed_window.lua decides one request of a fixed window counter. It
-- mirrors algorithm.FixedWindow.Step (fixedwindow.go) line for line, with
-- the same names.
--
-- KEYS[1]  the state: a string "<start>:<count>" (FixedWindow.Start,
--          .Count), or "<start>:<count>:<next>" for a calendar window
--          (FixedWindow.Next, where it ends), with a TTL until
--          FixedWindow.Expires (at least MIN_TTL_MS); absent for the zero
--          state.
-- ARGV     one request, as parse_request in common.lua reads it: now_us,
--          limit, period, cost, burst (0), flags (first_hit 1,
--          count_rejected 2, calendar 8), id ("", or a calendar's
--          windows).
-- Reply    {allowed 0/1, limit, remaining, reset_after_us, retry_after_us
--          (-1 never), now_us}.
-- Mirrors  algorithm.FixedWindow.Step and .Expires (algorithm/fixedwindow.go)

local FIXED_WINDOW_FIELDS = {'start', 'count', 'next', short = 2}

-- fixed_window_end is FixedWindow.end: where the state's window ends.
local function fixed_window_end(p, s)
  if p.calendar then
    return s.next
  end
  return s.start + p.period
end

-- fixed_window_step is FixedWindow.Step.
local function fixed_window_step(p, s, now, cost)
  local start, count = s.start, s.count
  local stop = fixed_window_end(p, s)
  if count <= 0 or now >= stop then
    count = 0
    if p.calendar then
      start, stop = calendar_window(p, now)
    elseif p.first_hit then
      start, stop = now, now + p.period
    else
      start = now - mod(now, p.period)
      stop = start + p.period
    end
  end
  local allowed = count + cost <= p.limit
  if allowed then
    count = count + cost
  elseif p.count_rejected then
    count = min(count + cost, p.limit + 1)
  end
  local d = decision(allowed, p.limit, max(0, p.limit - count))
  local next_start = 0 -- 0 but for a calendar window's count
  if count > 0 then
    d.reset_after = stop - now
    if p.calendar then
      next_start = stop
    end
  else
    start = 0
  end
  if allowed then
  elseif cost > p.limit then
    d.retry_after = NEVER
  else
    d.retry_after = stop - now
  end
  return {start = start, count = count, next = next_start}, d
end

-- fixed_window_expires is FixedWindow.Expires.
local function fixed_window_expires(p, s)
  if s.count <= 0 then
    return 0
  end
  return fixed_window_end(p, s)
end

-- fixed_window_apply loads the state, steps it and stores it, as memstore does.
local function fixed_window_apply(key, p, r, now)
  local old = load_state(key, FIXED_WINDOW_FIELDS)
  local s, d = fixed_window_step(p, old, now, r.cost)
  local old_exp = 0
  if r.now < 0 then -- the server's time: see save_state
    old_exp = fixed_window_expires(p, old)
  end
  save_state(key, FIXED_WINDOW_FIELDS, old, s, fixed_window_expires(p, s), now, old_exp)
  return d
end

-- main
return single('fixed_window', fixed_window_apply, KEYS, ARGV)
