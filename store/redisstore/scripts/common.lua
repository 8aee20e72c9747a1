-- common.lua: the helpers every Floodgate script starts with. The Go side
-- (scripts.go) builds each algorithm's script from this file, state.lua
-- (for the O(1) algorithms, whose state is a string), rate.lua (for
-- token_bucket and gcra), zset.lua (for sliding_window_log and
-- concurrency) and the algorithm's file; batch.lua gets every file, so the
-- code of each algorithm exists once.
--
-- Speed: Redis runs a script's whole body on every call, so every helper
-- is a closure made again per call, and the CPU a script costs bounds what
-- one Redis can decide per second. A script therefore holds only the
-- helpers its algorithm uses, and the hot path does few library calls:
-- one pattern match checks all six numeric arguments, a state is parsed
-- with one match and written with one format, numbers go to redis.call as
-- numbers. BenchmarkScriptCost measures each script.
--
-- Mirrors algorithm/params.go (floorDiv, the bounds) and checks the
-- arguments the way floodgate.Limit.Validate and floodgate.Request.Validate
-- do.
--
-- Numbers: Lua numbers are doubles, exact for integers up to 2^53. Every
-- value here stays below MAX_EXACT = 2^52 (Limit.Validate guarantees it), so
-- + - * on integers are exact. Division is not: floor_div corrects the
-- floating quotient by one step, and mod is built on it, because Lua's own
-- a % b is a - floor(a/b)*b with an inexact floor(a/b).
--
-- Request arguments: every script reads requests in the same layout of
-- ARGS_PER_REQUEST strings (parse_request):
--
--   now_us   the time of the decision in µs since the epoch, or -1 for the
--            server clock (call('TIME'))
--   limit    Params.Limit
--   period   Params.Period, µs
--   cost     the request's cost
--   burst    Params.Burst (token_bucket, gcra; else 0)
--   flags    1 = Params.FirstHit, 2 = Params.CountRejected, 4 = release,
--            8 = calendar (Params.Calendar; fixed_window only)
--   id       sliding_window_log: a random id unique to this call, the
--            prefix of its log members; concurrency: the lease ID; a
--            calendar fixed_window: its windows (algorithm.Windows), the
--            four bounds "<w0>:<w1>:<w2>:<w3>" in µs, which the Go side
--            computes from the time zone tables around its own clock
--            (parse_windows); token_bucket: "", or for a reservation
--            that waits the units the bucket may owe (Params.Wait, 1 to
--            MAX_LIMIT - burst, p.wait); else ""
--
-- Every argument is checked before the first write (Redis does not roll
-- back a script that fails halfway); a bad one is the error reply
-- "ERR floodgate: <field> ...".

-- The library functions the scripts use, as locals: a global lookup costs
-- more than the operation in Redis's Lua.
local floor, max, min = math.floor, math.max, math.min
local call = redis.call
local format, match, concat = string.format, string.match, table.concat
local error, ipairs, tonumber, type, unpack = error, ipairs, tonumber, type, unpack

local MAX_EXACT = 4503599627370496 -- 2^52, algorithm.MaxExact
local MAX_PERIOD = 281474976710656 -- 2^48, algorithm.MaxPeriod
local MAX_LIMIT = 1099511627776 -- 2^40, algorithm.MaxLimit
local MAX_LOG_LIMIT = 100000 -- algorithm.MaxLogLimit
local MAX_NOW = MAX_EXACT - MAX_PERIOD -- floodgate's maxNowMicros
local MAX_ID_LEN = 64 -- floodgate.MaxLeaseLen
local NEVER = -1 -- algorithm.Never
local ARGS_PER_REQUEST = 7

local function fail(field, msg)
  error({err = 'ERR floodgate: ' .. field .. ': ' .. msg})
end

-- WINDOWS matches the id argument of a calendar fixed window: four
-- bounds of algorithm.Windows.
local WINDOWS = '^(%d+):(%d+):(%d+):(%d+)$'

