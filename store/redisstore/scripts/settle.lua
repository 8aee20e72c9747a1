-- settle.lua settles the holds of a reservation (see reserve.lua for the
-- holds). Its main mode mirrors memstore.Store.Settle
-- (store/memstore/reserve.go): every hold is checked before any changes,
-- then each is settled by hold_settle, which mirrors algorithm.Settle
-- (algorithm/reserve.go), on its state and under the params it was
-- reserved under. Its other modes serve the store's protocols: giving
-- back what the slots of a reservation over several Redis Cluster slots
-- held when another slot denied it (deny) or conflicted (undo), and
-- expiring the holds whose time has come for the sweep (expire), as
-- memstore's sweepHolds does.
--
-- The Go side builds this script from common.lua, state.lua, rate.lua,
-- zset.lua, every algorithm's functions, batch.lua's, refund.lua's and
-- reserve.lua's functions and this file.
--
-- KEYS     per hold, two keys: the state, as in the algorithm's script,
--          then its hold, "<state key>:hold:<id>".
-- ARGV     mode, actual (0 to MAX_LIMIT), cancel (0/1), clock_us (the
--          sweep clock's now, -1 for the server's TIME), then, for every
--          mode but expire, per hold BATCH_WIDTH strings, as batch.lua reads
--          them: the request that names the hold, whose now_us is the time
--          of the step (its cost is not used, its id names the sliding
--          log's entries of an excess; the params are the hold's).
--          mode settle: commit actual, or with cancel cancel (actual 0).
--            Nothing changes unless every hold exists and none conflicts.
--          mode deny: each hold still HELD gives its units back (Refund)
--            and becomes DENIED, as if its reserve had been denied.
--          mode undo: each hold still HELD gives its units back, and a
--            hold HELD or DENIED is deleted: the reserve that made it
--            changed nothing.
--          mode expire: each hold HELD whose expiry has come at clock_us
--            (less the hold's skew) expires (Expire).
--          mode read: nothing changes; the checks of settle, then what
--            each hold holds (memstore.Store.ReadHolds).
-- Reply    settle, deny, undo: {status, state, actual, then per hold code,
--          refunded, charged, short, durable 0/1 (the hold's), allowed
--          0/1, limit, remaining,
--          reset_after_us, retry_after_us (-1 never), now_us}: status
--          SETTLE_DONE, SETTLE_UNKNOWN (no hold: the rest is absent),
--          SETTLE_OTHER_KEYS (some holds but not all: a conflict) or
--          SETTLE_CONFLICT (a hold settled otherwise, whose state and
--          actual follow); code a SettleCode (deny and undo: SETTLED for a
--          hold they changed, else REPLAYED); refunded, charged and short
--          the Settlement; then a peek at the state after the step.
--          read: {status, state, actual, then per hold code (the
--          SettleCode a settle would answer now), units, durable 0/1,
--          window_us (the hold's window; 0 unless durable)}, status as
--          for settle.
--          expire: per hold {outcome, refunded, due_us}: outcome
--          NOT_HELD (no hold, or settled: the sweep forgets it),
--          EXPIRED_NOW (expired now, refunded units given back) or NOT_DUE
--          (due_us is its expiry on the sweep's clock).
-- Mirrors  memstore.Store.Settle, ReadHolds, settleCode and sweepHolds
--          (store/memstore/reserve.go); algorithm.Settle and Expire
--          through reserve.lua's hold_settle and hold_expire

-- The status of a settle (its reply's first integer).
local SETTLE_DONE, SETTLE_UNKNOWN, SETTLE_OTHER_KEYS, SETTLE_CONFLICT = 0, 1, 2, 3

-- The outcomes of the expire mode.
local NOT_HELD, EXPIRED_NOW, NOT_DUE = 0, 1, 2

-- settle_code is memstore's settleCode: the code hold_settle will answer
-- for h at now, without settling it.
local function settle_code(h, now, actual, cancel)
  local target = COMMITTED
  if cancel then
    target = CANCELLED
  end
  if (h.state == HELD and now >= h.expires) or h.state == EXPIRED then
    return TOO_LATE
  elseif h.state == HELD then
    return SETTLED
  elseif h.state == target and h.actual == actual then
    return REPLAYED
  end
  return CONFLICT
end

-- expire_holds is the expire mode: see the header. Every hold and state
-- key is read and checked before the first write.
local function expire_holds(states, holds, clock)
  local found = {}
  for i = 1, #holds do
    found[i] = load_hold(holds[i])
    if found[i] then
      ALGORITHMS[found[i].alg].check(states[i], found[i].p, clock >= 0 and clock - found[i].skew or nil)
    end
  end
  local out = {}
  for i = 1, #holds do
    local h = found[i]
    local outcome, refunded, due = NOT_HELD, 0, 0
    if h and h.state == HELD then
      if clock < 0 then
        clock = server_now()
      end
      local now = clock - h.skew
      if now < h.expires then
        outcome, due = NOT_DUE, h.expires + h.skew
      else
        local a = RESERVERS[h.alg]
        local old = a.load(states[i], h.p, now)
        local s
        s, h = hold_expire(a, old, h, h.p, now)
        a.save(states[i], h.p, old, s, now)
        save_hold(holds[i], h)
        outcome, refunded = EXPIRED_NOW, h.refunded
      end
    end
    out[#out + 1] = outcome
    out[#out + 1] = refunded
    out[#out + 1] = due
  end
  return out
end

local SETTLE_MODES = {settle = true, deny = true, undo = true, expire = true, read = true}

-- settle_main is the settle script: see the header.
local function settle_main(keys, argv)
  local mode = argv[1]
  if not SETTLE_MODES[mode] then
    fail('mode', 'not settle, deny, undo, expire or read: ' .. tostring(mode))
  end
  local states, holds = hold_pairs(keys)
  local n = #holds
  local actual = arg_int('actual', argv[2], 0, MAX_LIMIT)
  local cancel = arg_int('cancel', argv[3], 0, 1) == 1
  local clock = arg_int('clock_us', argv[4], -1, MAX_NOW)
  if cancel and actual ~= 0 then
    fail('actual', 'a cancel uses nothing, not ' .. str(actual))
  end
  if mode == 'expire' then
    if #argv ~= 4 then
      fail('args', 'want 4 arguments to expire')
    end
    return expire_holds(states, holds, clock)
  end
  if #argv ~= 4 + n * BATCH_WIDTH then
    fail('args', 'want ' .. BATCH_WIDTH .. ' arguments per hold, after 4')
  end
  local reqs = batch_requests(states, argv, 4)
  local found, held = {}, 0
  for i, q in ipairs(reqs) do
    reserver(q.name)
    found[i] = load_hold(holds[i])
    if found[i] then
      held = held + 1
      if found[i].alg ~= q.name then
        fail('state', 'the hold ' .. holds[i] .. ' is of ' .. found[i].alg)
      end
      -- A calendar hold steps in the windows around the settle's time,
      -- which its request carries.
      if found[i].p.calendar then
        if not q.p.windows then
          fail('flags', 'the hold ' .. holds[i] .. ' is of a calendar window: its settle needs the windows')
        end
        found[i].p.windows = q.p.windows
      end
    end
  end
  if mode == 'settle' or mode == 'read' then
    if held == 0 then
      return {SETTLE_UNKNOWN, 0, 0}
    elseif held < n then
      return {SETTLE_OTHER_KEYS, 0, 0}
    end
    for i, h in ipairs(found) do
      if settle_code(h, reqs[i].r.now, actual, cancel) == CONFLICT then
        return {SETTLE_CONFLICT, h.state, h.actual}
      end
    end
  end
  if mode == 'read' then
    local out = {SETTLE_DONE, 0, 0}
    for i, h in ipairs(found) do
      out[#out + 1] = settle_code(h, reqs[i].r.now, actual, cancel)
      out[#out + 1] = h.units
      out[#out + 1] = h.durable and 1 or 0
      out[#out + 1] = h.durable and h.window or 0
    end
    return out
  end
  local out = {SETTLE_DONE, 0, 0}
  for i, q in ipairs(reqs) do
    local h, now = found[i], q.r.now
    local code, refunded, charged, short, d = REPLAYED, 0, 0, 0, nil
    if h then
      local a = RESERVERS[h.alg]
      local was = h.state
      local old = a.load(q.key, h.p, now)
      local s = old
      if mode == 'settle' then
        s, h, code, d = hold_settle(a, s, h, h.p, now, actual, cancel, q.r.id)
        refunded, charged, short = h.refunded, h.charged, h.short
      elseif h.state == HELD then
        s, refunded = a.refund(h.p, s, now, h.at, h.units)
        code = SETTLED
      end
      a.save(q.key, h.p, old, s, now)
      if mode == 'undo' and (was == HELD or was == DENIED) then
        call('DEL', holds[i])
      elseif mode == 'deny' and was == HELD then
        h.state = DENIED
        save_hold(holds[i], h)
      elseif h.state ~= was then
        save_hold(holds[i], h)
      end
      d = d or a.peek(q.key, h.p, now, 0, '')
    else
      d = RESERVERS[q.name].peek(q.key, q.p, now, 0, '')
    end
    out[#out + 1] = code
    out[#out + 1] = refunded
    out[#out + 1] = charged
    out[#out + 1] = short
    out[#out + 1] = (h and h.durable) and 1 or 0
    reply(out, d, now)
  end
  return out
end

-- main
return settle_main(KEYS, ARGV)
