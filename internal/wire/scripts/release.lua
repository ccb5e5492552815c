-- release.lua: drop holds of one or more locks from lock keys that this
-- master serves; one call serves several locks (UnlockEach, a give-back).
--
-- KEYS      none; or, on a call that follows a redirection, one of its lock
--           keys, for the server to check where their slot is
-- ARGV[1..] per lock: its owner id, escaped (see layout.lua), its hold
--           field ("h:" .. hold id), how long a cancel mark lives in
--           milliseconds, the number m of cancel marks to set, the number n
--           of its lock keys, the number c of its counted keys whose units
--           it consumes, then the m marks, the n lock keys, and c pairs of a
--           lock key (among the n) and its capacity key
--
-- A cancel mark tells an acquire of this hold that is still in flight (its
-- outcome was unknown to the caller, who gave up) that it must not take
-- anything: it lives on its own for as long as the lock says.
--
-- Hold ids are random and written only by acquire.lua for the key's owner (or
-- by a release, as a grant to a waiting hold), so a key carrying the hold
-- belongs to the hold. Holds whose lease ended are dropped too; a key
-- left with no live hold is handed to the first waiter in its queue (see
-- layout.lua), or deleted. Otherwise the key expires with its longest live
-- hold. The hold also leaves the queue of a key it waits for; when it was a
-- writer's place on a key held shared, the readers behind it are told.
-- Units let go of a counted key with waiters are announced ("released").
-- A consumed key's live hold takes its units from the key's capacity as it
-- goes: sent again, the release finds the hold gone and consumes nothing
-- more, and a hold whose lease ended consumes nothing. A consumed key found
-- without a live hold of the lock (gone, or held by others only) is listed
-- among those another owner holds: nothing of it was sold.
--
-- Returns 0 when every key was released (or found gone), else {taken, away,
-- taken, away, ...}: per lock in order, the keys, among those without its
-- hold, that another owner holds (the lock on them was lost), and the keys
-- and cancel marks this master does not serve (moved, or in migration),
-- left as they were (a consumed key too when its capacity key is not
-- served here). A key without the hold that is gone, still the
-- owner's, or granted to waiters that have not renewed it yet says nothing: a
-- release run twice (a client retrying a pipeline) finds its own work done.
local now