-- parse_windows reads the windows of a calendar request (see the header),
-- checking that they are four increasing times.
local function parse_windows(id)
  local a, b, c, d = nil, nil, nil, nil
  if type(id) == 'string' and #id <= 71 then
    a, b, c, d = match(id, WINDOWS)
  end
  if not a or #a > 16 or #b > 16 or #c > 16 or #d > 16 then
    fail('windows', 'not four bounds "w0:w1:w2:w3" in us: ' .. string.sub(tostring(id), 1, 80))
  end
  local w = {a + 0, b + 0, c + 0, d + 0}
  if not (w[1] < w[2] and w[2] < w[3] and w[3] < w[4] and w[4] <= MAX_EXACT) then
    fail('windows', 'the bounds ' .. id .. ' are not increasing, below 2^52')
  end
  return w
end

-- calendar_window is Windows.Window: the window of p.windows that
-- contains now, which check_windows made sure of before the first write.
local function calendar_window(p, now)
  local w = p.windows
  if now < w[2] then
    return w[1], w[2]
  elseif now < w[3] then
    return w[2], w[3]
  end
  return w[3], w[4]
end

-- check_windows fails unless a calendar request's windows hold now: the
-- Go side computed them around its clock, and now may be the server's
-- (TIME), which must be within a window of it.
local function check_windows(p, now)
  if p.calendar and (now < p.windows[1] or now >= p.windows[4]) then
    fail('now_us', format('%d is outside the calendar windows passed, %d to %d', now, p.windows[1], p.windows[4])
      .. ': the clocks of Redis and of the application are more than a window apart')
  end
end

-- str formats an integer for redis.call without an exponent. (redis.call
-- also turns a number argument into its digits, exactly for integers below
-- 2^53: both work.)
local function str(n)
  return format('%d', n)
end

-- floor_div is floorDiv: a/b rounded down, for 0 <= a <= MAX_EXACT and
-- 0 < b <= MAX_EXACT.
local function floor_div(a, b)
  local q = floor(a / b)
  if q * b > a then
    q = q - 1
  elseif (q + 1) * b <= a then
    q = q + 1
  end
  return q
end

-- mod is Go's a % b for a >= 0, b > 0.
local function mod(a, b)
  return a - floor_div(a, b) * b
end

-- decision is algorithm.Decision.
local function decision(allowed, limit, remaining)
  return {allowed = allowed, limit = limit, remaining = remaining, reset_after = 0, retry_after = 0}
end

-- NUMBERS matches the six numeric arguments of a request joined by ':',
-- each '^%-?%d+$' (a field holding ':' would make a seventh).
local NUMBERS = '^%-?%d+:%-?%d+:%-?%d+:%-?%d+:%-?%d+:%-?%d+$'

