-- acquire.lua: take, for one hold of an owner, the lock keys of a run of
-- consecutive slots (in the global order) that this master serves.
--
-- KEYS[1]   the first slot's fencing counter, which routes the call
-- ARGV[1]   owner id
-- ARGV[2]   hold field, "h:" .. hold id
-- ARGV[3]   lease in milliseconds
-- ARGV[4]   "try": every key of the call or none; "wait": the slots in
--           order up to the first one with a key another owner holds, which
--           are kept, and the keys of that slot held by others are marked
--           as waited for
-- ARGV[5]   this hold's cancel mark (in the first slot; see release.lua)
-- ARGV[6..] per slot: its fencing counter, the number n of its lock keys,
--           then those n lock keys
--
-- A key taken afresh gets the next token of its slot's counter; a key the
-- owner already holds keeps its token, gains the hold, and its lease is never
-- shortened. A call that cannot finish changes nothing: what it wrote is
-- undone.
--
-- Returns {1, {token, ...}}: every key is held, one token per key in order.
-- Returns {0, held, wait, {key, ...}, {token, ...}}: a slot has keys held by
-- another owner (listed: those of that slot in "wait", of every slot in
-- "try"); held is the number of slots now held, before it ("wait"; 0 in
-- "try"), with their tokens; wait is the longest remaining lease of those
-- keys, in milliseconds.
-- Returns {-1}: this hold was cancelled by a rollback that overtook this
-- call; nothing was changed.
-- Returns {-2, slot}: slot number slot (from 0) is not served here, or in
-- migration; nothing was changed.
local owner, hold, lease, mode, mark = ARGV[1], ARGV[2], tonumber(ARGV[3]), ARGV[4], ARGV[5]

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
local function undo(created_from, joined_from)
  for i = #joined, joined_from, -1 do
    local j = joined[i]
    redis.call('SET', j[1], j[2], 'PXAT', j[3])
    joined[i] = nil
  end
  for i = #created, created_from, -1 do
    redis.call('DEL', created[i])
    created[i] = nil
  end
end

-- Every key taken afresh by this call gets the same value but for its token.
local ends_ms = string.format('%d', ends)
local value = fresh(hold, ends_ms, owner)

-- take tries key for the hold; it returns the key's token, or false and the
-- remaining lease of another owner's key, or nil and the error of a key not
-- served here (moved) or of any other failure.
local function take(key, token)
  local r = redis.pcall('SET', key, value(token), 'NX', 'PXAT', ends_ms)
  if failed(r) then
    return nil, r
  end
  if r then
    created[#created + 1] = key
    return token
  end
  local v = redis.pcall('GET', key)
  local s = parse(v)
  if not s or s.owner ~= owner then
    return false, redis.call('PTTL', key)
  end
  local latest = live(s, now)
  s.holds[hold] = ends
  redis.call('SET', key, format(s), 'PXAT', math.max(latest, ends))
  joined[#joined + 1] = {key, v, math.max(latest, now + 1)}
  return s.token
end

-- mark flags another owner's key as waited for, so that its release is
-- announced.
local function mark_waited(key)
  local s = parse(redis.pcall('GET', key))
  if s and not s.waited then
    s.waited = true
    redis.call('SET', key, format(s), 'KEEPTTL')
  end
end

local tokens, conflicts = {}, {}
local wait, held, slot = 0, 0, 0
-- clear: no key of the call is held by another owner so far.
local clear = true
local i = 6
while i <= #ARGV do
  local fence, n = ARGV[i], tonumber(ARGV[i + 1])
  local first = i + 2
  local base = 0
  if clear then
    -- A token per key, some of them unused (keys joined or refused): gaps
    -- do not matter, a key's tokens only have to grow.
    base = redis.pcall('INCRBY', fence, n)
    if failed(base) then
      undo(1, 1)
      if moved(base) then
        return {-2, slot}
      end
      return base
    end
    base = base - n
  end
  local created_before, joined_before, slot_tokens = #created, #joined, #tokens
  local refused = false
  for j = 0, n - 1 do
    local key = ARGV[first + j]
    local token, left
    if clear then
      token, left = take(key, base + j + 1)
    else
      -- Refused already ("try"): only look for the other conflicts.
      local s = parse(redis.pcall('GET', key))
      if s and s.owner ~= owner then
        token, left = false, redis.call('PTTL', key)
      else
        token = 0
      end
    end
    if token == nil then
      undo(1, 1)
      if moved(left) then
        return {-2, slot}
      end
      return left
    elseif token == false then
      refused, clear = true, false
      conflicts[#conflicts + 1] = key
      wait = math.max(wait, left)
    elseif clear then
      tokens[#tokens + 1] = token
    end
  end
  if refused then
    if mode == 'wait' then
      undo(created_before + 1, joined_before + 1)
      for t = #tokens, slot_tokens + 1, -1 do
        tokens[t] = nil
      end
      for _, key in ipairs(conflicts) do
        mark_waited(key)
      end
      return {0, held, wait, conflicts, tokens}
    end
    undo(1, 1)
  elseif clear then
    held = held + 1
  end
  slot = slot + 1
  i = first + n
end
if not clear then
  return {0, 0, wait, conflicts, {}}
end
return {1, tokens}