-- sell takes units from the capacity in capkey, and reports whether that
-- is away instead. A capacity never expires, so one missing here lives
-- elsewhere: a release sent on to a master importing the slot (ASKING)
-- makes one afresh, below zero, and deletes it again. A capacity that was
-- there never goes below zero, as it is never below the units held of it;
-- taking the units first and looking after costs one command, where
-- looking first costs two.
local function sell(capkey, units)
  -- INCRBY, not DECRBY: the commands a locking user needs stay as they
  -- were (see docs/operators.md's ACL).
  local left = redis.pcall('INCRBY', capkey, -units)
  if layout().elsewhere(left) then
    return true
  elseif left < 0 then
    redis.call('DEL', capkey)
    return true
  end
  return false
end

-- alone_pattern is the pattern of the value of a counted key that lists
-- hold alone, nobody waiting, as a key taken afresh is: it reads the
-- hold's end, owner and units in one match, where finding the hold among
-- others takes several. A hold field that is not "h:" and letters or
-- digits gets one that matches no lock value.
local function alone_pattern(hold)
  if not string.find(hold, '^h:%w+$') then
    return '^$'
  end
  return '^%d+ %- ' .. hold .. '=(%d+)=([^=]*)=(%d+) ' .. COUNTED .. '%d+$'
end

-- Holds that leave a key in place (see leave_quickly) are written once a
-- key and call: a tick's locks let go of the keys they share in one call,
-- and a hot key's value is as long as its many holds. left: per such key,
-- its value as read (holds that leave keep their place in it), the holes
-- to write (where each entry that left starts and ends), the holds that
-- left, the units and the entries it lists after them, where its owner
-- field starts, and whether it is counted. write_left writes them.
local left = {}

-- several: the call serves more than one lock (set with the first); a
-- lone lock's holds are written out as they leave.
local several

-- write_left writes the holes and the owner field of the holds that left
-- key in place, and forgets them.
local function write_left(key)
  local l = left[key]
  left[key] = nil
  for k = 1, #l.holes, 2 do
    redis.call('SETRANGE', key, l.holes[k] - 1, commas(l.holes[k + 1] - l.holes[k] + 1))
  end
  if l.counted then
    write_at(key, l.v, l.at, ' ' .. COUNTED .. string.format('%d', l.units))
  end
end

-- leave_quickly returns what lets go of hold's live hold of owner in key,
-- of value v, and the hold's units (0 on a key held shared): a function
-- that deletes the key when the hold was its last, or else writes the hold
-- out in place (see layout.lua) with the other holds that leave it in this
-- call (left); nil when v is not a counted or shared value that split
-- reads, or the hold is not there, not owner's, not live or left already:
-- such a value is read the long way. The others' holds are not read, and
-- the key keeps its expiry, which may be this hold's end: finding the next
-- one would read them all, and the holds of one call end together, so that
-- a tick's consume read every hold once per hold.
local function leave_quickly(key, v, owner, hold, alone)
  local alone_ends, who, alone_units = string.match(v, alone)
  if alone_ends and who == owner then
    now = now or layout().now_ms()
    if tonumber(alone_ends) <= now then
      return nil
    end
    return function()
      redis.call('DEL', key)
    end, tonumber(alone_units)
  end
  local first, gap, at, listed, counted = find_hold(v, hold)
  if not first then
    return nil
  end
  local holds = gap + 3
  local last = (string.find(v, ',', first, true) or at) - 1
  local entry = string.sub(v, first, last)
  local ends, who, units
  if counted then
    ends, who, units = string.match(entry, '^[^=]*=(%d+)=([^=]*)=(%d+)$')
  else
    ends, who = string.match(entry, '^[^=]*=(%d+)=([^=]*)$')
    units = 0
  end
  now = now or layout().now_ms()
  local l = left[key]
  if not ends or who ~= owner or tonumber(ends) <= now or l and l.holds[hold] then
    return nil
  end
  units = tonumber(units)
  local others
  if l then
    l.entries = l.entries or select(2, string.gsub(string.sub(v, holds, at - 1), '[^,]+', ''))
    others = l.entries - #l.holes / 2 - 1 > 0
  else
    -- Every hold has a "=": another hold is listed when one lies outside
    -- this entry.
    local before, after = string.find(v, '=', holds, true), string.find(v, '=', last + 1, true)
    others = before < first or after and after < at
  end
  if not others then
    return function()
      left[key] = nil
      redis.call('DEL', key)
    end, units
  end
  if not several then
    return function()
      redis.call('SETRANGE', key, first - 1, commas(last - first + 1))
      if counted then
        write_at(key, v, at, ' ' .. COUNTED .. string.format('%d', listed - units))
      end
    end, units
  end
  return function()
    l = l or {v = v, at = at, counted = counted, units = listed, holes = {}, holds = {}}
    left[key] = l
    l.holes[#l.holes + 1], l.holes[#l.holes + 2] = first, last
    l.holds[hold], l.units = true, l.units - units
  end, units
end
local locks = 0
local i = 1
while i <= #ARGV do
  local owner, hold, remember = ARGV[i], ARGV[i + 1], ARGV[i + 2]
  local m, n, c = tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4]), tonumber(ARGV[i + 5])
  locks = locks + 1
  local first = i + 6
  several = several or first + m + n + 2 * c <= #ARGV
  -- consumed: the capacity key of each key whose units are consumed.
  local consumed
  for j = first + m + n, first + m + n + 2 * c - 1, 2 do
    consumed = consumed or {}
    consumed[ARGV[j]] = ARGV[j + 1]
  end
  for j = first, first + m - 1 do
    -- A mark whose slot is not served here is sent on to where it is, as a
    -- key would be: an acquire buffered there must find it.
    if layout().elsewhere(redis.pcall('SET', ARGV[j], '1', 'PX', remember)) then
      note(locks, 2, ARGV[j])
    end
  end
  -- The usual value: "<token>" then this, the key as an acquire took it
  -- afresh for this hold, nobody waiting. A value ending so is that one,
  -- since only the token comes before its last three fields; its tail is
  -- compared, not matched with a pattern, which costs more than the rest
  -- of the release.
  local fresh = ' - ' .. hold .. '= ' .. owner
  -- counted_alone: the pattern of the value of a counted key taken afresh
  -- for this hold, nobody waiting (see leave_quickly), made on first use.
  local counted_alone
  for j = first + m, first + m + n - 1 do
    local key = ARGV[j]
    -- Read before writing: in a slot being migrated a key this script
    -- deleted is no longer local, and writing it again would fail half-way.
    -- A key that holds left in place in this call is read as it was.
    local v = left[key] and left[key].v or redis.pcall('GET', key)
    local capkey = consumed and consumed[key]
    local text = type(v) == 'string'
    local alone = text and string.sub(v, -#fresh) == fresh
    local leave, units
    if text and not alone then
      counted_alone = counted_alone or alone_pattern(hold)
      leave, units = leave_quickly(key, v, owner, hold, counted_alone)
    end
    if alone then
      redis.call('DEL', key)
    elseif leave and capkey and units > 0 and sell(capkey, units) then
      note(locks, 2, key)
    elseif leave then
      leave()
    elseif not v and capkey then
      note(locks, 1, key) -- gone: nothing of it is sold
    elseif v then
      local L = layout()
      if left[key] then
        -- Read the long way, as the call left it.
        write_left(key)
        v = redis.pcall('GET', key)
      end
      if type(v) == 'table' then
        v = L.get(key) -- an error: moved (nil), not a string (false), or raised
      end
      if v == nil then
        note(locks, 2, key)
      elseif v then
        now = now or L.now_ms()
        local s = L.parse(v, key, now)
        local live = s and s.holds[hold] and s.holds[hold] > now
        units = live and s.units and s.units[hold] or 0
        if capkey and units > 0 and sell(capkey, units) then
          note(locks, 2, key)
        elseif s then
          -- A key to sell without a live hold: nothing of it is sold.
          local unsold = capkey and not live
          if unsold then
            note(locks, 1, key)
          end
          local mine = s.holds[hold] ~= nil
          local queued = L.leave(s, hold)
          if mine or queued then
            s.holds[hold] = nil
            L.rewrite(key, s, now, units > 0)
            if queued and not queued.shared and s.owner == SHARED then
              -- Readers that waited behind this writer may join now.
              L.wake(key, s, now)
            end
          end
          -- Only grants left: the key was handed on by a release, maybe
          -- this one run before.
          local granted = true
          for id in pairs(s.holds) do
            granted = granted and s.granted[id] or false
          end
          if not unsold and not mine and L.live(s, now) > 0 and not L.holder(s, owner) and not granted then
            note(locks, 1, key)
          end
        end
      end
    end
  end
  i = first + m + n + 2 * c
end
for key in pairs(left) do
  write_left(key)
end
return keylists(locks)
