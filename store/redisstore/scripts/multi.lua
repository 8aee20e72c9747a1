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
-- ARGV     per request, (1 + ARGS_PER_REQUEST) strings: the algorithm name,
--          then the request as parse_request in common.lua reads it.
-- Reply    per request, {allowed 0/1, limit, remaining, reset_after_us,
--          retry_after_us (-1 never), now_us}, one flat array; allowed is
--          MULTI_FAILED (2) and the rest 0 for a request that failed. A
--          request fails before its first write, as in its own script (its
--          arguments and its key's type are checked first), so it changed
--          nothing: the store runs it again alone, to report its error.
--
-- Requests of the server's time (now_us -1) are all decided at one call of
-- TIME, made only if one of them needs it: the script runs atomically, so
-- that is the time of each of them.
-- A key of an O(1) algorithm is read once and written once per run (see
-- MULTI_STATE).

local MULTI_FAILED = 2

local MULTI_APPLY = {
  sliding_window_log = sliding_window_log_apply,
  concurrency = concurrency_apply,
}

-- MULTI_STATE lists the algorithms whose state is a string (state.lua):
-- a run reads such a key once, steps it for each of its requests in turn,
-- and writes it once at the end, so that a hot key costs one GET and one
-- SET per run instead of per request. The decisions are those of the same
-- requests applied one after the other; only the writes in between, which
-- nothing in the run reads, are left out. keep_ttl says whether the
-- algorithm's expiry may stay put between writes (see save_state).
local MULTI_STATE = {
  fixed_window = {fields = FIXED_WINDOW_FIELDS, step = fixed_window_step, expires = fixed_window_expires, keep_ttl = true},
  sliding_window = {fields = SLIDING_WINDOW_FIELDS, step = sliding_window_step, expires = sliding_window_expires, keep_ttl = true},
  token_bucket = {fields = TOKEN_BUCKET_FIELDS, step = token_bucket_step, expires = token_bucket_expires},
  gcra = {fields = GCRA_FIELDS, step = gcra_step, expires = gcra_expires},
}

-- multi_one decides the request of key whose arguments start at
-- argv[base+1]; clock.now is the server's time, read (TIME) by the first
-- request that needs it, so that a run of requests that all carry their
-- own time never calls TIME (Options.ClientTime, for a Redis that forbids
-- it in scripts). A state algorithm's key is
-- read into states[key] on its first request (and appended to order), and
-- stepped there: st.old is what was read, st.s the state now, st.p and
-- st.now the params and time of the last step that changed it. It returns
-- the decision and the time it was made at.
local function multi_one(key, argv, base, clock, states, order)
  local name = argv[base + 1]
  local m, apply = MULTI_STATE[name], MULTI_APPLY[name]
  if not m and not apply then
    fail('algorithm', 'unknown algorithm ' .. tostring(name))
  end
  local p, r = parse_request(name, argv, base + 1)
  local now = r.now
  if now < 0 then
    clock.now = clock.now or server_now()
    now = clock.now
  end
  if apply then
    return apply(key, p, r, now), now
  end
  local st = states[key]
  if not st then
    local old = load_state(key, m.fields)
    st = {m = m, old = old, s = old}
    states[key] = st
    order[#order + 1] = key
  end
  local s, d = m.step(p, st.s, now, r.cost)
  for _, f in ipairs(m.fields) do
    if s[f] ~= st.s[f] then
      st.p, st.now, st.server = p, now, r.now < 0
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
  local old_exp = 0
  if m.keep_ttl and st.server then
    old_exp = m.expires(st.p, st.old)
  end
  save_state(key, m.fields, st.old, st.s, m.expires(st.p, st.s), st.now, old_exp)
end

-- main
local n = #KEYS
local width = 1 + ARGS_PER_REQUEST
if n == 0 or #ARGV ~= n * width then
  fail('args', 'want ' .. width .. ' arguments per key')
end
local clock = {}
local out, states, order = {}, {}, {}
local function failed(i)
  local k = (i - 1) * 6
  out[k + 1], out[k + 2], out[k + 3], out[k + 4], out[k + 5], out[k + 6] = MULTI_FAILED, 0, 0, 0, 0, 0
end
for i = 1, n do
  local ok, d, now = pcall(multi_one, KEYS[i], ARGV, (i - 1) * width, clock, states, order)
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
