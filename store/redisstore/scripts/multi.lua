-- multi.lua decides several independent requests in one script run, each
-- exactly as its own algorithm's script would, one after the other: the
-- store's coalescing (coalesce.go) sends concurrent Apply calls this way,
-- so that Redis runs one script, not one per call. Unlike batch.lua, the
-- requests may be of different keys and subjects, and a denial of one
-- takes nothing back from the others.
--
-- The Go side builds this script from common.lua, state.lua, rate.lua,
-- zset.lua, the step functions of every algorithm file (without their main
-- parts) and this file.
--
-- KEYS[i]  the state of request i, as in its algorithm's script. On a
--          Redis Cluster the store sends only keys of one hash tag
--          together, so they are in one slot.
-- ARGV     the parameter sets, then the requests:
--            n_sets    the number of sets, 1 to #KEYS
--            per set   MULTI_SET_WIDTH strings: the algorithm name, then
--                      now_us, limit, period, burst and flags as
--                      parse_request in common.lua reads them
--            per key   MULTI_REQ_WIDTH strings: the index of its set (1 to
--                      n_sets, in decimal), its cost and its id (as
--                      parse_request reads them)
--          The requests of one run mostly share their limit and their time
--          (the server's), so each set is read and checked once per run,
--          not once per request: what a request alone carries, its cost and
--          id, is most of what a request costs Redis to read.
-- Reply    per request, {allowed 0/1, limit, remaining, reset_after_us,
--          retry_after_us (-1 never), now_us}, one flat array; allowed is
--          MULTI_FAILED (2) and the rest 0 for a request that failed. A
--          request fails before its first write, as in its own script (its
--          arguments, its set's and its key's type are checked first), so
--          it changed nothing: the store runs it again alone, to report its
--          error.
--
-- Requests of the server's time (now_us -1) are all decided at one call of
-- TIME, made only if one of them needs it: the script runs atomically, so
-- that is the time of each of them.
-- A key of an O(1) algorithm is read once and written once per run (see
-- MULTI_STATE; a sliding window's counters too), but for an aligned fixed window's counter, which each
-- request moves with its own HINCRBY (fixed_window_count), and a first-hit
-- window, read and written per request (fixed_window_apply).

local MULTI_FAILED = 2

local MULTI_APPLY = {
  fixed_window = fixed_window_apply,
  sliding_window_log = sliding_window_log_apply,
  concurrency = concurrency_apply,
}

-- MULTI_STATE lists the algorithms whose state is a string (state.lua):
-- a run reads such a key once, steps it for each of its requests in turn,
-- and writes it once at the end, so that a hot key costs one GET and one
-- SET per run instead of per request. The decisions are those of the same
-- requests applied one after the other; only the writes in between, which
-- nothing in the run reads, are left out. keep_ttl says whether the
-- algorithm's expiry may stay put between writes (see save_state). load
-- and save, if set, read and store the state in place of load_state and
-- save_state (a sliding window's counters: sliding_window_load and
-- sliding_window_save, in one HINCRBY for a run that only counts in the
-- window it read), load at the params and time of the key's first request
-- of the run, save at those of the last that changed it.
local MULTI_STATE = {
  sliding_window = {fields = SLIDING_WINDOW_FIELDS, step = sliding_window_step, load = sliding_window_load, save = sliding_window_save},
  token_bucket = {fields = TOKEN_BUCKET_FIELDS, step = token_bucket_step, expires = token_bucket_expires},
  gcra = {fields = GCRA_FIELDS, step = gcra_step, expires = gcra_expires},
}

local MULTI_SET_WIDTH, MULTI_REQ_WIDTH = 6, 3

-- multi_set reads and checks the parameter set whose strings start at
-- argv[base+1] (see the header). It returns the set: the algorithm's name,
-- m (of MULTI_STATE) or apply (of MULTI_APPLY), the params p, the time now
-- (-1 for the server's) and release (flags 4).
local function multi_set(argv, base)
  local name = argv[base + 1]
  local m, apply = MULTI_STATE[name], MULTI_APPLY[name]
  if not m and not apply then
    fail('algorithm', 'unknown algorithm ' .. tostring(name))
  end
  -- parse_numbers reads a request's six numbers: the set's five, and cost 0.
  local now, limit, period, _, burst, flags = parse_numbers({argv[base + 2], argv[base + 3], argv[base + 4], '0', argv[base + 5], argv[base + 6]}, 0)
  local p, release = check_params(name, limit, period, burst, flags)
  if p.calendar then
    fail('flags', 'multi.lua takes no calendar window (the store decides those alone)')
  end
  -- counter: an aligned fixed window, decided on its window's counter
  -- (fixed_window_count); a first-hit window is decided by its apply, its
  -- state read and written per request.
  local counter = name == 'fixed_window' and not p.first_hit
  return {name = name, m = m, apply = apply, p = p, now = now, release = release, counter = counter,
    wnow = false, wstart = 0, wstop = 0, wfield = ''}
end



-- multi_one decides the request of key whose arguments start at
-- argv[base+1], of a set in sets (by its index string; false for a set
-- that failed its checks); clock.now is the server's time, read (TIME) by
-- the first request that needs it, so that a run of requests that all
-- carry their own time never calls TIME (Options.ClientTime, for a Redis
-- that forbids it in scripts). A state algorithm's key is read into
-- states[key] on its first request (and appended to order), and stepped
-- there: st.old is what was read, st.s the state now, st.p and st.now the
-- params and time of the last step that changed it. It returns the
-- decision and the time it was made at.
local function multi_one(key, argv, base, sets, clock, states, order)
  local set = sets[argv[base + 1]]
  if not set then
    fail('args', 'no parameter set ' .. tostring(argv[base + 1]))
  end
  local cost, id = argv[base + 2], argv[base + 3]
  if cost == '1' and id == '' and (set.m or set.counter) then
    cost = 1 -- the usual request, which the checks below always pass
  else
    cost = arg_int('cost', cost, 0, MAX_LIMIT)
    check_id(id)
    check_use(set.name, cost, id, set.release)
  end
  local now = set.now
  if now < 0 then
    clock.now = clock.now or server_now()
    now = clock.now
  end
  if set.counter then
    -- The window of the set's time, found once per run.
    if set.wnow ~= now then
      set.wnow = now
      set.wstart, set.wstop = fixed_window_bounds(set.p, now)
      set.wfield = format('%d', set.wstart)
    end
    return fixed_window_count(key, set.p, now, cost, set.wstart, set.wstop, set.wfield), now
  end
  if set.apply then
    return set.apply(key, set.p, {now = set.now, cost = cost, id = id, release = set.release}, now), now
  end
  local m = set.m
  local st = states[key]
  if not st then
    local old
    if m.load then
      old = m.load(key, set.p, now)
    else
      old = load_state(key, m.fields)
    end
    -- Every field up front: a table that grows past its size is rehashed.
    st = {m = m, old = old, s = old, p = false, now = 0, server = false}
    states[key] = st
    order[#order + 1] = key
  end
  local s, d = m.step(set.p, st.s, now, cost)
  local fields, prev = m.fields, st.s
  for i = 1, #fields do
    local f = fields[i]
    if s[f] ~= prev[f] then
      st.p, st.now, st.server = set.p, now, set.now < 0
      break
    end
  end
  st.s = s
  return d, now
end

-- multi_save writes the state of a key read by multi_one, as the last of
-- its requests that changed it would have: with that request's expiry,
-- and KEEPTTL only if that request was decided at the server's time (see
-- save_state).
local function multi_save(key, st)
  if not st.p then
    return -- no request changed it
  end
  local m = st.m
  if m.save then
    m.save(key, st.p, st.old, st.s, st.now)
    return
  end
  local old_exp = 0
  if m.keep_ttl and st.server then
    old_exp = m.expires(st.p, st.old)
  end
  save_state(key, m.fields, st.old, st.s, m.expires(st.p, st.s), st.now, old_exp)
end

-- main
local n = #KEYS
local n_sets = tonumber(ARGV[1])
if n == 0 or not n_sets or n_sets < 1 or n_sets > n or n_sets % 1 ~= 0
  or #ARGV ~= 1 + n_sets * MULTI_SET_WIDTH + n * MULTI_REQ_WIDTH then
  fail('args', 'want a number of sets, ' .. MULTI_SET_WIDTH .. ' arguments per set and ' .. MULTI_REQ_WIDTH .. ' per key')
end
-- A set that fails its checks fails each of its requests, as they would
-- alone (the store runs them alone to report the error).
local sets = {}
for j = 1, n_sets do
  local ok, set = pcall(multi_set, ARGV, 1 + (j - 1) * MULTI_SET_WIDTH)
  sets[str(j)] = ok and set or false
end
local clock = {}
local out, states, order = {}, {}, {}
local function failed(i)
  local k = (i - 1) * 6
  out[k + 1], out[k + 2], out[k + 3], out[k + 4], out[k + 5], out[k + 6] = MULTI_FAILED, 0, 0, 0, 0, 0
end
local base = 1 + n_sets * MULTI_SET_WIDTH
for i = 1, n do
  local ok, d, now = pcall(multi_one, KEYS[i], ARGV, base + (i - 1) * MULTI_REQ_WIDTH, sets, clock, states, order)
  if ok then
    reply(out, d, now)
  else
    failed(i)
  end
end
-- A write that fails (out of memory) wrote nothing: every request of its
-- key changed nothing, and fails. (A key names its algorithm, so only
-- requests read into states share it.)
for _, key in ipairs(order) do
  if not pcall(multi_save, key, states[key]) then
    for i = 1, n do
      if KEYS[i] == key then
        failed(i)
      end
    end
  end
end
return out
