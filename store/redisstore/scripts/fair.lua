-- fair.lua decides one request of a flow under a fixed window shared by
-- flows by max-min fairness. It mirrors algorithm.Fair.Step (fair.go) line
-- for line, with the same names, and share.Split under share.MaxMin with
-- no floors (share/share.go) as fair_split.
--
-- KEYS[1]  the state: a hash, field "s" = "<start>:<next>" (Fair.Start,
--          .Next), and one field per flow, "f" .. name =
--          "<seq>:<asked>:<prev>:<used>" (FairFlow); a TTL until
--          Fair.Expires (at least MIN_TTL_MS); absent for the zero state.
-- ARGV     one request, as parse_request in common.lua reads it (a
--          fixed_window: now_us, limit, period, cost, burst 0, flags 0,
--          id ""), then the flow's name (0 to MAX_FLOW_LEN bytes).
-- Reply    {allowed 0/1, limit (the flow's share), remaining,
--          reset_after_us, retry_after_us (-1 never), now_us}.
-- Mirrors  algorithm.Fair.Step, .Expires and algorithm.FairShares
--          (algorithm/fair.go), share.Split (share/share.go)

local MAX_FLOWS = 64 -- algorithm.MaxFlows
local MAX_FLOW_LEN = 256 -- floodgate.MaxFlowLen

-- fair_fill is share's fill: gives each party up to wants[i] of total,
-- evenly from the smallest want up, into given, and returns what is left.
local function fair_fill(total, wants, given)
  local active = {}
  for i = 1, #wants do
    given[i] = 0
    if wants[i] > 0 then
      active[#active + 1] = i
    end
  end
  while #active > 0 and total > 0 do
    local k = #active
    local each = floor_div(total, k)
    if each == 0 then
      for j = 1, total do
        given[active[j]] = given[active[j]] + 1
      end
      total = 0
      break
    end
    local step = each
    for _, i in ipairs(active) do
      step = min(step, wants[i] - given[i])
    end
    local next = {}
    for _, i in ipairs(active) do
      given[i] = given[i] + step
      total = total - step
      if given[i] < wants[i] then
        next[#next + 1] = i
      end
    end
    active = next
  end
  return total
end

-- fair_shares is FairShares: share.Split(limit, demands, MaxMin), each
-- flow's demand max(prev, asked), no floors; what the demands leave is
-- split evenly, the earlier flows getting the odd units.
local function fair_shares(limit, flows)
  local out = {}
  local n = #flows
  if limit <= 0 or n == 0 then
    for i = 1, n do
      out[i] = 0
    end
    return out
  end
  local wants = {}
  for i, f in ipairs(flows) do
    wants[i] = max(f.prev, f.asked)
  end
  local rest = fair_fill(limit, wants, out)
  if rest > 0 then
    local each = floor_div(rest, n)
    local odd = rest - each * n
    for i = 1, n do
      out[i] = out[i] + each
      if i <= odd then
        out[i] = out[i] + 1
      end
    end
  end
  return out
end

-- fair_load reads the state: {start, next, flows in the order of seq}.
local function fair_load(key)
  local h = call('HGETALL', key)
  local s = {start = 0, next = 0, flows = {}}
  for i = 1, #h, 2 do
    local field, v = h[i], h[i + 1]
    if field == 's' then
      local a, b = match(v, '^(%d+):(%d+)$')
      if not a or #a > 17 or #b > 17 then
        fail('state', 'the key holds ' .. format('%q', string.sub(v, 1, 64)) .. ', not a state')
      end
      s.start, s.next = a + 0, b + 0
    elseif string.sub(field, 1, 1) == 'f' then
      local a, b, c, d = match(v, '^(%d+):(%d+):(%d+):(%d+)$')
      if not a or #a > 17 or #b > 17 or #c > 17 or #d > 17 then
        fail('state', 'the key holds ' .. format('%q', string.sub(v, 1, 64)) .. ', not a state')
      end
      s.flows[#s.flows + 1] = {name = string.sub(field, 2), seq = a + 0, asked = b + 0, prev = c + 0, used = d + 0}
    else
      fail('state', 'the key holds field ' .. format('%q', string.sub(field, 1, 64)) .. ', not a state')
    end
  end
  table.sort(s.flows, function(x, y) return x.seq < y.seq end)
  return s
end

-- fair_step is Fair.Step.
local function fair_step(p, s, now, cost, flow)
  local start, next = s.start, s.next
  local flows = {}
  if #s.flows == 0 or now >= start + p.period then
    local new_start = now - mod(now, p.period)
    local adjacent = #s.flows > 0 and new_start == start + p.period
    for _, f in ipairs(s.flows) do
      if adjacent and f.asked > 0 then
        flows[#flows + 1] = {name = f.name, seq = f.seq, asked = 0, prev = f.asked, used = 0}
      end
    end
    start = new_start
  else
    for _, f in ipairs(s.flows) do
      flows[#flows + 1] = {name = f.name, seq = f.seq, asked = f.asked, prev = f.prev, used = f.used}
    end
  end
  local i = -1
  for j, f in ipairs(flows) do
    if f.name == flow then
      i = j
      break
    end
  end
  if i < 0 and #flows >= MAX_FLOWS then
    flow = ''
    for j, f in ipairs(flows) do
      if f.name == '' then
        i = j
        break
      end
    end
  end
  local added = false
  if i < 0 then
    flows[#flows + 1] = {name = flow, seq = next, asked = 0, prev = 0, used = 0}
    i, added = #flows, true
  end
  flows[i].asked = min(flows[i].asked + cost, MAX_LIMIT)
  local shares = fair_shares(p.limit, flows)
  local total = 0
  for _, f in ipairs(flows) do
    total = total + f.used
  end
  local left = min(shares[i] - flows[i].used, p.limit - total)
  local allowed = cost <= left
  if allowed then
    flows[i].used = flows[i].used + cost
    total = total + cost
    left = left - cost
  end
  local d = decision(allowed, shares[i], max(0, left))
  if total > 0 then
    d.reset_after = start + p.period - now
  end
  if allowed then
  elseif cost > p.limit then
    d.retry_after = NEVER
  else
    d.retry_after = start + p.period - now
  end
  if added then
    if cost == 0 then
      flows[i] = nil
    else
      next = next + 1
    end
  end
  if #flows == 0 then
    return {start = 0, next = 0, flows = {}}, d
  end
  return {start = start, next = next, flows = flows}, d
end

-- fair_expires is Fair.Expires.
local function fair_expires(p, s)
  if #s.flows == 0 then
    return 0
  end
  for _, f in ipairs(s.flows) do
    if f.asked > 0 then
      return s.start + 2 * p.period
    end
  end
  return s.start + p.period
end

-- fair_save writes s as a whole (the key deleted first, so that forgotten
-- flows go) with its TTL, or deletes the key for the zero state.
local function fair_save(key, s, exp, now)
  call('DEL', key)
  if exp <= 0 then
    return
  end
  local args = {'s', format('%d:%d', s.start, s.next)}
  for _, f in ipairs(s.flows) do
    args[#args + 1] = 'f' .. f.name
    args[#args + 1] = format('%d:%d:%d:%d', f.seq, f.asked, f.prev, f.used)
  end
  call('HSET', key, unpack(args))
  call('PEXPIRE', key, ttl_ms(exp, now))
end

-- fair_main checks the request, decides it and stores the state.
local function fair_main(keys, argv)
  if #keys ~= 1 or #argv ~= ARGS_PER_REQUEST + 1 then
    fail('args', 'want 1 key and ' .. (ARGS_PER_REQUEST + 1) .. ' arguments')
  end
  local p, r = parse_request('fixed_window', argv, 0)
  if p.first_hit or p.count_rejected then
    fail('flags', 'fair shares take an aligned window that does not count rejected requests')
  end
  if p.period > MAX_PERIOD / 2 then
    fail('period', 'above 2^47 us for fair shares, which keep a key for two periods')
  end
  local flow = argv[ARGS_PER_REQUEST + 1]
  if type(flow) ~= 'string' or #flow > MAX_FLOW_LEN then
    fail('flow', 'not 0 to ' .. MAX_FLOW_LEN .. ' bytes')
  end
  local now = r.now
  if now < 0 then
    now = server_now()
  end
  local old = fair_load(keys[1])
  local s, d = fair_step(p, old, now, r.cost, flow)
  fair_save(keys[1], s, fair_expires(p, s), now)
  return reply({}, d, now)
end

-- main
return fair_main(KEYS, ARGV)
