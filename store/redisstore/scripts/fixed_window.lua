-- fixed_window.lua decides one request of a fixed window counter. It
-- mirrors algorithm.FixedWindow.Step (fixedwindow.go) line for line, with
-- the same names.
--
-- KEYS[1]  the subject's key under the limit (Store.Key), which holds the
--          state of a version before this layout (layout 1: a string
--          "<start>:<count>", or "<start>:<count>:<next>" for a calendar
--          window), and is only read, during a rolling upgrade (see
--          fixed_window_seed). The state is in keys named after it (layout
--          2): an aligned or calendar window counts in a plain integer per
--          window, the field <window start in µs> of the hash KEYS[1] ..
--          ':w' (fixed_window_key), with a TTL past the window's end; a
--          first-hit window (flags 1) keeps the string "<start>:<count>"
--          (FixedWindow.Start, .Count) at KEYS[1] .. ':f', with a TTL until
--          FixedWindow.Expires (at least MIN_TTL_MS), absent for the zero
--          state (load_state in state.lua).
-- ARGV     one request, as parse_request in common.lua reads it: now_us,
--          limit, period, cost, burst (0), flags (first_hit 1,
--          count_rejected 2, calendar 8), id ("", or a calendar's
--          windows).
-- Reply    {allowed 0/1, limit, remaining, reset_after_us, retry_after_us
--          (-1 never), now_us}.
-- Mirrors  algorithm.FixedWindow.Step and .Expires (algorithm/fixedwindow.go)

local FIXED_WINDOW_FIELDS = {'start', 'count', 'next', short = 2}

-- fixed_window_end is FixedWindow.end: where the state's window ends.
local function fixed_window_end(p, s)
  if p.calendar then
    return s.next
  end
  return s.start + p.period
end

-- fixed_window_step is FixedWindow.Step.
local function fixed_window_step(p, s, now, cost)
  local start, count = s.start, s.count
  local stop = fixed_window_end(p, s)
  if count <= 0 or now >= stop then
    count = 0
    if p.calendar then
      start, stop = calendar_window(p, now)
    elseif p.first_hit then
      start, stop = now, now + p.period
    else
      start = now - mod(now, p.period)
      stop = start + p.period
    end
  end
  local allowed = count + cost <= p.limit
  if allowed then
    count = count + cost
  elseif p.count_rejected then
    count = min(count + cost, p.limit + 1)
  end
  local d = decision(allowed, p.limit, max(0, p.limit - count))
  local next_start = 0 -- 0 but for a calendar window's count
  if count > 0 then
    d.reset_after = stop - now
    if p.calendar then
      next_start = stop
    end
  else
    start = 0
  end
  if allowed then
  elseif cost > p.limit then
    d.retry_after = NEVER
  else
    d.retry_after = stop - now
  end
  return {start = start, count = count, next = next_start}, d
end

-- fixed_window_expires is FixedWindow.Expires.
local function fixed_window_expires(p, s)
  if s.count <= 0 then
    return 0
  end
  return fixed_window_end(p, s)
end

-- Layout 2: the counters of an aligned (or calendar) window. A window is
-- live exactly while the clock is in it, so a counter needs no start, and
-- a decision is one HINCRBY: the state {start, count, next} of
-- FixedWindow is {the window holding now, its counter, the window's end
-- (calendar)}. The counters of a key are the fields of one hash,
-- KEYS[1] .. ':w' (fixed_window_key), one field per window, named by the
-- window's start in µs: a Reset deletes one key whatever the clock of the
-- requests was. A field made for a new window removes those of ended
-- windows, so a hash holds the counter of the window of the latest
-- request, and for a moment the one before. As FixedWindow.Step, whose
-- one state stays in the later live window when the clock goes backwards,
-- a request whose window has no counter counts in a later window's, if
-- there is one (fixed_window_later).

-- FIXED_WINDOW_MARGIN_MS is how long the counters outlive their window:
-- Redis measures a TTL from the start of the script, which can be before
-- the TIME a window's end was computed from, and a counter gone before its
-- window ends would open the window again.
local FIXED_WINDOW_MARGIN_MS = 1000

-- fixed_window_bounds is the window that holds now: start and end.
local function fixed_window_bounds(p, now)
  if p.calendar then
    return calendar_window(p, now)
  end
  local start = now - mod(now, p.period)
  return start, start + p.period
end

-- fixed_window_key is the hash of the counters of key.
local function fixed_window_key(key)
  return key .. ':w'
end

-- fixed_window_read reads the counter of field in the hash wkey: nil when
-- absent; a value that is not a count is an error (a foreign key), raised
-- before any write.
local function fixed_window_read(wkey, field)
  local v = call('HGET', wkey, field)
  if not v then
    return nil
  end
  if #v > 16 or not match(v, '^%d+$') then
    fail('state', 'the key ' .. wkey .. ' holds ' .. format('%q', string.sub(v, 1, 64)) .. ' at ' .. field .. ', not a count')
  end
  return v + 0
