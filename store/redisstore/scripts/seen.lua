-- seen.lua keeps, for the rate slices of one key (a token bucket or GCRA
-- with a LocalBudget: slice.go), the latest time until which any instance
-- may admit on a slice of it. An instance records the end it will decide
-- up to before it decides past the end it recorded last, and reads the
-- mark that was there: a mark older than the bucket's refill time (plus
-- the clocks' grace) means that nothing was admitted for that long, so the
-- whole bucket is full and a new slice may start with its burst.
--
-- KEYS[1]  the mark: "<state key>:seen", a decimal µs time on the
--          recorders' clocks.
-- ARGV     mark_us (the end to record), ttl_ms (how long the mark must
--          live: to the end plus the refill time and the grace).
-- Reply    {old_mark_us}: 0 if there was none.
--
-- The mark only grows. It expires once it is older than the refill time
-- and the grace, which reads as 0, the same answer.

local mark, ttl = tonumber(ARGV[1]), tonumber(ARGV[2])
if mark == nil or ttl == nil or mark < 0 or ttl < 1 or mark ~= math.floor(mark) or ttl ~= math.floor(ttl) then
  return redis.error_reply('redisstore: seen.lua: bad arguments ' .. tostring(ARGV[1]) .. ', ' .. tostring(ARGV[2]))
end
local old = tonumber(redis.call('GET', KEYS[1]) or '0')
if old == nil then
  return redis.error_reply('redisstore: seen.lua: bad mark at ' .. KEYS[1])
end
if mark > old then
  redis.call('SET', KEYS[1], string.format('%d', mark), 'PX', ttl)
end
return {old}
