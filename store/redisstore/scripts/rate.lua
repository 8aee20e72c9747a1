-- rate.lua: the exact rate arithmetic of token_bucket and gcra. It mirrors
-- algorithm/params.go (instant, rate, count) and tokenbucket.go's denyAll
-- line for line. Included after common.lua.
--
-- An emission interval T = Period/Limit is kept as q + r/l microseconds and
-- an instant as us + frac/l, so "3 per second" credits a token every
-- 333333 1/3 µs with no drift; every value stays below MAX_EXACT.

-- trunc is Go's int64(f) for a float64 f.
local function trunc(f)
  if f < 0 then
    return math.ceil(f)
  end
  return floor(f)
end

-- An instant is {us = , frac = }: us microseconds plus frac/l of one,
-- 0 <= frac < l (algorithm's instant).
local function instant(us, frac)
  return {us = us, frac = frac}
end

-- new_rate is newRate: the emission interval T = period/limit = q + r/l.
local function new_rate(limit, period)
  local q = floor_div(period, limit)
  return {q = q, r = period - q * limit, l = limit}
end

-- times is rate.times: n*T.
local function times(t, n)
  local x = n * t.r
  local d = floor_div(x, t.l)
  return instant(n * t.q + d, x - d * t.l)
end

local function add(t, a, b)
  local us, frac = a.us + b.us, a.frac + b.frac
  if frac >= t.l then
    us, frac = us + 1, frac - t.l
  end
  return instant(us, frac)
end

local function sub(t, a, b)
  local us, frac = a.us - b.us, a.frac - b.frac
  if frac < 0 then
    us, frac = us - 1, frac + t.l
  end
  return instant(us, frac)
end

-- norm is rate.norm: a fraction kept under a larger earlier limit is
-- clamped.
local function norm(t, a)
  if a.frac >= t.l then
    a.frac = t.l - 1
  end
  if a.frac < 0 then
    a.frac = 0
  end
  return a
end

local function less(a, b)
  return a.us < b.us or (a.us == b.us and a.frac < b.frac)
end

local function ceil(a)
  if a.frac > 0 then
    return a.us + 1
  end
  return a.us
end

-- count is rate.count: floor(d/T) for 0 <= d <= max*T, from a floating
-- estimate corrected by exact comparisons (the same in Go and Lua).
local function count(t, d, max)
  local f = (d.us * t.l + d.frac) / (t.q * t.l + t.r)
  local est = max
  if f < max then
    est = trunc(f)
  end
  if est < 0 then
    est = 0
  end
  while est > 0 and less(d, times(t, est)) do
    est = est - 1
  end
  while est < max and not less(d, times(t, est + 1)) do
    est = est + 1
  end
  return est
end

-- deny_all is denyAll: the decision of a limit of zero.
local function deny_all(cost)
  local d = decision(cost <= 0, 0, 0)
  if not d.allowed then
    d.retry_after = NEVER
  end
  return d
end

