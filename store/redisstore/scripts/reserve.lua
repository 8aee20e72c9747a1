-- reserve.lua holds units for a reservation, all or nothing across its
-- keys, under the reservation's ID: it mirrors memstore.Store.Reserve
-- (store/memstore/reserve.go), whose step on one key is algorithm.Reserve
-- (algorithm/reserve.go): the requests are decided as a batch
-- (batch_apply), and each key gets a hold that keeps the answer, Held
-- when admitted, Denied (holding nothing) when not, so that a retry of
-- the reserve gets the first answer (replayed) and another request with
-- the ID is a conflict. Its functions are the holds' helpers, which
-- settle.lua uses too: load_hold and save_hold, and hold_settle,
-- hold_settle_budget and hold_expire, which mirror algorithm.Settle,
-- settle and Expire line for line.
--
-- The Go side builds this script from common.lua, state.lua, rate.lua,
-- zset.lua, every algorithm's functions, batch.lua's and refund.lua's
-- functions and this file.
--
-- A hold is a hash "<state key>:hold:<id>" in the slot of its state key
-- (the key's hash tag comes first), with the integer fields of
-- HOLD_FIELDS: state (HELD ... EXPIRED, algorithm.HoldState), units, at,
-- expires (algorithm.Hold: µs of the request's clock), release (0/1),
-- actual, refunded, charged, short (its Settlement), the params it was
-- reserved under (limit, period, burst, flags: 1 first_hit, 2
-- count_rejected; and 4 when the limit is durable, floodgate.Limit.Durable), which a settle uses whatever the limit is by then,
-- and skew, what turns a time of the request's clock into one of the sweep's
-- clock (the store's Clock with ClientTime, else the server's TIME); for a
-- durable hold, window: the start of the fixed window its units count in
-- (µs of the request's clock; absent or 0 for the others, and in holds
-- made before it existed), which the ledger bills (settle.lua's read
-- mode, floodgate.HeldUnits); and alg, the algorithm's name. Its TTL is set when it is made: until expires
-- plus retention_us, after which a retry finds nothing (memstore's
-- HoldRetention); and keys, a digest of the keys of the whole
-- reservation (see reserve_replay).
--
-- KEYS     per request, two keys: its state, as in the algorithm's script,
--          then its hold, "<state key>:hold:<id>".
-- ARGV     ttl_us (1 to MAX_HOLD_TTL), release (0/1), retention_us,
--          clock_us (the sweep clock's now, -1 for the server's TIME),
--          part (1 when the reservation spans several Cluster slots and
--          these are the keys of one), keys (the digest of the
--          reservation's keys, 1 to 64 hex digits), then per request
--          BATCH_WIDTH strings, as batch.lua reads them; then, for a
--          reservation of durable quotas, per request 4 more strings:
--          durable (0/1: the hold's), and its floodgate.Rebuild: rebuild
--          (0 none, 1 check, 2 known), window_us and units (the ledger's,
--          for known).
-- Reply    {status, expires_us, then per request allowed 0/1, limit,
--          remaining, reset_after_us, retry_after_us (-1 never), now_us}:
--          status RESERVED (a new hold: the decisions say whether it is
--          held), REPLAYED (the holds exist and are what this asks for:
--          the first answer, and the state now), OTHER_KEYS (the ID holds
--          some of the keys but not all: a conflict) or CONFLICT (the
--          holds are of other units, params, TTL or release); expires_us
--          and the decisions are 0 and absent for the last two. LOST
--          (nothing changed: a checked fixed window has no count in its
--          window, and must be rebuilt from the ledger first; or a known
--          one's window does not hold now) has expires_us 0 and per
--          request its now_us for a lost counter, else 0.
-- Mirrors  memstore.Store.Reserve, algorithm.Reserve; algorithm.Settle,
--          settle and Expire (algorithm/reserve.go) for settle.lua

-- The states of a hold, algorithm.HoldState.
local HELD, DENIED, COMMITTED, CANCELLED, EXPIRED = 1, 2, 3, 4, 5

-- The codes of a settle step, algorithm.SettleCode.
local SETTLED, REPLAYED, CONFLICT, TOO_LATE = 1, 2, 3, 4

-- The status of a reserve (its reply's first integer).
local RESERVED, RESERVE_REPLAYED, RESERVE_OTHER_KEYS, RESERVE_CONFLICT, RESERVE_LOST = 0, 1, 2, 3, 4

-- The modes of a durable request's rebuild (floodgate.Rebuild).
local REBUILD_NONE, REBUILD_CHECK, REBUILD_KNOWN = 0, 1, 2

local MAX_HOLD_TTL = 86400000000 -- floodgate.MaxHoldTTL, 24 h in µs

-- HOLD_FIELDS are the integer fields of a hold's hash.
local HOLD_FIELDS = {'state', 'units', 'at', 'expires', 'release', 'actual', 'refunded', 'charged', 'short',
  'limit', 'period', 'burst', 'flags', 'skew'}

-- hold_flags is the flags field of a hold of params p, durable or not.
local function hold_flags(p, durable)
  local flags = 0
  if p.first_hit then
    flags = flags + 1
  end
  if p.count_rejected then
    flags = flags + 2
  end
  if durable then
    flags = flags + 4
  end
  if p.calendar then
    flags = flags + 8
  end
  return flags
end

-- load_hold reads the hold at key: nil if there is none, else its fields
-- as numbers (release a boolean), alg, and p, the params it was reserved
-- under. A hash of another shape (a foreign key) fails, before any
-- write.
local function load_hold(key)
  local v = call('HGETALL', key)
  if #v == 0 then
    return nil
  end
  local h = {}
  for i = 1, #v, 2 do
    h[v[i]] = v[i + 1]
  end
  for _, f in ipairs(HOLD_FIELDS) do
    local x = h[f]
    if type(x) ~= 'string' or #x > 17 or not match(x, '^%-?%d+$') then
      fail('state', 'the hold ' .. key .. ' has no integer ' .. f)
    end
    h[f] = x + 0
  end
  if not RESERVERS[h.alg] or h.state < HELD or h.state > EXPIRED then
    fail('state', 'the hold ' .. key .. ' is not a hold')
  end
  h.release = h.release == 1
  h.keys = h.keys or ''
  h.p = {limit = h.limit, period = h.period, burst = h.burst, first_hit = h.flags % 2 == 1, count_rejected = h.flags % 4 >= 2,
    calendar = h.flags % 16 >= 8}
  h.durable = h.flags % 8 >= 4
  local w = h.window or '0'
  if type(w) ~= 'string' or #w > 17 or not match(w, '^%d+$') then
    fail('state', 'the hold ' .. key .. ' has no integer window')
  end
  h.window = w + 0
  return h
end

-- save_hold writes every field of hold h at key, with a TTL of ttl ms if
-- given (a new hold). A hold that changes keeps the TTL it was made with;
-- should it have expired while the script ran (Redis 7.0 can expire a key
-- in the middle of a script, see MIN_TTL_MS), the hash written again gets
-- MIN_TTL_MS, so that no key is ever left without a TTL.
local function save_hold(key, h, ttl)
  local release = 0
  if h.release then
    release = 1
  end
  call('HSET', key, 'alg', h.alg, 'state', h.state, 'units', h.units, 'at', h.at, 'expires', h.expires,
    'release', release, 'actual', h.actual, 'refunded', h.refunded, 'charged', h.charged, 'short', h.short,
    'limit', h.p.limit, 'period', h.p.period, 'burst', h.p.burst, 'flags', hold_flags(h.p, h.durable), 'skew', h.skew, 'keys', h.keys,
    'window', h.window or 0)
  if ttl then
    call('PEXPIRE', key, ttl)
  elseif call('PTTL', key) < 0 then
    call('PEXPIRE', key, MIN_TTL_MS)
  end
end

-- hold_settle_budget is settle: the budget's side of settling a held hold
-- h with actual, on state s of algorithm a. It returns the state and the
-- Settlement (refunded, charged, short). id names the sliding log's
-- entries of an excess taken.
local function hold_settle_budget(a, s, h, p, now, actual, id)
  local refunded, charged, short = 0, 0, 0
  if actual < h.units then
    s, refunded = a.refund(p, s, now, h.at, h.units - actual)
  elseif actual > h.units then
    local excess = actual - h.units
    local d
    -- A denied step changes nothing, unless the limit counts rejections:
    -- then the excess counts as any denied request does.
    s, d = a.step(p, s, now, excess, id)
    if d.allowed then
      charged = excess
    else
      short = excess
    end
  end
  return s, refunded, charged, short
end

-- hold_expire is Expire: it expires h at now if it is still held and its
-- time has come; its units stay charged, or with release are given back
-- (refund). Any other hold is returned as it is.
local function hold_expire(a, s, h, p, now)
  if h.state ~= HELD or now < h.expires then
    return s, h
  end
  h.state, h.actual = EXPIRED, 0
  if h.release then
    s, h.refunded = a.refund(p, s, now, h.at, h.units)
  end
  return s, h
end

-- hold_settle is Settle: it settles hold h of state s at now, a commit of
-- actual or with cancel a cancel (actual is then 0). A hold past its
-- expiry expires first and the step is TOO_LATE; a hold settled already
-- answers as its code says, with the first Settlement. It returns the
-- state, the hold (whose refunded, charged and short are the
-- Settlement), the code, and a peek at the state after (cost 0).
local function hold_settle(a, s, h, p, now, actual, cancel, id)
  local target = COMMITTED
  if cancel then
    target, actual = CANCELLED, 0
  end
  local code = SETTLED
  s, h = hold_expire(a, s, h, p, now)
  if h.state == HELD then
    s, h.refunded, h.charged, h.short = hold_settle_budget(a, s, h, p, now, actual, id)
    h.state, h.actual = target, actual
  elseif h.state == EXPIRED then
    code = TOO_LATE
  elseif h.state == target and h.actual == actual then
    code = REPLAYED
  else
    code = CONFLICT
  end
  local d
  s, d = a.step(p, s, now, 0, '')
  return s, h, code, d
end

-- hold_window is memstore's batch.window: the start of the fixed window
-- that request q's units count in, after it was decided: the live
-- window's, else the one a request would open now.
local function hold_window(q)
  local now = q.r.now
  local s = reserver('fixed_window').load(q.key, q.p, now)
  if fixed_window_live(q.p, s, now) then
    return s.start
  elseif q.p.first_hit then
    return now
  elseif q.p.calendar then
    local start = calendar_window(q.p, now)
    return start
  end
  return now - mod(now, q.p.period)
end

-- known_holds is memstore's knownHolds: whether the ledger's window that
-- starts at w holds now, the window a request at now counts in.
local function known_holds(p, w, now)
  if p.calendar then
    local start = calendar_window(p, now)
    return start == w
  end
  return now >= w and now < w + p.period
end

-- same_params reports whether params p and q are equal (algorithm.Params).
local function same_params(p, q)
  return p.limit == q.limit and p.period == q.period and p.burst == q.burst and p.first_hit == q.first_hit
    and p.count_rejected == q.count_rejected and (p.calendar or false) == (q.calendar or false)
end

-- reserve_replay answers a reserve whose holds exist, as memstore's
-- replayReserve: the first answer if they are what it asks for (a hold
-- Denied: the request's denial now; Held: allowed, and a peek at the
-- state now), else a conflict. A script that has every key of the
-- reserve sees every hold, as memstore does; one that has the keys of one
-- slot of several (part) cannot see the others', and checks that its
-- holds were made by a reserve of the same keys (keys): a reserve of
-- other keys with a known ID then conflicts, as in memstore, and so does
-- one of some of the keys of an earlier reserve over several slots (where
-- memstore replays the first answer).
local function reserve_replay(reqs, found, ttl, release, part, keys)
  local out = {RESERVE_REPLAYED, found[1].expires}
  for i, q in ipairs(reqs) do
    local h = found[i]
    if part and h.keys ~= keys then
      return {RESERVE_OTHER_KEYS, 0}
    end
    if h.alg ~= q.name or h.units ~= q.r.cost or not same_params(h.p, q.p) or h.expires - h.at ~= ttl or h.release ~= release then
      return {RESERVE_CONFLICT, 0}
    end
    local a = RESERVERS[q.name]
    local d
    if h.state == DENIED then
      d = a.peek(q.key, q.p, q.r.now, q.r.cost, q.r.id)
      d.allowed = false
    else
      d = a.peek(q.key, q.p, q.r.now, 0, '')
      d.allowed, d.retry_after = true, 0
    end
    reply(out, d, q.r.now)
  end
  return out
end

-- hold_pairs splits keys into the state keys and the hold keys, checking
-- that each hold key is its state key's.
local function hold_pairs(keys)
  local n = #keys / 2
  if n < 1 or n ~= floor(n) then
    fail('args', 'want two keys per hold')
  end
  local states, holds = {}, {}
  for i = 1, n do
    states[i], holds[i] = keys[2 * i - 1], keys[2 * i]
    if string.sub(holds[i], 1, #states[i] + 6) ~= states[i] .. ':hold:' then
      fail('args', 'key ' .. holds[i] .. ' is not a hold of ' .. states[i])
    end
  end
  return states, holds
end

-- read_rebuild reads the durability and rebuild of each request (4
-- strings from argv[base + 1]), checking that only a fixed window has
-- them.
local function read_rebuild(reqs, argv, base)
  local rebuild = {}
  for i, q in ipairs(reqs) do
    local at = base + 4 * (i - 1)
    local b = {durable = arg_int('durable', argv[at + 1], 0, 1) == 1, mode = arg_int('rebuild', argv[at + 2], REBUILD_NONE, REBUILD_KNOWN),
      window = arg_int('window_us', argv[at + 3], 0, MAX_NOW), units = arg_int('units', argv[at + 4], 0, MAX_LIMIT)}
    if (b.durable or b.mode ~= REBUILD_NONE) and q.name ~= 'fixed_window' then
      fail('rebuild', 'only a fixed window is durable, not ' .. q.name)
    end
    rebuild[i] = b
  end
  return rebuild
end

-- rebuild_counters is memstore's batch.rebuild: the LOST reply when a
-- checked counter has no count in its window, or a known one has none and
-- its known window does not hold now (nothing changed); else nil, after
-- raising each known counter to the ledger's units (fixed_window_raise).
local function rebuild_counters(reqs, rebuild)
  local out = nil
  for i, q in ipairs(reqs) do
    local b, now = rebuild[i], q.r.now
    local lost = false
    if b.mode ~= REBUILD_NONE and not fixed_window_live(q.p, reserver('fixed_window').load(q.key, q.p, now), now) then
      lost = b.mode == REBUILD_CHECK or not known_holds(q.p, b.window, now)
    end
    if lost then
      if not out then
        out = {RESERVE_LOST, 0}
        for j = 1, #reqs do
          out[2 + j] = 0
        end
      end
      out[2 + i] = now
    end
  end
  if out then
    return out
  end
  for i, q in ipairs(reqs) do
    local b = rebuild[i]
    if b.mode == REBUILD_KNOWN then
      local a = reserver('fixed_window')
      local old = a.load(q.key, q.p, q.r.now)
      a.save(q.key, q.p, old, fixed_window_raise(q.p, old, q.r.now, b.window, b.units), q.r.now)
    end
  end
  return nil
end

-- reserve_main is the reserve script: see the header. Every argument,
-- key and hold is read and checked before the first write.
local function reserve_main(keys, argv)
  local states, holds = hold_pairs(keys)
  local n = #holds
  local width = 6 + n * BATCH_WIDTH
  if #argv ~= width and #argv ~= width + 4 * n then
    fail('args', 'want ' .. BATCH_WIDTH .. ' arguments per request, after 6, then none or 4 per request')
  end
  local ttl = arg_int('ttl_us', argv[1], 1, MAX_HOLD_TTL)
  local release = arg_int('release', argv[2], 0, 1) == 1
  local retention = arg_int('retention_us', argv[3], 0, MAX_PERIOD)
  local clock = arg_int('clock_us', argv[4], -1, MAX_NOW)
  local part = arg_int('part', argv[5], 0, 1) == 1
  local digest = argv[6]
  if type(digest) ~= 'string' or #digest > 64 or not match(digest, '^%x+$') then
    fail('keys', 'not 1 to 64 hex digits')
  end
  local reqs = batch_requests(states, argv, 6)
  for _, q in ipairs(reqs) do
    reserver(q.name)
  end
  local rebuild = nil
  if #argv > width then
    rebuild = read_rebuild(reqs, argv, width)
  end
  -- memstore's findHolds: none (a new reserve), all (a retry), or some,
  -- a conflict: the ID held other keys.
  local found, held = {}, 0
  for i = 1, n do
    found[i] = load_hold(holds[i])
    if found[i] then
      held = held + 1
    end
  end
  if held == n then
    return reserve_replay(reqs, found, ttl, release, part, digest)
  elseif held > 0 then
    return {RESERVE_OTHER_KEYS, 0}
  end
  if rebuild then
    local lost = rebuild_counters(reqs, rebuild)
    if lost then
      return lost
    end
  end
  local ds, admitted = batch_apply(reqs, false)
  local state = DENIED
  if admitted then
    state = HELD
  end
  local out = {RESERVED, reqs[1].r.now + ttl}
  local server = nil
  for i, q in ipairs(reqs) do
    -- skew is 0 for a request decided at the sweep's own clock.
    local skew = 0
    if clock >= 0 then
      skew = clock - q.r.now
    elseif not q.server then
      server = server or server_now()
      skew = server - q.r.now
    end
    local h = {alg = q.name, state = state, units = q.r.cost, at = q.r.now, expires = q.r.now + ttl, release = release,
      actual = 0, refunded = 0, charged = 0, short = 0, p = q.p, keys = digest, skew = skew,
      durable = rebuild ~= nil and rebuild[i].durable, window = 0}
    if h.durable then
      h.window = hold_window(q)
    end
    save_hold(holds[i], h, ttl_ms(h.expires + retention, q.r.now))
    reply(out, ds[i], q.r.now)
  end
  return out
end

-- main
return reserve_main(KEYS, ARGV)