-- check_id fails unless id is a request's id argument: empty, or 1 to
-- MAX_ID_LEN bytes of [A-Za-z0-9_-].
local function check_id(id)
  if id ~= '' and (type(id) ~= 'string' or #id > MAX_ID_LEN or not match(id, '^[%w_%-]+$')) then
    fail('id', 'not 0 to 64 bytes of [A-Za-z0-9_-]')
  end
end

-- check_params checks what a request's parameters (limit, period, burst,
-- flags, each already in its numeric range) allow together under alg, and
-- returns the params p (limit, period, burst, first_hit, count_rejected)
-- and whether the flags ask for a release: what parse_request checks that
-- depends on neither the request's cost nor its id, which multi.lua checks
-- once per set of requests that share them.
local function check_params(alg, limit, period, burst, flags)
  local first_hit = flags % 2 == 1
  local count_rejected = flags % 4 >= 2
  local release = flags % 8 >= 4
  local calendar = flags >= 8
  if first_hit and alg ~= 'fixed_window' then
    fail('flags', alg .. ' takes no first_hit window')
  end
  if calendar and (alg ~= 'fixed_window' or first_hit) then
    fail('flags', 'only an aligned fixed_window takes calendar windows')
  end
  if count_rejected and alg ~= 'fixed_window' and alg ~= 'sliding_window' then
    fail('flags', alg .. ' does not count rejected requests')
  end
  if release and alg ~= 'concurrency' then
    fail('flags', alg .. ' takes no release')
  end
  if alg == 'token_bucket' or alg == 'gcra' then
    if limit > 0 then
      -- floodgate's bucketFits: burst*limit <= MAX_EXACT, and refilling
      -- the whole bucket, burst*period/limit rounded up, takes at most
      -- MAX_PERIOD.
      if burst > floor_div(MAX_EXACT, limit) then
        fail('burst', 'burst times limit is above 2^52')
      end
      local q = floor_div(period, limit)
      local r = period - q * limit
      if (q > 0 and burst > floor_div(MAX_PERIOD, q)) or burst * q + floor_div(burst * r + limit - 1, limit) > MAX_PERIOD then
        fail('burst', 'burst takes longer than 2^48 us to refill')
      end
    end
  elseif burst ~= 0 then
    fail('burst', alg .. ' takes no burst')
  end
  if (alg == 'sliding_window_log' or alg == 'concurrency') and limit > MAX_LOG_LIMIT then
    fail('limit', str(limit) .. ' is above ' .. str(MAX_LOG_LIMIT) .. ' for ' .. alg)
  end
  if alg == 'sliding_window' then
    if limit + 1 > floor_div(MAX_EXACT, period) then
      fail('limit', '(limit+1) * period is above 2^52 for sliding_window')
    end
    if period > MAX_PERIOD / 2 then
      fail('period', 'above 2^47 us for sliding_window, which keeps a key for two periods')
    end
  end
  return {limit = limit, period = period, burst = burst, first_hit = first_hit, count_rejected = count_rejected, calendar = calendar}, release
end

-- check_use checks a request's cost and id (check_id) against its
-- algorithm: the log algorithms need an id to add entries, the others take
-- none.
local function check_use(alg, cost, id, release)
  if alg == 'sliding_window_log' then
    if cost > 0 and id == '' then
      fail('id', 'sliding_window_log needs a request id')
    end
  elseif alg == 'concurrency' then
    if id == '' and (cost > 0 or release) then
      fail('id', 'concurrency needs a lease ID to acquire or release')
    end
  elseif id ~= '' then
    fail('id', alg .. ' takes no id')
  end
end

-- arg_int reads the decimal integer argument s of field in [lo, hi], or
-- fails naming the field.
local function arg_int(field, s, lo, hi)
  if type(s) ~= 'string' or not match(s, '^%-?%d+$') or #s > 17 then
    fail(field, 'not an integer: ' .. tostring(s))
  end
  local n = tonumber(s)
  if n < lo or n > hi then
    fail(field, s .. ' is outside [' .. str(lo) .. ', ' .. str(hi) .. ']')
  end
  return n
end

-- parse_numbers reads and checks the six numbers of a request starting at
-- argv[base+1] (now_us, limit, period, cost, burst, flags; see the
-- header), each in its range.
--
-- The fast path checks the six numbers with one match of their
-- concatenation and reads them by arithmetic coercion, which the match
-- makes safe; anything it does not accept goes through arg_int, field by
-- field, which accepts exactly the same and fails naming the field.
local function parse_numbers(argv, base)
  local a1, a2, a3, a4, a5, a6 = argv[base + 1], argv[base + 2], argv[base + 3], argv[base + 4], argv[base + 5], argv[base + 6]
  local now, limit, period, cost, burst, flags
  if #a1 <= 17 and #a2 <= 17 and #a3 <= 17 and #a4 <= 17 and #a5 <= 17 and #a6 <= 17
    and match(concat(argv, ':', base + 1, base + 6), NUMBERS) then
    now, limit, period, cost, burst, flags = a1 + 0, a2 + 0, a3 + 0, a4 + 0, a5 + 0, a6 + 0
  end
  if not (now and now >= -1 and now <= MAX_NOW and limit >= 0 and limit <= MAX_LIMIT
    and period >= 1 and period <= MAX_PERIOD and cost >= 0 and cost <= MAX_LIMIT
    and burst >= 0 and burst <= MAX_LIMIT and flags >= 0 and flags <= 15) then
    now = arg_int('now_us', a1, -1, MAX_NOW)
    limit = arg_int('limit', a2, 0, MAX_LIMIT)
    period = arg_int('period', a3, 1, MAX_PERIOD)
    cost = arg_int('cost', a4, 0, MAX_LIMIT)
    burst = arg_int('burst', a5, 0, MAX_LIMIT)
    flags = arg_int('flags', a6, 0, 15)
  end
  return now, limit, period, cost, burst, flags