end

-- fixed_window_made follows the making of the counter of the window
-- start..stop in the hash wkey, at now: the hash lives until the window's
-- end (and FIXED_WINDOW_MARGIN_MS), and loses the counters of windows
-- before it, which have ended. (A later window's counter, of a clock that
-- went backwards, stays, and so does its longer TTL.)
local function fixed_window_made(wkey, start, stop, now, hlen)
  local ttl = ttl_ms(stop, now) + FIXED_WINDOW_MARGIN_MS
  if (hlen or call('HLEN', wkey)) == 1 then
    call('PEXPIRE', wkey, ttl)
    return
  end
  for _, f in ipairs(call('HKEYS', wkey)) do
    local w = tonumber(f)
    if w and w < start then
      call('HDEL', wkey, f)
    end
  end
  call('PEXPIRE', wkey, ttl, 'GT')
end

-- fixed_window_later is the window after start whose counter is in the
-- hash wkey, the latest, and its end: the window a request at a time
-- before it counts in, as FixedWindow.Step stays in the later live window
-- when the clock goes backwards (a counter is never 0, and one of an
-- ended window is gone once a later one is made). nil if there is none
-- (or, for a calendar window, if its end is not among p.windows).
local function fixed_window_later(wkey, p, start)
  local later = nil
  for _, f in ipairs(call('HKEYS', wkey)) do
    local w = tonumber(f)
    if w and w > start and (not later or w > later) then
      later = w
    end
  end
  if not later then
    return nil
  end
  if not p.calendar then
    return later, later + p.period
  end
  for i = 1, 3 do
    if p.windows[i] == later then
      return later, p.windows[i + 1]
    end
  end
  return nil
end

-- fixed_window_seed is the count that the layout-1 state at key (written
-- by a version before layout 2, during a rolling upgrade) holds for the
-- window start..stop at now, else 0. It only reads: a new counter starts
-- from it, so that what older instances admitted in the window before
-- the counter existed is counted (docs/redis.md, "Upgrading"). (Layout 1
-- kept an aligned and a first-hit window of one period in one state, as
-- the first-hit window's state seeded from it does.)
local function fixed_window_seed(key, p, start, stop, now)
  local s = load_state(key, FIXED_WINDOW_FIELDS)
  if s.count > 0 and s.start == start and now < fixed_window_end(p, s) and (not p.calendar or s.next == stop) then
    return s.count
  end
  return 0
end

-- fixed_window_first_load reads the state of a first-hit window of key:
-- the string at key .. ':f', or when there is none, the layout-1 state at
-- key (a rolling upgrade's, only read; marked seeded, so that a save does
-- not keep the TTL of a key it makes).
local function fixed_window_first_load(key)
  local s = load_state(key .. ':f', FIXED_WINDOW_FIELDS)
  if s.count > 0 then
    return s
  end
  s = load_state(key, FIXED_WINDOW_FIELDS)
  s.seeded = true
  return s
end

-- fixed_window_load reads the state of key at now, as load_state reads a
-- layout-1 state: a first-hit window's string, or the counter of the
-- window that holds now (seeded as fixed_window_seed says when absent).
-- A counter's state also carries its hash and field (wkey, field), the
-- window's start and end (wstart, stop) and whether the counter exists
-- (stored), for fixed_window_save.
local function fixed_window_load(key, p, now)
  if p.first_hit then
    return fixed_window_first_load(key)
  end
  local start, stop = fixed_window_bounds(p, now)
  local wkey, field = fixed_window_key(key), format('%d', start)
  local count = fixed_window_read(wkey, field)
  local stored = count ~= nil
  if not stored then
    local later, later_stop = fixed_window_later(wkey, p, start)
    if later then
      start, stop, field = later, later_stop, format('%d', later)
      count, stored = fixed_window_read(wkey, field), true
    else
      count = fixed_window_seed(key, p, start, stop, now)
    end
  end
  local s = {start = 0, count = 0, next = 0, wkey = wkey, field = field, wstart = start, stop = stop, stored = stored}
  if count > 0 then
    s.start, s.count = start, count
    if p.calendar then
      s.next = stop
    end
  end
  return s
end

-- fixed_window_save stores s, a step at now of old (fixed_window_load at
-- the same now), as save_state does: a first-hit window's string (old_exp
-- as save_state takes it), or the counter of old's window: unchanged,
-- deleted at 0, made when new, else moved by the difference.
local function fixed_window_save(key, p, old, s, now, old_exp)
  if p.first_hit then
    if old.seeded then
      old_exp = 0
    end
    save_state(key .. ':f', FIXED_WINDOW_FIELDS, old, s, fixed_window_expires(p, s), now, old_exp or 0)
    return
  end
  if s.count == old.count then
    return
  end
  if s.count <= 0 then
    if old.stored then
      call('HDEL', old.wkey, old.field)
    end
  elseif old.stored then
    call('HINCRBY', old.wkey, old.field, s.count - old.count)
  else
    call('HSET', old.wkey, old.field, s.count)
    fixed_window_made(old.wkey, old.wstart, old.stop, now)
  end
