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
-- TIME: the script runs atomically, so that is the time of each of them.

local MULTI_FAILED = 2

local MULTI_APPLY = {
  fixed_window = fixed_window_apply,
  sliding_window_log = sliding_window_log_apply,
  sliding_window = sliding_window_apply,
  token_bucket = token_bucket_apply,
  gcra = gcra_apply,
  concurrency = concurrency_apply,
}

-- multi_one decides the request of key whose arguments start at
-- argv[base+1]; server is the server's time. It returns the decision and
-- the time it was made at.
local function multi_one(key, argv, base, server)
  local name = argv[base + 1]
  local apply = MULTI_APPLY[name]
  if not apply then
    fail('algorithm', 'unknown algorithm ' .. tostring(name))
  end
  local p, r = parse_request(name, argv, base + 1)
  local now = r.now
  if now < 0 then
    now = server
  end
  return apply(key, p, r, now), now
end

-- main
local n = #KEYS
local width = 1 + ARGS_PER_REQUEST
if n == 0 or #ARGV ~= n * width then
  fail('args', 'want ' .. width .. ' arguments per key')
end
local server = server_now()
local out = {}
for i = 1, n do
  local ok, d, now = pcall(multi_one, KEYS[i], ARGV, (i - 1) * width, server)
  if ok then
    reply(out, d, now)
  else
    local k = #out
    out[k + 1], out[k + 2], out[k + 3], out[k + 4], out[k + 5], out[k + 6] = MULTI_FAILED, 0, 0, 0, 0, 0
  end
end
return out
