-- A measuring reference, not used by Floodgate: the decision of
-- store/redisstore's fixed_window script (default flags) written inline, with no
-- helper functions, to size what defining the helpers costs per run (see
-- BENCHMARKS.md, Script cost). Its argument checks are looser than parse_request's.
local floor, max, min = math.floor, math.max, math.min
local call = redis.call
local match, concat, format = string.match, table.concat, string.format
if #KEYS ~= 1 or #ARGV ~= 7 then error('x') end
local a1, a2, a3, a4, a5, a6 = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local now, limit, period, cost, burst, flags
if #a1 <= 17 and #a2 <= 17 and #a3 <= 17 and #a4 <= 17 and #a5 <= 17 and #a6 <= 17
  and match(concat(ARGV, ':', 1, 6), '^%-?%d+:%-?%d+:%-?%d+:%-?%d+:%-?%d+:%-?%d+$') then
  now, limit, period, cost, burst, flags = a1 + 0, a2 + 0, a3 + 0, a4 + 0, a5 + 0, a6 + 0
end
if not (now and now >= -1 and now <= 4503599627370496 and limit >= 0 and limit <= 1099511627776
  and period >= 1 and period <= 281474976710656 and cost >= 0 and cost <= 1099511627776
  and burst == 0 and flags >= 0 and flags <= 3) then error('y') end
if ARGV[7] ~= '' then error('z') end
local p = {limit = limit, period = period, burst = burst, first_hit = flags % 2 == 1, count_rejected = flags % 4 >= 2}
if now < 0 then local t = call('TIME'); now = t[1] * 1000000 + t[2] end
local key = KEYS[1]
local v = call('GET', key)
local ostart, ocount = 0, 0
if v then
  local x1, x2 = match(v, '^(%-?%d+):(%-?%d+)$')
  if not x1 or #x1 > 17 or #x2 > 17 then error('s') end
  ostart, ocount = x1 + 0, x2 + 0
end
local start, count = ostart, ocount
if count <= 0 or now >= start + p.period then
  count = 0
  if p.first_hit then start = now else
    local q = floor(now / p.period)
    if q * p.period > now then q = q - 1 elseif (q + 1) * p.period <= now then q = q + 1 end
    start = now - q * p.period
  end
end
local allowed = count + cost <= p.limit
if allowed then count = count + cost elseif p.count_rejected then count = min(count + cost, p.limit + 1) end
local d = {allowed = allowed, limit = p.limit, remaining = max(0, p.limit - count), reset_after = 0, retry_after = 0}
if count > 0 then d.reset_after = start + p.period - now else start = 0 end
if allowed then elseif cost > p.limit then d.retry_after = -1 else d.retry_after = start + p.period - now end
if start ~= ostart or count ~= ocount then
  if count > 0 then
    local exp = start + p.period
    call('SET', key, format('%d:%d', start, count), 'PX', max(floor((max(exp - now, 0) + 999) / 1000), 1000))
  else call('DEL', key) end
end
return {allowed and 1 or 0, d.limit, d.remaining, d.reset_after, d.retry_after, now}
