-- state.lua: the state of the O(1) algorithms (fixed_window,
-- sliding_window, token_bucket, gcra), a string of integers
-- "<field 1>:<field 2>:..." in the order of the algorithm's fields (one to
-- three), with a TTL. Included after common.lua.

-- STATE_PATTERN[n] matches a state of n fields and captures them;
-- STATE_FORMAT[n] writes one.
local STATE_PATTERN = {'^(%-?%d+)$', '^(%-?%d+):(%-?%d+)$', '^(%-?%d+):(%-?%d+):(%-?%d+)$'}
local STATE_FORMAT = {'%d', '%d:%d', '%d:%d:%d'}

-- load_state reads the state of an O(1) algorithm, whose field names are
-- fields. An absent key reads as the zero state; a state that expired but
-- is still there is read as it is (as memstore does), and the algorithm
-- treats it as empty. A value of another shape is an error (a foreign key),
-- raised before the script writes anything.
local function load_state(key, fields)
  local v = call('GET', key)
  local f1, f2, f3 = fields[1], fields[2], fields[3]
  if not v then
    if f3 then
      return {[f1] = 0, [f2] = 0, [f3] = 0}
    elseif f2 then
      return {[f1] = 0, [f2] = 0}
    end
    return {[f1] = 0}
  end
  -- fields.short: a state of that many fields, the others 0, is written
  -- and read in that form (a fixed window's, but for a calendar window's).
  local x1, x2, x3 = match(v, STATE_PATTERN[fields.short or #fields])
  if not x1 and fields.short then
    x1, x2, x3 = match(v, STATE_PATTERN[#fields])
  end
  if not x1 or #x1 > 17 or (x2 and #x2 > 17) or (x3 and #x3 > 17) then
    fail('state', 'the key holds ' .. format('%q', string.sub(v, 1, 64)) .. ', not a state')
  end
  -- The match makes the coercions safe.
  if f3 then
    return {[f1] = x1 + 0, [f2] = x2 + 0, [f3] = (x3 or 0) + 0}
  elseif f2 then
    return {[f1] = x1 + 0, [f2] = x2 + 0}
  end
  return {[f1] = x1 + 0}
end

-- save_state stores the state s, which expires at exp (its algorithm's
-- Expires; 0 for the zero state), with its TTL in one SET, or deletes the
-- key for the zero state. A state equal to old is not written again: its
-- key and TTL stay as the last change set them, as in memstore.
--
-- old_exp is the Expires of old (0 when the caller does not say). When it
-- equals exp, as when a fixed or sliding window counts on within its
-- window, the key's TTL, set by the write that made that expiry, already
-- lasts until exp or later, and SET ... KEEPTTL (Redis 6.0 or later)
-- leaves it: that costs Redis about 3 µs less than PX, which updates the
-- expires table (lua-loop.sh, 2026-11-30). Only while exp is at least
-- MIN_TTL_MS away, though, so that after any write a key lives at least
-- MIN_TTL_MS more, as PX guarantees (see MIN_TTL_MS for why). And the
-- callers pass old_exp only for a request decided at the server's time
-- (TIME), the clock the TTL runs on: a request's own time (Request.Now,
-- ClientTime, a test's fake clock) need not move with it, and there a
-- write refreshes the TTL with PX, as before.
local function save_state(key, fields, old, s, exp, now, old_exp)
  local f1, f2, f3 = fields[1], fields[2], fields[3]
  local a, b, c = s[f1], 0, 0
  if f2 then
    b = s[f2]
  end
  local n = #fields
  if f3 then
    c = s[f3] or 0
    if c == 0 and fields.short then
      n = fields.short
    end
  end
  if old[f1] == a and (not f2 or old[f2] == b) and (not f3 or old[f3] == c) then
    return
  end
  if exp > 0 and exp == old_exp and exp - now >= MIN_TTL_MS * 1000 then
    call('SET', key, format(STATE_FORMAT[n], a, b, c), 'KEEPTTL')
  elseif exp > 0 then
    call('SET', key, format(STATE_FORMAT[n], a, b, c), 'PX', ttl_ms(exp, now))
  else
    call('DEL', key)
  end
end