end

-- fixed_window_count decides a request of an aligned or calendar window
-- (layout 2) as fixed_window_step would on fixed_window_load's state, and
-- stores it, in as few commands as the counter allows: a request counts
-- with one HINCRBY (and fixed_window_made when that made the counter); a
-- denial that does not count (count_rejected unset) takes its cost back,
-- and one that counts caps the counter at limit+1, as Step does. A cost
-- of 0 only reads, but where it caps the counter. start, stop and field
-- are the window that holds now and its field, if the caller knows them
-- (multi.lua, for the requests of one time).
local function fixed_window_count(key, p, now, cost, start, stop, field)
  local limit = p.limit
  if not start then
    start, stop = fixed_window_bounds(p, now)
    field = format('%d', start)
  end
  local wkey = key .. ':w'
  local count, allowed
  if cost == 0 then
    local stored = fixed_window_read(wkey, field)
    if not stored then
      local later, later_stop = fixed_window_later(wkey, p, start)
      if later then
        return fixed_window_count(key, p, now, cost, later, later_stop, format('%d', later))
      end
    end
    count = stored or fixed_window_seed(key, p, start, stop, now)
    allowed = count <= limit
    if not allowed and p.count_rejected and count > limit + 1 then
      -- A limit of the same period with a higher limit counted past this
      -- one's limit+1: Step brings the count down to it.
      if stored then
        call('HINCRBY', wkey, field, limit + 1 - count)
      else
        call('HSET', wkey, field, limit + 1)
        fixed_window_made(wkey, start, stop, now)
      end
      count = limit + 1
    end
  else
    local n = call('HINCRBY', wkey, field, cost)
    if n == cost then
      -- This HINCRBY made the counter (no counter is ever left at 0). In a
      -- hash it made too (no TTL yet), the counter starts from the
      -- layout-1 state; in one with other windows' counters, a later
      -- window's takes the request instead, and those of ended windows go.
      local ttl = ttl_ms(stop, now) + FIXED_WINDOW_MARGIN_MS
      if call('PEXPIRE', wkey, ttl, 'NX') == 1 then
        local ok, seed = pcall(fixed_window_seed, key, p, start, stop, now)
        if not ok then
          -- A foreign layout-1 key: fail with its error, having changed
          -- nothing.
          call('DEL', wkey)
          fixed_window_seed(key, p, start, stop, now)
        end
        if seed > 0 then
          n = call('HINCRBY', wkey, field, seed)
        end
      else
        local later, later_stop = fixed_window_later(wkey, p, start)
        if later then
          call('HDEL', wkey, field)
          return fixed_window_count(key, p, now, cost, later, later_stop, format('%d', later))
        end
        fixed_window_made(wkey, start, stop, now, 2)
      end
    end
    count = n
    allowed = n <= limit
    if allowed then
    elseif p.count_rejected then
      if n > limit + 1 then
        count = limit + 1
        call('HINCRBY', wkey, field, count - n)
      end
    else
      count = n - cost
      if count == 0 then
        call('HDEL', wkey, field)
      else
        call('HINCRBY', wkey, field, -cost)
      end
    end
  end
  local d = decision(allowed, limit, max(0, limit - count))
  if count > 0 then
    d.reset_after = stop - now
  end
  if allowed then
  elseif cost > limit then
    d.retry_after = NEVER
  else
    d.retry_after = stop - now
  end
  return d
end

-- fixed_window_apply decides r at now and stores the state, as memstore
-- does: on the counter of the window (fixed_window_count), or, for a
-- first-hit window, by loading, stepping and storing its string (at key ..
-- ':f').
local function fixed_window_apply(key, p, r, now)
  if not p.first_hit then
    return fixed_window_count(key, p, now, r.cost)
  end
  local old = fixed_window_first_load(key)
  local s, d = fixed_window_step(p, old, now, r.cost)
  local old_exp = 0
  if r.now < 0 then -- the server's time: see save_state
    old_exp = fixed_window_expires(p, old)
  end
  fixed_window_save(key, p, old, s, now, old_exp)
  return d
end

-- main
return single('fixed_window', fixed_window_apply, KEYS, ARGV)