end

-- parse_request reads and checks the ARGS_PER_REQUEST arguments of one
-- request of algorithm alg starting at argv[base+1] (see the header). It
-- returns the params p (limit, period, burst, first_hit, count_rejected)
-- and the request r (now, cost, id, release); r.now is -1 for the server
-- clock.
local function parse_request(alg, argv, base)
  local now, limit, period, cost, burst, flags = parse_numbers(argv, base)
  local id = argv[base + 7]
  local windows = nil
  if flags >= 8 then
    windows = parse_windows(id)
    id = ''
  end
  local wait = nil
  if alg == 'token_bucket' and id ~= '' then
    -- A reservation that waits: the units the bucket may owe (Params.Wait),
    -- checked as if they raised the burst.
    wait = arg_int('wait', id, 1, MAX_LIMIT - burst)
    check_params(alg, limit, period, burst + wait, flags)
    id = ''
  end
  check_id(id)
  local p, release = check_params(alg, limit, period, burst, flags)
  p.windows, p.wait = windows, wait
  check_use(alg, cost, id, release)
  return p, {now = now, cost = cost, id = id, release = release}
end

-- server_now is the Redis server's clock in µs. Redis 7 replicates a
-- script's effects, not the script, so TIME before a write is allowed.
-- TIME's two strings are decimal integers: arithmetic reads them.
local function server_now()
  local t = call('TIME')
  return t[1] * 1000000 + t[2]
end

-- MIN_TTL_MS is the shortest TTL a script gives a key. A key lives for its
-- state's Expires - now (the decision's ResetAfter), as in memstore, but at
-- least a second, because Redis 7.0 can expire a key in the middle of a
-- script: on 7.0.15, a key written with PEXPIRE 1 was gone when the same
-- script read it back less than a millisecond later, 13 times in 48,000
-- runs, and a batch reads back what it wrote. Keeping a state past its
-- expiry changes no decision: every Step reads a state older than its
-- period as the empty state.
local MIN_TTL_MS = 1000

-- ttl_ms is the PEXPIRE of a state that expires at exp, at now: the time
-- left rounded up to a millisecond, so that a key never disappears before
-- its state is back to the zero state, and at least MIN_TTL_MS. It is a
-- number, which redis.call sends as its digits.
local function ttl_ms(exp, now)
  return max(floor_div(max(exp - now, 0) + 999, 1000), MIN_TTL_MS)
end

-- reply appends the reply of one decision made at now to out: allowed
-- (0/1), limit, remaining, reset_after_us, retry_after_us (-1 never),
-- now_us.
local function reply(out, d, now)
  local allowed = 0
  if d.allowed then
    allowed = 1
  end
  local n = #out
  out[n + 1] = allowed
  out[n + 2] = d.limit
  out[n + 3] = d.remaining
  out[n + 4] = d.reset_after
  out[n + 5] = d.retry_after
  out[n + 6] = now
  return out
end

-- single is the main part of a one-request script: keys[1] is the key,
-- argv the request (parse_request); apply(key, p, r, now) decides it and
-- returns its decision. keys and argv are the script's KEYS and ARGV (a
-- function's arguments in the library form, which has no such globals).
local function single(alg, apply, keys, argv)
  if #keys ~= 1 or #argv ~= ARGS_PER_REQUEST then
    fail('args', 'want 1 key and ' .. ARGS_PER_REQUEST .. ' arguments')
  end
  local p, r = parse_request(alg, argv, 0)
  local now = r.now
  if now < 0 then
    now = server_now()
  end
  check_windows(p, now)
  local d = apply(keys[1], p, r, now)
  local allowed = 0
  if d.allowed then
    allowed = 1
  end
  return {allowed, d.limit, d.remaining, d.reset_after, d.retry_after, now}
end
