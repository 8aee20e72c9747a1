-- token_bucket.lua decides one request of a token bucket. It mirrors
-- algorithm.TokenBucket.Step (tokenbucket.go) line for line, with the same
-- names; the exact rate arithmetic (instant, rate, count) is in rate.lua.
--
-- KEYS[1]  the state: a string "<taken>:<last>:<last_frac>"
--          (TokenBucket.Taken, .Last, .LastFrac), with a TTL until the
--          bucket is full again (TokenBucket.Expires; at least MIN_TTL_MS);
--          absent for a full bucket.
-- ARGV     one request, as parse_request in common.lua reads it: now_us,
--          limit, period, cost, burst (the capacity, > 0 if limit > 0),
--          flags (0), id ("", or for a reservation that waits the units
--          the bucket may owe, Params.Wait: p.wait).
-- Reply    {allowed 0/1, limit, remaining, reset_after_us, retry_after_us
--          (-1 never), now_us}.
-- Mirrors  algorithm.TokenBucket.Step and .Expires (algorithm/tokenbucket.go)

local TOKEN_BUCKET_FIELDS = {'taken', 'last', 'last_frac'}

-- token_bucket_credit is TokenBucket.credit: the tokens missing at now
-- once those earned since last are credited, and the instant the last of
-- them was (two values: see rate.lua). A state kept under a larger Burst
-- (a store shares it when a limit changes) is read under this one: the
-- bucket is at most empty, which also keeps taken*T within the bounds
-- parse_request checks for p.
local function token_bucket_credit(p, t, s, now)
  local taken = min(max(0, s.taken), p.burst)
  local last, last_f = norm(t, s.last, s.last_frac)
  if taken > 0 and less(last, last_f, now, 0) then
    local since, since_f = sub(t, now, 0, last, last_f)
    local n = count(t, since, since_f, taken)
    taken = taken - n
    local n_t, n_t_f = times(t, n)
    last, last_f = add(t, last, last_f, n_t, n_t_f)
  end
  return taken, last, last_f
end

-- token_bucket_step is TokenBucket.Step.
local function token_bucket_step(p, s, now, cost)
  if p.limit <= 0 then
    return {taken = 0, last = 0, last_frac = 0}, deny_all(cost)
  end
  local t = rate_of(p)
  local taken, last, last_f = token_bucket_credit(p, t, s, now)
  if taken == 0 then
    last, last_f = now, 0
  end
  local allowed = p.burst - taken >= cost
  local at, at_f = 0, 0 -- when the tokens of a denied cost are there
  if allowed then
    taken = taken + cost
  elseif cost <= p.burst then
    local x, x_f = times(t, cost - (p.burst - taken))
    at, at_f = add(t, last, last_f, x, x_f)
    local wait = p.wait or 0
    if wait > 0 then
      local w, w_f = times(t, wait)
      local end_, end_f = add(t, now, 0, w, w_f)
      if not less(end_, end_f, at, at_f) then
        -- Admitted in debt: the bucket is empty until at.
        allowed, taken, last, last_f = true, p.burst, at, at_f
      end
    end
  end
  local d = decision(allowed, p.burst, max(0, p.burst - taken))
  if taken > 0 then
    local x, x_f = times(t, taken)
    d.reset_after = ceil(add(t, last, last_f, x, x_f)) - now
  end
  if allowed then
  elseif cost > p.burst then
    d.retry_after = NEVER
  else
    local wait = p.wait or 0
    if wait > 0 then
      -- A request that waits as long is admitted from wait*T before.
      local w, w_f = times(t, wait)
      at, at_f = sub(t, at, at_f, w, w_f)
    end
    d.retry_after = ceil(at, at_f) - now
  end
  if taken == 0 then
    return {taken = 0, last = 0, last_frac = 0}, d
  end
  return {taken = taken, last = last, last_frac = last_f}, d
end

-- token_bucket_expires is TokenBucket.Expires.
local function token_bucket_expires(p, s)
  if s.taken <= 0 or p.limit <= 0 then
    return 0
  end
  local t = rate_of(p)
  local last, last_f = norm(t, s.last, s.last_frac)
  local x, x_f = times(t, min(s.taken, p.burst))
  return ceil(add(t, last, last_f, x, x_f))
end

-- token_bucket_apply loads the state, steps it and stores it, as memstore does.
local function token_bucket_apply(key, p, r, now)
  local old = load_state(key, TOKEN_BUCKET_FIELDS)
  local s, d = token_bucket_step(p, old, now, r.cost)
  -- The expiry moves with every admission: no old_exp (see save_state).
  save_state(key, TOKEN_BUCKET_FIELDS, old, s, token_bucket_expires(p, s), now, 0)
  return d
end

-- main
return single('token_bucket', token_bucket_apply, KEYS, ARGV)
