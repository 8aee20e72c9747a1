-- gcra.lua decides one request of the generic cell rate algorithm. It
-- mirrors algorithm.GCRA.Step (gcra.go) line for line, with the same names;
-- the exact rate arithmetic (instant, rate, count) is in rate.lua.
--
-- KEYS[1]  the state: a string "<tat>:<tat_frac>" (GCRA.TAT, .TATFrac),
--          with a TTL until the bucket is full again (GCRA.Expires; at
--          least MIN_TTL_MS); absent for a full bucket.
-- ARGV     one request, as parse_request in common.lua reads it: now_us,
--          limit, period, cost, burst (the capacity, > 0 if limit > 0),
--          flags (0), id ("").
-- Reply    {allowed 0/1, limit, remaining, reset_after_us, retry_after_us
--          (-1 never), now_us}.
-- Mirrors  algorithm.GCRA.Step and .Expires (algorithm/gcra.go)

local GCRA_FIELDS = {'tat', 'tat_frac'}

-- gcra_step is GCRA.Step.
local function gcra_step(p, s, now, cost)
  if p.limit <= 0 then
    return {tat = 0, tat_frac = 0}, deny_all(cost)
  end
  local t = new_rate(p.limit, p.period)
  local now_i = instant(now, 0)
  local tat = norm(t, instant(s.tat, s.tat_frac))
  if less(tat, now_i) then
    tat = now_i
  end
  local burst_t = times(t, p.burst)
  -- allow_at = tat + cost*T - Burst*T is the earliest instant the request
  -- fits; a cost above Burst never fits (and cost*T is not computed).
  local allow_at = instant(0, 0)
  local allowed = false
  if cost <= p.burst then
    local next = add(t, tat, times(t, cost))
    allow_at = sub(t, next, burst_t)
    allowed = not less(now_i, allow_at)
    if allowed then
      tat = next
    end
  end
  -- The tokens left are floor((Burst*T - (tat - now)) / T).
  local remaining = 0
  local ahead = sub(t, tat, now_i)
  if less(ahead, burst_t) then
    remaining = count(t, sub(t, burst_t, ahead), p.burst)
  end
  local d = decision(allowed, p.burst, remaining)
  if less(now_i, tat) then
    d.reset_after = ceil(tat) - now
  end
  if allowed then
  elseif cost > p.burst then
    d.retry_after = NEVER
  else
    d.retry_after = ceil(allow_at) - now
  end
  if not less(now_i, tat) then
    return {tat = 0, tat_frac = 0}, d
  end
  return {tat = tat.us, tat_frac = tat.frac}, d
end

-- gcra_expires is GCRA.Expires.
local function gcra_expires(p, s)
  if s.tat <= 0 and s.tat_frac <= 0 then
    return 0
  end
  return ceil(instant(s.tat, s.tat_frac))
end

-- gcra_apply loads the state, steps it and stores it, as memstore does.
local function gcra_apply(key, p, r, now)
  local old = load_state(key, GCRA_FIELDS)
  local s, d = gcra_step(p, old, now, r.cost)
  -- The expiry moves with every admission: no old_exp (see save_state).
  save_state(key, GCRA_FIELDS, old, s, gcra_expires(p, s), now, 0)
  return d
end

-- main
return single('gcra', gcra_apply, KEYS, ARGV)
