-- refund.lua gives back units that requests took. Its functions mirror
-- algorithm.FixedWindow.Refund, SlidingWindow.Refund,
-- SlidingWindowLog.Refund, TokenBucket.Refund and GCRA.Refund
-- (algorithm/refund.go) line for line, with the same names; the
-- reservation scripts (reserve.lua, settle.lua) settle holds with them.
-- Concurrency has no refund: its leases are holds already.
--
-- Its main part is the refund script, which gives back what the admitted
-- slots of a batch split over several Redis Cluster slots took when
-- another slot denied it (Store.ApplyBatch's compensation).
--
-- The Go side builds the scripts that use it from common.lua, state.lua,
-- rate.lua, zset.lua, every algorithm's functions, batch.lua's functions
-- and this file.
--
-- KEYS[i]  the state of request i, as in the algorithm's script.
-- ARGV     per request, REFUND_WIDTH = (2 + ARGS_PER_REQUEST) strings: the
--          algorithm name; the request as parse_request in common.lua
--          reads it, whose now_us is the time of the refund (-1 for the
--          server's) and whose cost is the units to give back; then at_us,
--          the time the units were taken at (the now_us its decision
--          reported).
-- Reply    per request, {refunded, allowed 0/1, limit, remaining,
--          reset_after_us, retry_after_us (-1 never), now_us}: the units
--          given back, then a peek at the state after (cost 0, nothing
--          stored).
-- Mirrors  algorithm.FixedWindow.Refund, SlidingWindow.Refund,
--          SlidingWindowLog.Refund, TokenBucket.Refund, GCRA.Refund
--          (algorithm/refund.go)

-- fixed_window_live is FixedWindow.Live (algorithm/raise.go).
local function fixed_window_live(p, s, now)
  return s.count > 0 and now < fixed_window_end(p, s)
end

-- fixed_window_raise is FixedWindow.Raise (algorithm/raise.go): raise.lua
-- runs it, and reserve.lua rebuilds a durable quota's counter with it.
local function fixed_window_raise(p, s, now, start, units)
  local stop, next_start = start + p.period, 0
  if p.calendar then
    local ws
    ws, stop = calendar_window(p, now)
    if ws ~= start then
      return s
    end
    next_start = stop
  end
  if units <= 0 or now < start or now >= stop then
    return s
  end
  units = min(units, p.limit + 1)
  if not fixed_window_live(p, s, now) then
    return {start = start, count = units, next = next_start}
  end
  return {start = s.start, count = max(s.count, units), next = s.next}
end

-- fixed_window_refund is FixedWindow.Refund.
local function fixed_window_refund(p, s, now, at, units)
  local stop = fixed_window_end(p, s)
  local live = s.count > 0 and now < stop
  if not live or units <= 0 or at < s.start or at >= stop then
    return s, 0
  end
  local back = min(units, s.count)
  local count = s.count - back
  if count <= 0 then
    return {start = 0, count = 0, next = 0}, back
  end
  return {start = s.start, count = count, next = s.next}, back
end

-- sliding_window_refund is SlidingWindow.Refund.
local function sliding_window_refund(p, s, now, at, units)
  -- Bring the state to now's window first, as Step does.
  local start = now - mod(now, p.period)
  local prev, curr = s.prev, s.curr
  if s.prev <= 0 and s.curr <= 0 then
    return {start = 0, prev = 0, curr = 0}, 0
  elseif start == s.start then
  elseif start == s.start + p.period then
    prev, curr = s.curr, 0
  elseif start < s.start then
    start = s.start -- the clock went backwards: stay in the stored window
  else
    return {start = 0, prev = 0, curr = 0}, 0
  end
  local back = 0
  if units <= 0 then
  elseif at >= start and at < start + p.period then
    back = min(units, curr)
    curr = curr - back
  elseif at >= start - p.period and at < start then
    back = min(units, prev)
    prev = prev - back
  end
  if prev <= 0 and curr <= 0 then
    return {start = 0, prev = 0, curr = 0}, back
  end
  return {start = start, prev = prev, curr = curr}, back
end

-- sliding_window_log_refund is SlidingWindowLog.Refund on the sorted set
-- key: it removes up to units members scored at (the entries of one
-- instant are alike), none once they have left the trailing Period. The
-- key's TTL stays the newest entry + Period (SlidingWindowLog.Expires).
local function sliding_window_log_refund(key, p, now, at, units)
  if units <= 0 or at <= now - p.period then
    return 0
  end
  local held = hold(key)
  local members = call('ZRANGEBYSCORE', key, str(at), str(at), 'LIMIT', 0, units)
  local back = #members
  if back > 0 then
    zchunks('ZREM', key, members)
  end
  if (held or back > 0) and call('ZCARD', key) > 0 then
    call('PEXPIRE', key, ttl_ms(zscore_at(key, -1) + p.period, now))
  end
  return back
end

-- token_bucket_refund is TokenBucket.Refund.
local function token_bucket_refund(p, s, now, _, units)
  if p.limit <= 0 or units <= 0 then
    return s, 0
  end
  local t = rate_of(p)
  local taken, last, last_f = token_bucket_credit(p, t, s, now)
  local back = 0
  if taken == p.burst and less(now, 0, last, last_f) then
    -- In debt: the whole tokens owed, ceil((last-now)/T), go back first.
    local ahead, ahead_f = sub(t, last, last_f, now, 0)
    local owed = count(t, ahead, ahead_f, MAX_LIMIT)
    local owed_t, owed_t_f = times(t, owed)
    local at, at_f = add(t, now, 0, owed_t, owed_t_f)
    if less(at, at_f, last, last_f) then
      owed = owed + 1
    end
    back = min(units, owed)
    local back_t, back_t_f = times(t, back)
    last, last_f = sub(t, last, last_f, back_t, back_t_f)
    units = units - back
  end
  local b = min(units, taken)
  taken = taken - b
  back = back + b
  if taken == 0 then
    return {taken = 0, last = 0, last_frac = 0}, back
  end
  return {taken = taken, last = last, last_frac = last_f}, back
end

-- gcra_refund is GCRA.Refund. Instants are pairs of values (see rate.lua).
local function gcra_refund(p, s, now, _, units)
  if p.limit <= 0 or units <= 0 then
    return s, 0
  end
  local t = rate_of(p)
  local tat, tat_f = norm(t, s.tat, s.tat_frac)
  if not less(now, 0, tat, tat_f) then
    return {tat = 0, tat_frac = 0}, 0
  end
  -- The whole tokens missing: those not yet earned back, ceil((tat-now)/T).
  local ahead, ahead_f = sub(t, tat, tat_f, now, 0)
  local owed = count(t, ahead, ahead_f, p.burst)
  local owed_t, owed_t_f = times(t, owed)
  local at, at_f = add(t, now, 0, owed_t, owed_t_f)
  if less(at, at_f, tat, tat_f) then
    owed = owed + 1
  end
  owed = min(owed, p.burst)
  local back = min(units, owed)
  local back_t, back_t_f = times(t, back)
  tat, tat_f = sub(t, tat, tat_f, back_t, back_t_f)
  if not less(now, 0, tat, tat_f) then
    return {tat = 0, tat_frac = 0}, back
  end
  return {tat = tat, tat_frac = tat_f}, back
end

-- string_reserver is an algorithm whose state is a string (state.lua) as
-- the generic functions of algorithm/reserve.go see it (an
-- algorithm.Reserver): load reads the state of a key (given the params and
-- time of the steps to come, which a fixed window's counter needs to find
-- its window); step and refund are
-- its Step and Refund on a state, which they do not change; peek decides
-- a cost at now without storing anything; save stores a state that was
-- old, with its TTL.
local function string_reserver(fields, step, refund, expires)
  return {
    load = function(key)
      return load_state(key, fields)
    end,
    step = function(p, s, now, cost)
      return step(p, s, now, cost)
    end,
    refund = refund,
    peek = function(key, p, now, cost)
      local _, d = step(p, load_state(key, fields), now, cost)
      return d
    end,
    save = function(key, p, old, s, now)
      save_state(key, fields, old, s, expires(p, s), now, 0)
    end,
  }
end

-- RESERVERS are the algorithms with reservations, by name: every one but
-- concurrency. The sliding log's state is its sorted set, which its steps
-- change as they go: its state is {key = key}, and save does nothing.
local RESERVERS = {
  -- A fixed window: its string (first hit) or its window's counter,
  -- through fixed_window_load and fixed_window_save.
  fixed_window = {
    load = fixed_window_load,
    step = function(p, s, now, cost)
      return fixed_window_step(p, s, now, cost)
    end,
    refund = fixed_window_refund,
    peek = function(key, p, now, cost)
      local _, d = fixed_window_step(p, fixed_window_load(key, p, now), now, cost)
      return d
    end,
    save = function(key, p, old, s, now)
      fixed_window_save(key, p, old, s, now, 0)
    end,
  },
  -- A sliding window: its counters, through sliding_window_load and
  -- sliding_window_save.
  sliding_window = {
    load = sliding_window_load,
    step = function(p, s, now, cost)
      return sliding_window_step(p, s, now, cost)
    end,
    refund = sliding_window_refund,
    peek = function(key, p, now, cost)
      local _, d = sliding_window_step(p, sliding_window_load(key, p, now), now, cost)
      return d
    end,
    save = sliding_window_save,
  },
  token_bucket = string_reserver(TOKEN_BUCKET_FIELDS, token_bucket_step, token_bucket_refund, token_bucket_expires),
  gcra = string_reserver(GCRA_FIELDS, gcra_step, gcra_refund, gcra_expires),
  sliding_window_log = {
    load = function(key)
      return {key = key}
    end,
    step = function(p, s, now, cost, id)
      return s, sliding_window_log_step(s.key, p, now, cost, id)
    end,
    refund = function(p, s, now, at, units)
      return s, sliding_window_log_refund(s.key, p, now, at, units)
    end,
    -- A peek of the log steps its sorted set and puts it back, as a
    -- batch's peek does.
    peek = function(key, p, now, cost, id)
      local sn = snapshot(key)
      local d = sliding_window_log_step(key, p, now, cost, id)
      restore(key, sn)
      return d
    end,
    save = function() end,
  },
}

-- reserver returns the algorithm of RESERVERS named name, or fails.
local function reserver(name)
  local a = RESERVERS[name]
  if not a then
    fail('algorithm', tostring(name) .. ' has no reservations (concurrency limits hold units with leases)')
  end
  return a
end

-- REFUND_WIDTH is the ARGV strings of one request of the refund script.
local REFUND_WIDTH = 2 + ARGS_PER_REQUEST

-- refund_main is the refund script: see the header. Every request and key
-- is checked before the first write.
local function refund_main(keys, argv)
  local n = #keys
  if n == 0 or #argv ~= n * REFUND_WIDTH then
    fail('args', 'want ' .. REFUND_WIDTH .. ' arguments per key')
  end
  local reqs, ats = {}, {}
  local server = nil
  for i = 1, n do
    local base = (i - 1) * REFUND_WIDTH
    local name = argv[base + 1]
    local a = reserver(name)
    local p, r = parse_request(name, argv, base + 1)
    local at = argv[base + REFUND_WIDTH]
    if type(at) ~= 'string' or #at > 17 or not match(at, '^%d+$') or at + 0 > MAX_NOW then
      fail('at_us', 'not an integer in [0, ' .. str(MAX_NOW) .. ']: ' .. tostring(at))
    end
    if r.now < 0 then
      server = server or server_now()
      r.now = server
    end
    ALGORITHMS[name].check(keys[i], p, r.now)
    reqs[i] = {a = a, key = keys[i], p = p, r = r}
    ats[i] = at + 0
  end
  local out = {}
  for i = 1, n do
    local q = reqs[i]
    local old = q.a.load(q.key, q.p, q.r.now)
    local s, back = q.a.refund(q.p, old, q.r.now, ats[i], q.r.cost)
    q.a.save(q.key, q.p, old, s, q.r.now)
    out[#out + 1] = back
    reply(out, q.a.peek(q.key, q.p, q.r.now, 0, ''), q.r.now)
  end
  return out
end

-- main
return refund_main(KEYS, ARGV)
