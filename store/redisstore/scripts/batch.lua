-- batch.lua decides several requests in one atomic step, all or nothing.
-- It mirrors memstore.Store.ApplyBatch and the documentation of
-- floodgate.Batcher: every request is applied in order; if any is denied,
-- every key is put back as it was, each request that had room reports the
-- unchanged state (a peek that stores nothing) with allowed 0 and
-- retry_after 0, and a denied request whose limit counts rejections is
-- applied again, alone.
--
-- The Go side builds this script from common.lua, state.lua, rate.lua,
-- zset.lua, the step functions of every algorithm file (without their main
-- parts) and this file, so the algorithms exist once. The checks of a key's
-- type, which only a batch needs before its first write, are here, and so
-- are the helpers the reservation scripts share with it (batch_requests,
-- batch_apply, snapshot, restore).
--
-- KEYS[i]  the state of request i, as in the algorithm's script. On a Redis
--          Cluster the store sends only keys of one slot together (see
--          Store.ApplyBatch): a batch of several slots is one run of this
--          script per slot.
-- ARGV     per request, BATCH_WIDTH = (1 + ARGS_PER_REQUEST) strings: the
--          algorithm name, then the request as parse_request in common.lua
--          reads it; then, optionally, the one string 'deny': another slot
--          of the same batch denied it, so this run is decided as a denied
--          batch whatever its own requests get (nothing is taken, a
--          request that had room reports the unchanged state, a denied one
--          its denial, and one whose limit counts rejections counts).
-- Reply    per request, {allowed 0/1, limit, remaining, reset_after_us,
--          retry_after_us (-1 never), now_us}, one flat array.
-- Mirrors  memstore.Store.ApplyBatch (store/memstore/memstore.go)
--
-- O(the sum of the requests' costs and of the keys' sizes): a key is saved
-- before the first write so that it can be put back.

-- check_type fails unless key is absent or of type want: checked before the
-- first write, so that a foreign key fails the script before it changed
-- anything.
local function check_type(key, want)
  local t = call('TYPE', key)['ok']
  if t ~= 'none' and t ~= want then
    fail('state', 'the key holds a ' .. t .. ', not a ' .. want)
  end
end

-- fixed_window_check fails if the key holds something else than a state,
-- or, for an aligned window of params p at now, if the hash of the
-- counters, or the counter of the window that holds now, is not one.
local function fixed_window_check(key, p, now)
  check_type(key, 'string')
  load_state(key, FIXED_WINDOW_FIELDS)
  check_type(key .. ':f', 'string')
  load_state(key .. ':f', FIXED_WINDOW_FIELDS)
  if p and now and not p.first_hit then
    local wkey = fixed_window_key(key)
    check_type(wkey, 'hash')
    fixed_window_read(wkey, format('%d', (fixed_window_bounds(p, now))))
  end
end

-- fixed_window_state_key is the key that a request of params p writes:
-- the hash of the counters, or a first-hit window's string.
local function fixed_window_state_key(key, p)
  if p.first_hit then
    return key .. ':f'
  end
  return fixed_window_key(key)
end

-- sliding_window_log_check fails if the key holds something else than a
-- state.
local function sliding_window_log_check(key)
  check_type(key, 'zset')
end

-- sliding_window_check fails if the key holds something else than a
-- layout-1 state, or the hash of the counters something else than
-- counters where the state of params p at now is read
-- (sliding_window_load, which only reads).
local function sliding_window_check(key, p, now)
  check_type(key, 'string')
  load_state(key, SLIDING_WINDOW_FIELDS)
  check_type(sliding_window_key(key), 'hash')
  if p and now then
    sliding_window_load(key, p, now)
  end
end

-- sliding_window_state_key is the key that a request writes: the hash of
-- the counters.
local function sliding_window_state_key(key)
  return sliding_window_key(key)
end

-- token_bucket_check fails if the key holds something else than a state.
local function token_bucket_check(key)
  check_type(key, 'string')
  load_state(key, TOKEN_BUCKET_FIELDS)
end

-- gcra_check fails if the key holds something else than a state.
local function gcra_check(key)
  check_type(key, 'string')
  load_state(key, GCRA_FIELDS)
end

-- concurrency_check fails if the key holds something else than a state.
local function concurrency_check(key)
  check_type(key, 'zset')
end

local ALGORITHMS = {
  fixed_window = {check = fixed_window_check, apply = fixed_window_apply, state_key = fixed_window_state_key},
  sliding_window_log = {check = sliding_window_log_check, apply = sliding_window_log_apply},
  sliding_window = {check = sliding_window_check, apply = sliding_window_apply, state_key = sliding_window_state_key},
  token_bucket = {check = token_bucket_check, apply = token_bucket_apply},
  gcra = {check = gcra_check, apply = gcra_apply},
  concurrency = {check = concurrency_check, apply = concurrency_apply},
}

-- snapshot saves a key's type (string, hash or zset), TTL and content.
local function snapshot(key)
  local t = call('TYPE', key)['ok']
  if t == 'none' then
    return {type = t}
  end
  local sn = {type = t, pttl = call('PTTL', key)}
  if t == 'string' then
    sn.data = call('GET', key)
  elseif t == 'hash' then
    sn.data = call('HGETALL', key)
  else
    sn.data = call('ZRANGE', key, 0, -1, 'WITHSCORES')
  end
  return sn
