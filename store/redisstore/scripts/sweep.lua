-- sweep.lua keeps the index of the holds that the sweep must expire: the
-- holds of reservations made with release, whose units go back at expiry
-- even if nobody settles them (Store.SweepHolds, and memstore's
-- sweepHolds, which it stands for). A hold without release needs no
-- sweep: its expiry changes no budget, and the first step that finds it
-- expires it (hold_expire).
--
-- The Go side builds this script from common.lua and this file.
--
-- KEYS[1]  the index: a sorted set "<prefix>:v1:holds:{<shard>}" of hold
--          keys, each scored by when it is due on the sweep's clock (µs),
--          with a TTL that outlasts every member's hold.
-- ARGV     op, clock_us (the sweep clock's now, -1 for the server's TIME),
--          then by op:
--          add ttl_us keep_us member...: each member not in the index
--            yet is due at now + ttl_us (one there already, from an
--            earlier try of the same reserve, keeps its earlier time: the
--            sweep then finds it not due, and makes it due later); the
--            index lives at least ttl_us + keep_us more.
--          due max lease_us: claims the members due at now, at most max,
--            by making them due at now + lease_us, so that another sweep
--            skips them while this one expires them; the index lives at
--            least lease_us more.
--          later due_us member: member, if it is still there, is due at
--            due_us (it was not due yet on its hold's node).
--          done member...: the members are removed.
-- Reply    add: {due_us}; due: {n, then per member its length in bytes
--          and each byte, one integer each} (a script's reply is
--          integers, see Conn); later, done: {the members changed}.
-- Mirrors  memstore's sweepHolds (store/memstore/reserve.go), which visits
--          every hold; the index visits only those due

-- index_keep makes the index at key live at least ms more.
local function index_keep(key, ms)
  local pttl = call('PTTL', key)
  if pttl >= -1 and pttl < ms then
    call('PEXPIRE', key, ms)
  end
end

-- index_int reads the integer argument s of field, at least lo.
local function index_int(field, s, lo)
  if type(s) ~= 'string' or not match(s, '^%-?%d+$') or #s > 17 or s + 0 < lo or s + 0 > MAX_EXACT then
    fail(field, 'not an integer in [' .. str(lo) .. ', 2^52]: ' .. tostring(s))
  end
  return s + 0
end

-- sweep_main is the index script: see the header.
local function sweep_main(keys, argv)
  local op = argv[1]
  if #keys ~= 1 then
    fail('args', 'want the index key')
  end
  local key = keys[1]
  local now = index_int('clock_us', argv[2], -1)
  if now < 0 then
    now = server_now()
  end
  if op == 'add' and #argv >= 5 then
    local due = now + index_int('ttl_us', argv[3], 1)
    local keep = index_int('keep_us', argv[4], 0)
    for i = 5, #argv do
      call('ZADD', key, 'NX', due, argv[i])
    end
    index_keep(key, ttl_ms(due + keep, now))
    return {due}
  elseif op == 'due' and #argv == 4 then
    local n = index_int('max', argv[3], 1)
    local lease = index_int('lease_us', argv[4], 1)
    local members = call('ZRANGEBYSCORE', key, '-inf', str(now), 'LIMIT', 0, n)
    local out = {#members}
    for _, m in ipairs(members) do
      call('ZADD', key, 'XX', now + lease, m)
      out[#out + 1] = #m
      for j = 1, #m do
        out[#out + 1] = string.byte(m, j)
      end
    end
    if #members > 0 then
      index_keep(key, ttl_ms(now + lease, now))
    end
    return out
  elseif op == 'later' and #argv == 4 then
    local due = index_int('due_us', argv[3], 0)
    local changed = call('ZADD', key, 'XX', 'CH', due, argv[4])
    if changed > 0 then
      index_keep(key, ttl_ms(due, now))
    end
    return {changed}
  elseif op == 'done' and #argv >= 3 then
    local removed = 0
    for i = 3, #argv do
      removed = removed + call('ZREM', key, argv[i])
    end
    return {removed}
  end
  fail('op', 'not add, due, later or done with their arguments: ' .. tostring(op))
end

-- main
return sweep_main(KEYS, ARGV)
