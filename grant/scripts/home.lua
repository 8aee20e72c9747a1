-- home.lua grants, renews, lowers and takes back a holder's share of one
-- limit at home, atomically: the sum of the live shares never exceeds the
-- limit. It mirrors grant.step (home.go) line for line; the differential
-- test TestHomeScriptMatchesStep runs both on random calls.
--
-- KEYS[1]  the hash of one key under one period: one field per holder (a
--          name and its process's incarnation), whose value is
--          "share,until_us,demand,floor".
-- ARGV     holder, now_us, limit, period_us, term_us, grace_us, want,
--          demand, floor, release (0 or 1), and optionally keep (0 or 1:
--          ask for exactly the share held, whatever want says). now_us is the holder's clock,
--          the clock it decides its windows by.
-- Reply    {share, until_us, now_us, self, n, then for each of the n live
--          holders sorted by name: demand, floor, share}. self is the
--          caller's 1-based place among them (0 after a release).
--
-- The rules (the package doc of grant says why they are exact):
--  * a grant whose until_us + grace_us <= now_us is gone: its share is
--    free again. until_us is always a multiple of period_us, so a holder
--    stops deciding on its share at the end of a window, and the grace
--    covers clocks that run up to grace_us apart.
--  * a holder asking for no more than it holds gets what it asks (it has
--    already lowered its own decisions); asking for more, it gets at most
--    what the others leave free, and never less than it holds: home never
--    takes units from a holder, only the holder gives them back.
--  * keep asks for exactly the share held: a holder that came back under
--    its old name learns its share without giving it back.
--  * a grant runs to the first multiple of period_us at or after
--    now + term, and never ends earlier than it did.

local key = KEYS[1]
local holder = ARGV[1]
local function int(i)
  local n = tonumber(ARGV[i])
  if n == nil or n < 0 or n ~= math.floor(n) then
    return redis.error_reply('grant: home.lua: argument ' .. i .. ' is not a non-negative integer: ' .. tostring(ARGV[i]))
  end
  return n
end
local now, limit, period, term, grace = int(2), int(3), int(4), int(5), int(6)
local want, demand, floor, release = int(7), int(8), int(9), int(10)
local keep = 0
if #ARGV >= 11 then
  keep = int(11)
end
for _, v in ipairs({now, limit, period, term, grace, want, demand, floor, release, keep}) do
  if type(v) == 'table' then
    return v
  end
end
if period <= 0 then
  return redis.error_reply('grant: home.lua: period must be above zero')
end

local all = redis.call('HGETALL', key)
local live = {}
local names = {}
local others = 0
local cur, curUntil = 0, 0
for i = 1, #all, 2 do
  local name = all[i]
  local s, u, d, f = string.match(all[i + 1], '^(%d+),(%d+),(%d+),(%d+)$')
  s, u, d, f = tonumber(s), tonumber(u), tonumber(d), tonumber(f)
  if s == nil then
    return redis.error_reply('grant: home.lua: bad grant of ' .. name .. ': ' .. all[i + 1])
  end
  if u + grace <= now then
    redis.call('HDEL', key, name)
  else
    live[name] = {s, u, d, f}
    if name == holder then
      cur, curUntil = s, u
    else
      names[#names + 1] = name
      others = others + s
    end
  end
end

local share, untilUS = 0, 0
if release == 1 then
  live[holder] = nil
  redis.call('HDEL', key, holder)
else
  want = math.min(want, limit)
  if keep == 1 then
    want = cur
  end
  if want <= cur then
    share = want
  else
    share = math.min(want, math.max(cur, limit - others))
  end
  local ends = now + term
  untilUS = math.max(curUntil, (ends + period - 1) - (ends + period - 1) % period)
  live[holder] = {share, untilUS, demand, floor}
  names[#names + 1] = holder
  redis.call('HSET', key, holder, string.format('%d,%d,%d,%d', share, untilUS, demand, floor))
end

table.sort(names)
local out = {share, untilUS, now, 0, #names}
local last = 0
for i, name in ipairs(names) do
  local l = live[name]
  if name == holder then
    out[4] = i
  end
  out[#out + 1] = l[3]
  out[#out + 1] = l[4]
  out[#out + 1] = l[1]
  last = math.max(last, l[2])
end
if #names > 0 then
  -- The hash lives as long as its longest grant and the grace, plus a
  -- period, in milliseconds (relative, so clocks do not matter).
  redis.call('PEXPIRE', key, math.floor((last + grace - now + period) / 1000) + 1)
end
return out
