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

-- gcra_step is GCRA.Step. Instants are pairs of values (see rate.lua):
-- tat, tat_f is the instant tat.
local function gcra_step(p, s, now, cost)
  if p.limit <= 0 then
    return {tat = 0, tat_frac = 0}, deny_all(cost)
  end
  local t = rate_of(p)
  local tat, tat_f = norm(t, s.tat, s.tat_frac)
  if less(tat, tat_f, now, 0) then
    tat, tat_f = now, 0
  end
  -- Burst*T, once per params p, as rate_of.
  local burst_t, burst_t_f = p.burst_t, p.burst_t_f
  if not burst_t then
    burst_t, burst_t_f = times(t, p.burst)
    p.burst_t, p.burst_t_f = burst_t, burst_t_f
  end
  -- allow_at = tat + cost*T - Burst*T is the earliest instant the request
  -- fits; a cost above Burst never fits (and cost*T is not computed).
  local allow_at, allow_at_f = 0, 0
  local allowed = false
  if cost <= p.burst then
    local cost_t, cost_t_f = times(t, cost)
    local next, next_f = add(t, tat, tat_f, cost_t, cost_t_f)
    allow_at, allow_at_f = sub(t, next, next_f, burst_t, burst_t_f)
    allowed = not less(now, 0, allow_at, allow_at_f)
    if allowed then
      tat, tat_f = next, next_f
    end
  end
  -- The tokens left are floor((Burst*T - (tat - now)) / T).
  local remaining = 0
  local ahead, ahead_f = sub(t, tat, tat_f, now, 0)
  if less(ahead, ahead_f, burst_t, burst_t_f) then
    local left, left_f = sub(t, burst_t, burst_t_f, ahead, ahead_f)
    remaining = count(t, left, left_f, p.burst)
  end
  local d = decision(allowed, p.burst, remaining)
  if less(now, 0, tat, tat_f) then
    d.reset_after = ceil(tat, tat_f) - now
  end
  if allowed then
  elseif cost > p.burst then
    d.retry_after = NEVER
  else
    d.retry_after = ceil(allow_at, allow_at_f) - now
  end
  if not less(now, 0, tat, tat_f) then
    return {tat = 0, tat_frac = 0}, d
  end
  return {tat = tat, tat_frac = tat_f}, d
end

-- gcra_expires is GCRA.Expires.
local function gcra_expires(p, s)
  if s.tat <= 0 and s.tat_frac <= 0 then
    return 0
  end
  return ceil(s.tat, s.tat_frac)
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
