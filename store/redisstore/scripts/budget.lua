-- budget.lua claims units of a local budget of fixed_window and
-- sliding_window (floodgate.Limit.LocalBudget) and gives unused units
-- back. The Go side (scripts.go) builds one script per algorithm:
-- common.lua, state.lua, the algorithm's functions (its file up to
-- "-- main"), this file, then a main line
--   return budget_main('<alg>', <alg>_step, <ALG>_FIELDS, <alg>_expires, '<counted field>', KEYS, ARGV[, load, save])
-- where load(key, p, now) and save(key, p, old, s, now, old_exp) read and
-- store the state in place of load_state and save_state (a fixed window's
-- counter: fixed_window_load, fixed_window_save; a sliding window's
-- counters: sliding_window_load, sliding_window_save).
-- It mirrors no Go function: memstore decides in process and needs no
-- local budget. Each claim is <alg>_step (algorithm.FixedWindow.Step,
-- algorithm.SlidingWindow.Step) run twice in one script, so a claimed unit
-- is counted in the state exactly like an admitted one.
--
-- KEYS[1]  the state, as the algorithm's own script keeps it.
-- ARGV     one request, as parse_request in common.lua reads it, then
--          op       'claim' or 'return'
--          n        claim: the most extra units to claim after the
--                   request (0 to 2^40); return: the window start the
--                   units given back were claimed in
--          For 'return', the request's cost is the number of unused units
--          given back.
-- Reply    claim: {allowed 0/1, limit, remaining, reset_after_us,
--          retry_after_us (-1 never), now_us, granted, window_start_us}:
--          the request's own decision (remaining after the grant), the
--          units claimed on top of it, and the start of the window (the
--          state's start) they were counted in, which ends at
--          window_start + period.
--          return: {returned, now_us}.
--
-- Why the claim is exact: a fixed window admits what its count allows
-- until the window ends, whenever in the window a unit is spent; a
-- sliding window's weighted estimate of the previous window only falls as
-- time passes within one window, so units counted in the current window
-- may be spent at any time until it ends. The grant is at most half of
-- what remains, so that other instances still find budget near the limit.
--
-- Why the return is exact: the returned units were counted and never
-- spent, so taking them off the count of the same window (the stored
-- start equals the claim's window start) leaves at least every unit spent.
-- A return after a Reset of the key can find a new state of the same
-- start (an aligned window): it then takes off units the new state never
-- counted, at most the local budget, which the package doc says.

local function budget_main(alg, step, fields, expires, counted, keys, argv, load, save)
  load = load or function(key)
    return load_state(key, fields)
  end
  save = save or function(key, p, old, s, now, old_exp)
    save_state(key, fields, old, s, expires(p, s), now, old_exp)
  end
  if #keys ~= 1 or #argv ~= ARGS_PER_REQUEST + 2 then
    fail('args', 'want 1 key and ' .. (ARGS_PER_REQUEST + 2) .. ' arguments')
  end
  local key = keys[1]
  local p, r = parse_request(alg, argv, 0)
  local op = argv[ARGS_PER_REQUEST + 1]
  local now = r.now
  if op == 'claim' then
    local extra = arg_int('n', argv[ARGS_PER_REQUEST + 2], 0, MAX_LIMIT)
    if now < 0 then
      now = server_now()
    end
    local old = load(key, p, now)
    local s, d = step(p, old, now, r.cost)
    local granted = 0
    if d.allowed and extra > 0 then
      local g = min(extra, floor_div(d.remaining, 2))
      if g > 0 then
        local s2, d2 = step(p, s, now, g)
        if d2.allowed then
          s, granted = s2, g
          d.remaining = d2.remaining
        end
      end
    end
    save(key, p, old, s, now, r.now < 0 and expires(p, old) or 0)
    local out = reply({}, d, now)
    out[#out + 1] = granted
    out[#out + 1] = s.start
    return out
  elseif op == 'return' then
    local start = arg_int('n', argv[ARGS_PER_REQUEST + 2], 0, MAX_EXACT)
    if now < 0 then
      now = server_now()
    end
    local old = load(key, p, now)
    local returned = 0
    -- A fixed window that counted a rejection holds limit+1: it stays
    -- denied until its end, as count_rejected says, so nothing goes back.
    if old.start == start and old[counted] > 0 and old[counted] <= p.limit then
      returned = min(r.cost, old[counted])
      local s = {}
      for _, f in ipairs(fields) do
        s[f] = old[f]
      end
      s[counted] = old[counted] - returned
      local exp = expires(p, s)
      if exp == 0 then
        s.start = 0
        for _, f in ipairs(fields) do
          s[f] = 0
        end
      end
      save(key, p, old, s, now, r.now < 0 and expires(p, old) or 0)
    end
    return {returned, now}
  end
  fail('op', 'want claim or return, not ' .. tostring(op))
end
