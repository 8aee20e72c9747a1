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

-- An instant is us microseconds plus frac/l of one, 0 <= frac < l
-- (algorithm's instant), passed as the two numbers us, frac: the helpers
-- below take and return instants as pairs of values rather than tables,
-- because a table made per operation was most of what a GCRA decision cost
-- Redis (about 2 µs of its step, lua-loop.sh, 2026-12-01).

-- new_rate is newRate: the emission interval T = period/limit = q + r/l.
local function new_rate(limit, period)
  local q = floor_div(period, limit)
  return {q = q, r = period - q * limit, l = limit}
end

-- rate_of is new_rate(p.limit, p.period), made once per params p (kept in
-- p.rate; nothing changes a p once read): multi.lua steps every request of
-- a parameter set with one p. It returns nil for a limit of 0, which has
-- no rate.
local function rate_of(p)
  local t = p.rate
  if not t and p.limit > 0 then
    t = new_rate(p.limit, p.period)
    p.rate = t
  end
  return t
end

-- times is rate.times: n*T.
local function times(t, n)
  local x = n * t.r
  local d = floor_div(x, t.l)
  return n * t.q + d, x - d * t.l
end

-- add is a+b.
local function add(t, a_us, a_frac, b_us, b_frac)
  local us, frac = a_us + b_us, a_frac + b_frac
  if frac >= t.l then
    return us + 1, frac - t.l
  end
  return us, frac
end

-- sub is a-b.
local function sub(t, a_us, a_frac, b_us, b_frac)
  local us, frac = a_us - b_us, a_frac - b_frac
  if frac < 0 then
    return us - 1, frac + t.l
  end
  return us, frac
end

-- norm is rate.norm: a fraction kept under a larger earlier limit is
-- clamped.
local function norm(t, us, frac)
  if frac >= t.l then
    frac = t.l - 1
  end
  if frac < 0 then
    frac = 0
  end
  return us, frac
end

-- less is a < b.
local function less(a_us, a_frac, b_us, b_frac)
  return a_us < b_us or (a_us == b_us and a_frac < b_frac)
end

-- ceil is an instant rounded up to a microsecond.
local function ceil(us, frac)
  if frac > 0 then
    return us + 1
  end
  return us
end

-- count is rate.count: floor(d/T) for 0 <= d <= max*T, from a floating
-- estimate corrected by exact comparisons (the same in Go and Lua).
local function count(t, d_us, d_frac, max)
  if max <= 0 or d_us < 0 or less(d_us, d_frac, t.q, t.r) then
    return 0 -- less than one interval
  end
  if t.r == 0 then
    -- T is a whole q microseconds (q >= 1): floor(d/T) is floor(d_us/q),
    -- exactly, because d_frac < l adds less than one microsecond.
    return min(floor_div(d_us, t.q), max)
  end
  local f = (d_us * t.l + d_frac) / (t.q * t.l + t.r)
  local est = max
  if f < max then
    est = trunc(f)
  end
  if est < 0 then
    est = 0
  end
  while est > 0 do
    local e_us, e_frac = times(t, est)
    if not less(d_us, d_frac, e_us, e_frac) then
      break
    end
    est = est - 1
  end
  while est < max do
    local e_us, e_frac = times(t, est + 1)
    if less(d_us, d_frac, e_us, e_frac) then
      break
    end
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

