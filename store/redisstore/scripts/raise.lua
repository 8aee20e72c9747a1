-- raise.lua raises a fixed window's count to at least the units a durable
-- record (a ledger) says were used: Store.Raise, for a reconcile's repair
-- and a durable quota's rebuild of a lost counter. Its function mirrors
-- algorithm.FixedWindow.Raise (algorithm/raise.go) line for line, with
-- the same names.
--
-- The Go side builds it from common.lua, state.lua, rate.lua, zset.lua,
-- every algorithm's functions, batch.lua's and refund.lua's functions
-- (refund.lua holds fixed_window_raise, which reserve.lua uses too) and
-- this file.
--
-- KEYS[1]  the state of a fixed window, as in fixed_window.lua.
-- ARGV     the request as parse_request in common.lua reads it
--          (ARGS_PER_REQUEST strings), whose cost is the units, then
--          window_us, the start of the window to raise.
-- Reply    {allowed 0/1, limit, remaining, reset_after_us, retry_after_us
--          (-1 never), now_us}: a peek at the state after.
-- Mirrors  algorithm.FixedWindow.Raise (algorithm/raise.go)

-- raise_main is the raise script: see the header. The key's type is
-- checked before the write.
local function raise_main(keys, argv)
  if #keys ~= 1 or #argv ~= ARGS_PER_REQUEST + 1 then
    fail('args', 'want 1 key and ' .. (ARGS_PER_REQUEST + 1) .. ' arguments')
  end
  local p, r = parse_request('fixed_window', argv, 0)
  local w = argv[ARGS_PER_REQUEST + 1]
  if type(w) ~= 'string' or #w > 17 or not match(w, '^%d+$') or w + 0 > MAX_NOW then
    fail('window_us', 'not an integer in [0, ' .. str(MAX_NOW) .. ']: ' .. tostring(w))
  end
  local now = r.now
  if now < 0 then
    now = server_now()
  end
  check_windows(p, now)
  ALGORITHMS.fixed_window.check(keys[1], p, now)
  local a = reserver('fixed_window')
  local old = a.load(keys[1], p, now)
  local s = fixed_window_raise(p, old, now, w + 0, r.cost)
  a.save(keys[1], p, old, s, now)
  local out = {}
  reply(out, a.peek(keys[1], p, now, 0, ''), now)
  return out
end

-- main
return raise_main(KEYS, ARGV)
