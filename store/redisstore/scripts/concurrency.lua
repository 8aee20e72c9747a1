-- concurrency.lua acquires, renews or releases one concurrency lease. It
-- mirrors algorithm.Concurrency.Step (concurrency.go) line for line, with the
-- same names; where Step works on the sorted slice Units, the script works
-- on the sorted set that holds them.
--
-- KEYS[1]  the state: a sorted set with one member "<lease ID>.<index>" per
--          held unit (algorithm.Unit), scored by the µs at which it expires,
--          with a TTL until the last unit expires (Concurrency.Expires; at
--          least MIN_TTL_MS); absent when no unit is held.
-- ARGV     one request, as parse_request in common.lua reads it: now_us,
--          limit, period (the lease TTL), cost, burst (0), flags (release
--          4), id (the lease ID; "" only for a peek).
-- Reply    {allowed 0/1, limit, remaining, reset_after_us, retry_after_us
--          (-1 never), now_us}.
-- Mirrors  algorithm.Concurrency.Step and .Expires (algorithm/concurrency.go)
--
-- The script is O(log N + expired + min(cost, N) + the units ahead in the
-- retry), N <= the largest limit used on the key, at most MAX_LOG_LIMIT:
-- never O(keyspace).

-- concurrency_unit splits a member "<ID>.<Index>"; nil for a foreign member.
local function concurrency_unit(member)
  local id, index = match(member, '^(.*)%.(%d+)$')
  if not id then
    return nil, nil
  end
  return id, tonumber(index)
end

-- concurrency_own lists the members of the units lease id holds with
-- Index < cost (own in Step), and the units held in all.
local function concurrency_own(key, id, cost)
  local held = call('ZCARD', key)
  local own = {}
  if id == '' or cost <= 0 or held == 0 then
    return own, held
  end
  -- An index is below the largest limit the lease was admitted under, so
  -- below MAX_LOG_LIMIT. Ask for the candidates by name when they are fewer
  -- than the units held, else look at every unit.
  local k = min(cost, MAX_LOG_LIMIT)
  if k <= held then
    local members = {}
    for i = 0, k - 1 do
      members[#members + 1] = id .. '.' .. str(i)
    end
    local i = 0
    zchunks('ZMSCORE', key, members, function(scores)
      for _, score in ipairs(scores) do
        i = i + 1
        if score then
          own[#own + 1] = members[i]
        end
      end
    end)
  else
    for _, m in ipairs(call('ZRANGE', key, 0, -1)) do
      local uid, index = concurrency_unit(m)
      if uid == id and index < cost then
        own[#own + 1] = m
      end
    end
  end
  return own, held
end

-- concurrency_step is Concurrency.Step on the sorted set key.
local function concurrency_step(key, p, now, cost, id, release)
  local held_ttl = hold(key)
  local dropped = call('ZREMRANGEBYSCORE', key, '-inf', str(now))
  -- An acquire above the limit is denied for ever whatever id holds: skip
  -- looking its units up.
  local own_cost = cost
  if not release and cost > p.limit then
    own_cost = 0
  end
  local own, held = concurrency_own(key, id, own_cost)
  local own_held = #own
  local others = held - own_held
  local allowed = true
  local changed = held_ttl or dropped > 0
  if release then
    if own_held > 0 then
      zchunks('ZREM', key, own)
      changed = true
    end
  else
    -- A peek (cost 0) is decided like any cost: denied only when the key
    -- is over its limit (a limit lowered below what is held).
    allowed = others + cost <= p.limit
    if allowed and cost > 0 then
      -- Replacing the units id holds below cost by units 0..cost-1 is
      -- setting the score of those members.
      local members = {}
      for i = 0, cost - 1 do
        members[#members + 1] = id .. '.' .. str(i)
      end
      zadd(key, str(now + p.period), members)
      changed = true
    end
  end
  held = call('ZCARD', key)
  local d = decision(allowed, p.limit, max(0, p.limit - held))
  local last = 0
  if held > 0 then
    last = zscore_at(key, -1)
    d.reset_after = last - now
  end
  if allowed then
  elseif cost > p.limit then
    d.retry_after = NEVER
  else
    -- The k oldest units of other leases must expire first.
    local k = others + cost - p.limit
    local is_own = {}
    for _, m in ipairs(own) do
      is_own[m] = true
    end
    local units = call('ZRANGE', key, 0, k + own_held - 1, 'WITHSCORES')
    for i = 1, #units, 2 do
      if not is_own[units[i]] then
        k = k - 1
        if k == 0 then
          d.retry_after = tonumber(units[i + 1]) - now
          break
        end
      end
    end
  end
  -- The key's TTL is Concurrency.Expires, the last unit's expiry; an empty
  -- sorted set no longer exists.
  if held > 0 and changed then
    call('PEXPIRE', key, ttl_ms(last, now))
  end
  return d
end

local function concurrency_apply(key, p, r, now)
  return concurrency_step(key, p, now, r.cost, r.id, r.release)
end

-- main
return single('concurrency', concurrency_apply, KEYS, ARGV)
