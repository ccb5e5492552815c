-- acquire.lua: take, for one hold of an owner, the lock keys of a run of
-- consecutive slots (in the global order) that this master serves.
--
-- KEYS      none; or, on a call retried after its slot was found elsewhere,
--           the slot's fencing counter, for the server to check where the
--           slot is
-- ARGV[1]   owner id, escaped (see layout.lua)
-- ARGV[2]   hold field, "h:" .. hold id
-- ARGV[3]   lease in milliseconds
-- ARGV[4]   "try": every key of the call or none; "wait": the keys in order
--           up to the first one another owner holds, which are kept, and a
--           place in that key's queue; "poll": as "wait", for a waiter that
--           polls instead of listening for its hand-off message
-- ARGV[5]   this hold's cancel mark (in the first slot; see release.lua)
-- ARGV[6]   how long a place in a queue lasts unless renewed, in milliseconds
-- ARGV[7..] per slot: its fencing counter, the number n of its lock keys,
--           their modes ("" when every key is asked for exclusively, else
--           one letter per key: "s" shared, "x" exclusive), then those n
--           lock keys
--
-- A key taken afresh gets the next token of its slot's counter, and so does
-- a key handed to this hold by a release (its claim); a key the owner
-- already holds keeps its token, gains the hold, and its lease is never
-- shortened. A key asked for shared is held by any number of owners at
-- once, who share its token; a reader joins unless another owner holds it
-- exclusively or a writer waits for it ahead of the reader, and an owner
-- that holds a key shared always joins it again. A key the owner holds
-- exclusively is joined in either mode and stays exclusive. A waiting call
-- that asks again keeps its place in the queue, renewed. A call that cannot
-- finish changes nothing: what it wrote is undone.
--
-- Returns {1, {token, ...}}: every key is held, one token per key in order.
-- Returns {0, held, wait, {key, ...}, {token, ...}, part}: keys are held by
-- another owner. "try": all of them are listed, and nothing is held (held
-- and part are 0). "wait", "poll": the first of them is listed and this hold has a
-- place in its queue; the slots before its slot (held of them) and the first
-- part keys of its slot are held, with their tokens in order. wait is the
-- longest remaining lease of the keys listed, in milliseconds.
-- Returns {-1}: this hold was cancelled by a rollback that overtook this
-- call; nothing was changed.
-- Returns {-2, slot}: slot number slot (from 0) is not served here, or in
-- migration; nothing was changed.
-- Returns {-3, key}: the owner holds key shared and asked for it
-- exclusively; nothing was changed.
local owner, hold, lease, mode, mark = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]
local waiting = mode ~= 'try'
local place = tonumber(ARGV[6])

local cancelled = redis.pcall('EXISTS', mark)
if moved(cancelled) then
  return {-2, 0}
elseif failed(cancelled) then
  return cancelled
elseif cancelled == 1 then
  return {-1}
end
local now = now_ms()
local ends = now + lease

-- What this call wrote, to undo: the keys it created, and the keys it
-- joined with their old value and expiry.
local created, joined = {}, {}
local function undo()
  for i = #joined, 1, -1 do
    local j = joined[i]
    redis.call('SET', j[1], j[2], 'PXAT', j[3])
  end
  for i = #created, 1, -1 do
    redis.call('DEL', created[i])
  end
end

-- Every key taken afresh by this call gets the same value but for its token
-- (and its mode: the shared one is made when a key asks for it).
local ends_ms = string.format('%d', ends)
local value, value_shared = fresh(hold, ends_ms, owner, false), nil

-- writer_ahead reports whether a live waiter for key state s asks for it
-- exclusively ahead of this hold's place (anywhere, with no place).
local function writer_ahead(s)
  for _, e in ipairs(s.queue) do
    if e.hold == hold then
      return false
    end
    if not e.shared and e.ends > now then
      return true
    end
  end
  return false
end

-- judge says what the hold may do with a key of state s (live holds only)
-- that it asks for, shared or not: "claim" it (handed to the hold), "join"
-- it (its owner holds it, or readers do and no writer waits ahead),
-- "refuse" (another owner holds it), or "upgrade": the owner holds it shared
-- and asks for it exclusively, which is refused outright, as two owners
-- doing so would wait for each other.
local function judge(s, shared)
  if s.holds[hold] and (s.owner == '' or (s.owners and s.owners[hold] == '')) then
    return 'claim'
  elseif s.owner == owner then
    return 'join'
  elseif s.owner ~= SHARED then
    return 'refuse'
  end
  local mine = holder(s, owner)
  if not shared then
    return mine and 'upgrade' or 'refuse'
  elseif mine or not writer_ahead(s) then
    return 'join'
  end
  return 'refuse'
