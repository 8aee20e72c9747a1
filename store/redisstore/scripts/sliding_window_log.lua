-- sliding_window_log.lua decides one request of a sliding window log. It
-- mirrors algorithm.SlidingWindowLog.Step (slidinglog.go) line for line,
-- with the same names; where Step works on the sorted slice Log, the script
-- works on the sorted set that holds it.
--
-- KEYS[1]  the state: a sorted set with one member "<id>:<i>" per admitted
--          unit (i = 0..cost-1 of the request that admitted it), scored by
--          its time in µs (SlidingWindowLog.Log), with a TTL until the newest
--          entry + Period (SlidingWindowLog.Expires; at least MIN_TTL_MS);
--          absent when empty.
--          Members are unique because id is random per call.
-- ARGV     one request, as parse_request in common.lua reads it: now_us,
--          limit, period, cost, burst (0), flags (0), id (random, unique
--          to this call).
-- Reply    {allowed 0/1, limit, remaining, reset_after_us, retry_after_us
--          (-1 never), now_us}.
-- Mirrors  algorithm.SlidingWindowLog.Step and .Expires (algorithm/slidinglog.go)
--
-- The script is O(log N + dropped + cost), N <= the largest limit used on
-- the key, at most MAX_LOG_LIMIT: never O(keyspace).

-- sliding_window_log_step is SlidingWindowLog.Step on the sorted set key.
local function sliding_window_log_step(key, p, now, cost, id)
  local held = hold(key)
  local cutoff = now - p.period
  local drop = call('ZREMRANGEBYSCORE', key, '-inf', str(cutoff))
  local n = call('ZCARD', key)
  local allowed = n + cost <= p.limit
  if allowed and cost > 0 then
    -- The sorted set keeps the log sorted even when the clock went
    -- backwards.
    local members = {}
    for i = 0, cost - 1 do
      members[#members + 1] = id .. ':' .. str(i)
    end
    zadd(key, str(now), members)
    n = n + cost
  end
  local d = decision(allowed, p.limit, max(0, p.limit - n))
  local newest = 0
  if n > 0 then
    newest = zscore_at(key, -1)
    d.reset_after = newest + p.period - now
  end
  if allowed then
  elseif cost > p.limit then
    d.retry_after = NEVER
  else
    -- The oldest n+cost-Limit entries must leave the window first.
    d.retry_after = zscore_at(key, n + cost - p.limit - 1) + p.period - now
  end
  -- The key's TTL is SlidingWindowLog.Expires, the newest entry + Period;
  -- an empty sorted set no longer exists.
  if n > 0 and (held or drop > 0 or (allowed and cost > 0)) then
    call('PEXPIRE', key, ttl_ms(newest + p.period, now))
  end
  return d
end

local function sliding_window_log_apply(key, p, r, now)
  return sliding_window_log_step(key, p, now, r.cost, r.id)
end

-- main
return single('sliding_window_log', sliding_window_log_apply, KEYS, ARGV)
