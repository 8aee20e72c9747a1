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
--          flags (0), id ("").
-- Reply    {allowed 0/1, limit, remaining, reset_after_us, retry_after_us
--          (-1 never), now_us}.
-- Mirrors  algorithm.TokenBucket.Step and .Expires (algorithm/tokenbucket.go)

local TOKEN_BUCKET_FIELDS = {'taken', 'last', 'last_frac'}

-- token_bucket_credit is TokenBucket.credit: the tokens missing at now
-- once those earned since last are credited, and the instant the last of
-- them was. A state kept under a larger Burst (a store shares it when a
-- limit changes) is read under this one: the bucket is at most empty,
-- which also keeps taken*T within the bounds parse_request checks for p.
local function token_bucket_credit(p, t, s, now)
  local taken = min(max(0, s.taken), p.burst)
  local last = norm(t, instant(s.last, s.last_frac))
  local now_i = instant(now, 0)
  if taken > 0 and less(last, now_i) then
    local n = count(t, sub(t, now_i, last), taken)
    taken = taken - n
    last = add(t, last, times(t, n))
  end
  return taken, last
end

-- token_bucket_step is TokenBucket.Step.
local function token_bucket_step(p, s, now, cost)
  if p.limit <= 0 then
    return {taken = 0, last = 0, last_frac = 0}, deny_all(cost)
  end
  local t = new_rate(p.limit, p.period)
  local taken, last = token_bucket_credit(p, t, s, now)
  local now_i = instant(now, 0)
  if taken == 0 then
    last = now_i
  end
  local allowed = p.burst - taken >= cost
  if allowed then
    taken = taken + cost
  end
  local d = decision(allowed, p.burst, max(0, p.burst - taken))
  if taken > 0 then
    d.reset_after = ceil(add(t, last, times(t, taken))) - now
  end
  if allowed then
  elseif cost > p.burst then
    d.retry_after = NEVER
  else
    d.retry_after = ceil(add(t, last, times(t, cost - (p.burst - taken)))) - now
  end
  if taken == 0 then
    return {taken = 0, last = 0, last_frac = 0}, d
  end
  return {taken = taken, last = last.us, last_frac = last.frac}, d
end

-- token_bucket_expires is TokenBucket.Expires.
local function token_bucket_expires(p, s)
  if s.taken <= 0 or p.limit <= 0 then
    return 0
  end
  local t = new_rate(p.limit, p.period)
  return ceil(add(t, norm(t, instant(s.last, s.last_frac)), times(t, min(s.taken, p.burst))))
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