end

-- restore puts back a key saved by snapshot, with its TTL (at least
-- MIN_TTL_MS, see common.lua).
local function restore(key, sn)
  call('DEL', key)
  if sn.type == 'none' then
    return
  end
  if sn.type == 'string' then
    call('SET', key, sn.data)
  elseif sn.type == 'hash' then
    call('HSET', key, unpack(sn.data))
  end
  local i = 1
  while sn.type == 'zset' and i <= #sn.data do
    local j = min(i + 2 * CHUNK - 1, #sn.data)
    local args = {}
    for k = i, j, 2 do
      args[#args + 1] = sn.data[k + 1]
      args[#args + 1] = sn.data[k]
    end
    call('ZADD', key, unpack(args))
    i = j + 1
  end
  if sn.pttl >= 0 then
    call('PEXPIRE', key, max(sn.pttl, MIN_TTL_MS))
  end
end

-- BATCH_WIDTH is the ARGV strings of one request of a batch: its
-- algorithm's name, then the request.
local BATCH_WIDTH = 1 + ARGS_PER_REQUEST

-- batch_requests reads and checks the requests of keys[1..#keys], whose
-- arguments start at argv[base+1], BATCH_WIDTH strings each, and checks
-- every key, all before the first write. Requests of the server's time
-- (now_us -1) are decided at one reading of TIME, and marked server. It
-- returns the requests: {name, alg (of ALGORITHMS), key, p, r, server,
-- skey}; skey is the key the request writes (alg.state_key), which a
-- batch saves and puts back.
local function batch_requests(keys, argv, base)
  local reqs = {}
  local now = nil
  for i = 1, #keys do
    local at = base + (i - 1) * BATCH_WIDTH
    local name = argv[at + 1]
    local alg = ALGORITHMS[name]
    if not alg then
      fail('algorithm', 'unknown algorithm ' .. tostring(name))
    end
    local p, r = parse_request(name, argv, at + 1)
    local server = r.now < 0
    if server then
      now = now or server_now()
      r.now = now
    end
    check_windows(p, r.now)
    local skey = keys[i]
    if alg.state_key then
      skey = alg.state_key(keys[i], p, r.now)
    end
    reqs[i] = {name = name, alg = alg, key = keys[i], p = p, r = r, server = server, skey = skey}
  end
  -- One key needs no check: its algorithm's own steps fail on a foreign
  -- key before they write, as its single script does.
  if #keys > 1 then
    for i = 1, #keys do
      reqs[i].alg.check(keys[i], reqs[i].p, reqs[i].r.now)
    end
  end
  return reqs
end

-- batch_apply decides reqs (batch_requests) all or nothing, as
-- memstore's batch.apply, or with deny as a batch another slot denied (see
-- the header). It returns the decisions and whether all were admitted.
local function batch_apply(reqs, deny)
  if #reqs == 1 and not deny then
    -- One request is its own batch: denied, it wrote nothing, or what a
    -- denial that counts writes (count_rejected), which the batch would
    -- write again after putting the key back.
    local d = reqs[1].alg.apply(reqs[1].key, reqs[1].p, reqs[1].r, reqs[1].r.now)
    return {d}, d.allowed
  end
  local saved, keys = {}, {}
  for i = 1, #reqs do
    local key = reqs[i].skey
    if not saved[key] then
      saved[key] = snapshot(key)
      keys[#keys + 1] = key
    end
  end
  local ds, admitted = {}, not deny
  for i = 1, #reqs do
    local q = reqs[i]
    ds[i] = q.alg.apply(q.key, q.p, q.r, q.r.now)
    admitted = admitted and ds[i].allowed
  end
  if admitted then
    return ds, true
  end
  for _, key in ipairs(keys) do
    restore(key, saved[key])
  end
  for i = 1, #reqs do
    local q = reqs[i]
    if ds[i].allowed then
      -- A peek that stores nothing, as memstore's step without commit: a
      -- peek may rewrite a state in a form another limit of the same
      -- period reads differently (credited tokens, dropped entries).
      local peek = {now = q.r.now, cost = 0, id = '', release = false}
      local sn = snapshot(q.skey)
      ds[i] = q.alg.apply(q.key, q.p, peek, q.r.now)
      restore(q.skey, sn)
      ds[i].allowed, ds[i].retry_after = false, 0
    elseif q.p.count_rejected then
      q.alg.apply(q.key, q.p, q.r, q.r.now)
    end
  end
  return ds, false
end

-- batch_main is the batch script: see the header.
local function batch_main(keys, argv)
  local n = #keys
  local deny = #argv == n * BATCH_WIDTH + 1 and argv[#argv] == 'deny'
  if n == 0 or (#argv ~= n * BATCH_WIDTH and not deny) then
    fail('args', 'want ' .. BATCH_WIDTH .. ' arguments per key, and optionally deny')
  end
  local reqs = batch_requests(keys, argv, 0)
  local ds = batch_apply(reqs, deny)
  local out = {}
  for i = 1, n do
    reply(out, ds[i], reqs[i].r.now)
  end
  return out
end

-- main
return batch_main(KEYS, ARGV)