end

-- take tries key for the hold, shared or not; it returns the key's token, or
-- false, the remaining lease and the state of another owner's key, or nil
-- and the error of a key not served here (moved) or of any other failure,
-- or nil and 'upgrade'.
local function take(key, token, shared)
  local make = value
  if shared then
    value_shared = value_shared or fresh(hold, ends_ms, owner, true)
    make = value_shared
  end
  local r = redis.pcall('SET', key, make(token), 'NX', 'PXAT', ends_ms)
  if failed(r) then
    return nil, r
  end
  if r then
    created[#created + 1] = key
    return token
  end
  local v = redis.pcall('GET', key)
  local s = parse(v)
  if not s then
    return false, redis.call('PTTL', key)
  end
  local latest = live(s, now)
  if latest == 0 then
    -- Every hold has ended, the key not yet expired (it expires with its
    -- longest hold, to the millisecond): it is free, and its queue goes
    -- with it, as when it expires.
    joined[#joined + 1] = {key, v, now + 1}
    redis.call('SET', key, make(token), 'PXAT', ends_ms)
    return token
  end
  local verdict = judge(s, shared)
  if verdict == 'upgrade' then
    return nil, verdict
  elseif verdict == 'refuse' then
    return false, redis.call('PTTL', key), s
  end
  joined[#joined + 1] = {key, v, latest}
  if verdict == 'claim' then
    -- Handed to this hold by a release: its claim becomes its hold, with
    -- the hold's own lease.
    s.holds[hold] = nil
    if not s.owners then
      -- A new ownership.
      s.token, s.owner = token, owner
    end
  end
  if s.owners and s.token == 0 then
    -- Handed to readers, none of which took it yet: the first reader to
    -- take it, by its claim or joining, gives the shared ownership its
    -- token.
    s.token = token
  end
  -- A hold taken again (a retried call) keeps the later of its two ends.
  s.holds[hold] = math.max(s.holds[hold] or 0, ends)
  if s.owners then
    s.owners[hold] = owner
  end
  leave(s, hold)
  lapse(key, s, now)
  redis.call('SET', key, format(s), 'PXAT', live(s, now))
  return s.token
end

-- queue gives the hold a place in the queue of key (state s), asking for it
-- shared or not, or renews the one it has.
local function queue(key, s, shared)
  local mine
  for _, e in ipairs(s.queue) do
    if e.hold == hold then
      mine = e
    end
  end
  if not mine then
    mine = {hold = hold, shared = shared}
    s.queue[#s.queue + 1] = mine
  end
  mine.polls = mode == 'poll'
  mine.ends = now + place
  lapse(key, s, now)
  redis.call('SET', key, format(s), 'KEEPTTL')
end

local tokens, conflicts = {}, {}
local wait, held, slot = 0, 0, 0
-- clear: no key of the call is held by another owner so far.
local clear = true
local i = 7
while i <= #ARGV do
  local fence, n, modes = ARGV[i], tonumber(ARGV[i + 1]), ARGV[i + 2]
  local first = i + 3
  local base = 0
  if clear then
    -- A token per key, some of them unused (keys joined or refused): gaps
    -- do not matter, a key's tokens only have to grow.
    base = redis.pcall('INCRBY', fence, n)
    if failed(base) then
      undo()
      if moved(base) then
        return {-2, slot}
      end
      return base
    end
    base = base - n
  end
  for j = 0, n - 1 do
    local key = ARGV[first + j]
    local shared = modes ~= '' and string.byte(modes, j + 1) == 115
    local token, left, s
    if clear then
      token, left, s = take(key, base + j + 1, shared)
    else
      -- Refused already ("try"): only look for the other conflicts.
      local other = parse(redis.pcall('GET', key))
      local verdict = 'join'
      if other and live(other, now) > 0 then
        verdict = judge(other, shared)
      end
      if verdict == 'upgrade' then
        token, left = nil, verdict
      elseif verdict == 'refuse' then
        token, left = false, redis.call('PTTL', key)
      else
        token = 0
      end
    end
    if token == nil then
      undo()
      if left == 'upgrade' then
        return {-3, key}
      elseif moved(left) then
        return {-2, slot}
      end
      return left
    elseif token == false then
      clear = false
      conflicts[#conflicts + 1] = key
      wait = math.max(wait, left)
      if waiting then
        if s then
          queue(key, s, shared)
        end
        return {0, held, wait, conflicts, tokens, j}
      end
    elseif clear then
      tokens[#tokens + 1] = token
    end
  end
  if clear then
    held = held + 1
  end
  slot = slot + 1
  i = first + n
end
if not clear then
  undo()
  return {0, 0, wait, conflicts, {}, 0}
end
return {1, tokens}
