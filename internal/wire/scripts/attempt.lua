-- attempt.lua: one hold's attempt at the lock keys of a run of consecutive
-- slots (in the global order) that this master serves; acquire.lua makes
-- one, tryeach.lua one per basket. It checks no cancel mark: its caller
-- does, with cancelled.
--
-- attempt(owner, hold, lease, mode, place, i, last): owner id (escaped, see
-- layout.lua), hold field ("h:" .. hold id), lease in milliseconds, mode
-- ("try": every key or none; "first": as "try", but it stops at the first
-- key another owner holds and names only that one, with no holders;
-- "fresh": as "first", for an owner made for this call, which holds no
-- key, so that a key found there asked for exclusively is refused unread;
-- "wait": the keys in order up to the first one another owner holds,
-- which are kept, and a place in that key's queue;
-- "poll": as "wait", for a waiter that polls instead of listening for its
-- hand-off message; with an "s" after it when some key is asked for
-- shared), how long a place in a queue lasts unless renewed (ms), and the
-- range ARGV[i..last] of its slots: per slot its fencing counter, the number
-- n of its lock keys, with "s" after the mode their modes (one letter per
-- key: "s" shared, "x" exclusive, "n" counted), then those n lock keys, then
-- per counted key in order the units asked for and its capacity key.
--
-- The keys of a slot taken afresh share the next token of its slot's
-- counter; a key the owner already holds (one granted to this hold by a
-- release too) keeps its token, gains the hold, and its lease is never
-- shortened. A key asked for shared is held by any number of owners at
-- once, who share its token; a reader joins unless another owner holds it
-- exclusively or a writer waits for it ahead of the reader, and an owner
-- that holds a key shared always joins it again. A key the owner holds
-- exclusively is joined in either mode and stays exclusive. A waiting call
-- that asks again keeps its place in the queue, renewed. An attempt that
-- cannot finish changes nothing: what it wrote is undone.
--
-- A key asked for in units (counted) is held by any number of owners at
-- once, each hold with its units and a token of its own, while the units of
-- its live holds fit its capacity (more units than the capacity are
-- refused outright: only a capacity that grows could fit them); it is refused while another owner holds
-- it exclusively or shared, or while anyone waits for it ahead of the hold
-- (a big request at the head of the queue is not passed by small ones). An
-- owner that holds units of the key joins it again with no more units when
-- it asks for no more than it holds, and is refused outright ("upgrade")
-- when it asks for more or for the key exclusively: two owners doing so
-- would wait for each other. A counted key's holds refuse any exclusive or
-- shared request; a key held exclusively by the owner is joined in units
-- too, and stays exclusive.
--
-- Returns the reply acquire.lua describes, and, after a reply that holds
-- keys, a function that undoes what the attempt wrote; an error of a key
-- (other than one not served here) is returned as the reply, after the
-- undo.
local SHARED_BYTE = string.byte('s')
local COUNTED_BYTE = string.byte('n')

-- cancelled returns the reply of a call whose cancel mark is set ({-1}),
-- or whose mark's slot is not served here ({-2}), or the error of reading
-- it; nil when the call may go on.
local function cancelled(mark)
  local set = redis.pcall('EXISTS', mark)
  if type(set) == 'table' then
    if layout().moved(set) then
      return {-2}
    end
    return set
  elseif set == 1 then
    return {-1}
  end
  return nil
end

-- call_now is the server's time in milliseconds, read once per call.
local call_now
local function now_once()
  call_now = call_now or layout().now_ms()
  return call_now
end

-- capacity returns the capacity in capkey of a key asked for units (nil
-- for a key asked for otherwise), or nil and why the units cannot be had:
-- "none" (no capacity set), "over" (more units than the capacity), or the
-- error of reading it (moved).
local capacities
local function capacity(capkey, units)
  if not units then
    return nil
  end
  -- No script that takes units changes a capacity: read once per call.
  capacities = capacities or {}
  local c = capacities[capkey]
  if not c then
    c = redis.pcall('GET', capkey)
    if layout().failed(c) then
      return nil, c
    elseif not c then
      return nil, 'none'
    end
    c = tonumber(c)
    capacities[capkey] = c
  end
  if units > c then
    return nil, 'over'
  end
  return c
end

-- counted_made are, for the hold they were made for (counted_hold), by
-- units, its entry among a counted key's holds and what follows the token
-- in the value of a counted key it takes afresh: the same for every key of
-- the hold's call, made once, as making them costs more than taking the key.
local counted_made, counted_hold = {}, nil

-- counted_parts returns the entry of hold of owner, units for lease
-- milliseconds from the call's time, and the tail of a value with it alone.
local function counted_parts(hold, lease, owner, units)
  if counted_hold ~= hold then
    counted_made, counted_hold = {}, hold
  end
  local made = counted_made[units]
  if not made then
    local n = string.format('%d', units)
    local entry = hold .. '=' .. string.format('%d', now_once() + tonumber(lease)) .. '=' .. owner .. '=' .. n
    made = {entry, ' - ' .. entry .. ' ' .. COUNTED .. n}
    counted_made[units] = made
  end
  return made[1], made[2]
end

-- counted_value is the value of a counted key taken afresh by hold of
-- owner, units of it with token, the hold ending lease milliseconds after
-- the call's time.
local function counted_value(token, hold, lease, owner, units)
  local _, tail = counted_parts(hold, lease, owner, units)
  return string.format('%d', token) .. tail
end

-- join_quickly adds hold of owner, for lease milliseconds, to key, of
-- value v, held shared or in units (of capacity cap) by others, recording
-- it in joined to be undone, and returns the key's token after (token, for
-- units; the readers' own, shared); nil when it cannot without every hold
-- being read: somebody waits, the units do not fit beside those of every
-- hold listed, a reader's earliest end has passed, or the hold or its owner
-- of units may be there already (an owner id that reads like another field
-- only sends the call the long way). The long way would let such a hold
-- join. It is written in place (see layout.lua) unless its end is past the
-- key's expiry or the token is longer than the one it replaces.
local function join_quickly(key, v, shared, units, cap, token, owner, hold, lease, joined)
  local gap, at, n = split(v, units and COUNTED or SHARED)
  if not gap or string.find(v, hold .. '=', gap, true) then
    return nil
  end
  local now = now_once()
  local ends = now + tonumber(lease)
  local entry, field
  if units then
    if n + units > cap or string.find(v, '=' .. owner .. '=', gap, true) then
      return nil
    end
    field, entry = COUNTED .. string.format('%d', n + units), counted_parts(hold, lease, owner, units)
  elseif n <= now then
    return nil
  else
    entry = hold .. '=' .. string.format('%d', ends) .. '=' .. owner
    field, token = SHARED .. string.format('%d', math.min(n, ends)), tonumber(string.sub(v, 1, gap - 1))
  end
  local expires = layout().expiry(key)
  joined[#joined + 1] = {key, v, expires}
  local t = string.format('%d', token)
  if ends <= expires and #t == gap - 1 then
    if units then
      redis.call('SETRANGE', key, 0, t)
    end
    join_in_place(key, v, gap, at, entry, field)
  else
    -- Written whole, about once a lease, and without holes.
    redis.call('SET', key, t .. ' - ' .. compact(v, gap, at) .. ',' .. entry .. ' ' .. field,
      'PXAT', math.max(expires, ends + tonumber(lease)))
  end
  return token
end

-- batches: the joins of lines in units that tryeach.lua writes once a key
-- and call (see its batching), nil for a call that writes them at once.
local batches

-- long_way is slow, for key, which is read: its batch is written first, so
-- that it is read as the call left it. It reads no other key, and no
-- attempt batches a key it reads so: the other batches, the attempt's own
-- joins among them, stay as they are.
local function long_way(slow, key)
  if batches then
    batches.flush(key)
  end
  return slow()
end

-- take_units takes units of key (of the capacity in capkey) for hold of
-- owner, for lease milliseconds, as attempt's main loop takes exclusive
-- keys: afresh with token (recorded in created), or joining others'
-- holds as join_quickly says (recorded in joined). It returns the key's
-- token; false and the capacity when the key must be taken the long way;
-- or nil and why the units cannot be had: "none" (no capacity set), "over"
-- (more units than the capacity), or the error of reading it (moved).
local function take_units(key, token, units, capkey, owner, hold, lease, created, joined)
  local cap, why = capacity(capkey, units)
  if why then
    return nil, why
  end
  local b = batches and batches.of(key)
  if b then
    return batches.join(b, units, cap, token, owner, hold, lease, joined)
  end
  local value = counted_value(token, hold, lease, owner, units)
  local r = redis.pcall('SET', key, value, 'NX', 'PX', lease)
  if layout().failed(r) then
    return nil, r
  elseif r then
    created[#created + 1] = key
    if batches then
      batches.known[key] = value
    end
    return token
  end
  local v = redis.pcall('GET', key)
  b = batches and type(v) == 'string' and batches.of(key, v)
  if b then
    return batches.join(b, units, cap, token, owner, hold, lease, joined)
  end
  local joined_token = type(v) == 'string' and join_quickly(key, v, false, units, cap, token, owner, hold, lease, joined)
  if joined_token then
    return joined_token
  end
  return false, cap
end

local function attempt(owner, hold, lease, mode, place, i, last)
  -- some: some key is asked for shared, and each slot says which, a byte
  -- per key: SHARED_BYTE for a shared one.
  local some = string.byte(mode, -1) == SHARED_BYTE
  if some then
    mode = string.sub(mode, 1, -2)
  end
  local waiting = mode == 'wait' or mode == 'poll'
  -- quick: a "first" or "fresh" attempt, which stops at its first
  -- conflict; fresh: the owner is new, so that it holds no key.
  local fresh = mode == 'fresh'
  local quick = mode == 'first' or fresh

  -- Every key taken afresh by this call gets the same value but for its
  -- slot's token, its hold expiring with the key (see layout.lua).
  local rest = ' - ' .. hold .. '= ' .. owner

  -- created are the keys this call took afresh, to undo.
  -- joined are the keys it joined, with their old value and expiry, to undo.
  local created, joined = {}, {}

  -- slow is what a call needs beyond taking keys afresh and joining them
  -- quickly (most need none of it): how to take a key that is there
  -- already, made on first use.
  local existing
  local function slow()
    if existing then
      return existing
    end
    local L = layout()
    local now = now_once()
    local ends = now + tonumber(lease)
    -- shared_value is the value of a key taken afresh shared by this hold,
    -- with token: the hold is written without its end, for it ends with
    -- the key (SET PX its lease), as an exclusive one's is.
    local shared_rest = ' - ' .. hold .. '==' .. owner .. ' ' .. SHARED
    local function shared_value(token)
      return string.format('%d', token) .. shared_rest
    end

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

    -- anyone_ahead reports whether a live waiter for key state s is ahead of
    -- this hold's place (anywhere, with no place).
    local function anyone_ahead(s)
      for _, e in ipairs(s.queue) do
        if e.hold == hold then
          return false
        elseif e.ends > now then
          return true
        end
      end
      return false
    end

    -- judge_counted says what the hold may do with counted key state s
    -- (live holds only) that it asks for in units (cap the key's capacity),
    -- or else, shared or not alike: as judge says, or "convert" (nobody
    -- holds the key and nobody waits ahead: it is taken in the mode asked,
    -- its queue kept), and with "join" the units the hold takes.
    local function judge_counted(s, units, cap)
      if s.holds[hold] then
        return 'join', s.units[hold] or 0
      end
      local mine = L.holder(s, owner)
      if not units then
        if mine then
          return 'upgrade'
        elseif next(s.holds) == nil and not anyone_ahead(s) then
          return 'convert'
        end
        return 'refuse'
      end
      if mine then
        local own = 0
        for id, who in pairs(s.owners) do
          if who == owner and s.holds[id] then
            own = own + (s.units[id] or 0)
          end
        end
        if units <= own then
          return 'join', 0
        end
        return 'upgrade'
      elseif anyone_ahead(s) or L.held(s) + units > cap then
        return 'refuse'
      end
      return 'join', units
    end

    -- judge says what the hold may do with a key of state s (live holds
    -- only) that it asks for, shared, in units (units and capkey set) or
    -- exclusively: "join" it (its owner holds it, or readers do and no
    -- writer waits ahead), "refuse" (another owner holds it), or "upgrade":
    -- the owner holds it shared and asks for it exclusively or in units,
    -- which is refused outright, as two owners doing so would wait for each
    -- other. A counted key is judged as judge_counted says.
    local function judge(s, shared, units, cap)
      if s.owner == COUNTED then
        return judge_counted(s, units, cap)
      elseif s.owner == owner then
        return 'join'
      elseif s.owner ~= SHARED then
        return 'refuse'
      end
      local mine = L.holder(s, owner)
      if not shared or units then
        return mine and 'upgrade' or 'refuse'
      elseif mine or not writer_ahead(s) then
        return 'join'
      end
      return 'refuse'
    end

    existing = {moved = L.moved}

    -- holders names the owners with a live hold on a key of state s (nil
    -- for a value that is no lock), escaped and sorted, comma-separated.
    function existing.holders(s)
      if not s then
        return ''
      elseif s.owner ~= SHARED and s.owner ~= COUNTED then
        return s.owner
      end
      local names, seen = {}, {}
      for id, who in pairs(s.owners) do
        -- A hold whose lease ended may be gone from s.holds already (live
        -- drops them).
        local ends = s.holds[id]
        if who ~= '' and ends and ends > now and not seen[who] then
          seen[who] = true
          names[#names + 1] = who
        end
      end
      table.sort(names)
      return table.concat(names, ',')
    end

    -- take takes key, asked for shared, in units (cap its capacity, as
    -- take_units read it, which found the key there and could not join it
    -- quickly) or exclusively, for the hold, with token if it is a new
    -- ownership (every hold of units is one), as the loop below says.
    function existing.take(key, token, shared, units, cap)
      -- A key shared taken afresh, or joined quickly (take_units tried
      -- both for units).
      if shared then
        local r = redis.pcall('SET', key, shared_value(token), 'NX', 'PX', lease)
        if L.failed(r) then
          return nil, r
        elseif r then
          created[#created + 1] = key
          return token
        end
      end
      local v = redis.pcall('GET', key)
      if type(v) == 'string' and shared then
        local joined_token = join_quickly(key, v, true, nil, nil, token, owner, hold, lease, joined)
        if joined_token then
          return joined_token
        end
      end
      local s = L.parse(v, key, now)
      if not s then
        return false, redis.call('PTTL', key)
      end
      local latest = L.live(s, now)
      if latest == 0 and s.owner ~= COUNTED then
        -- Every hold has ended, the key not yet expired (it expires with
        -- its longest hold, to the millisecond): it is free, and its queue
        -- goes with it, as when it expires.
        local fresh = string.format('%d', token) .. rest
        if shared then
          fresh = shared_value(token)
        elseif units then
          fresh = counted_value(token, hold, lease, owner, units)
        end
        joined[#joined + 1] = {key, v, now + 1}
        redis.call('SET', key, fresh, 'PX', lease)
        return token
      end
      local verdict, taken = judge(s, shared, units, cap)
      if verdict == 'upgrade' then
        return nil, verdict
      elseif verdict == 'refuse' then
        return false, redis.call('PTTL', key), s
      end
      -- A counted key left with no hold and a queue expires with the
      -- queue's last place.
      joined[#joined + 1] = {key, v, latest > 0 and latest or L.expiry(key)}
      if verdict == 'convert' then
        s.holds, s.granted, s.owner, s.owners, s.units = {}, {}, owner, nil, nil
        if shared then
          s.owner, s.owners = SHARED, {}
        end
      end
      if s.units and not s.holds[hold] then
        s.units[hold] = taken
      end
      if s.owner == COUNTED or verdict == 'convert' then
        s.token = token
      end
      -- A hold taken again (a retried call, or a grant taken up) keeps the
      -- later of its two ends.
      s.holds[hold], s.granted[hold] = math.max(s.holds[hold] or 0, ends), nil
      if s.owners then
        s.owners[hold] = owner
      end
      L.leave(s, hold)
      L.lapse(key, s, now)
      redis.call('SET', key, L.format(s), 'PXAT', L.live(s, now))
      return s.token
    end

    -- verdict says what the hold could do with key, shared, in units or
    -- exclusively, without changing it: as take does (with the key's state
    -- when refused), 0 for a key it could take.
    function existing.verdict(key, shared, units, capkey)
      local cap, why = capacity(capkey, units)
      if why then
        return nil, why
      end
      local other = L.parse(redis.pcall('GET', key), key, now)
      if other and (L.live(other, now) > 0 or other.owner == COUNTED) then
        local verdict = judge(other, shared, units, cap)
        if verdict == 'upgrade' then
          return nil, verdict
        elseif verdict == 'refuse' then
          return false, redis.call('PTTL', key), other
        end
      end
      return 0
    end

    -- queue gives the hold a place in the queue of key (state s), asking for
    -- it shared or not, or renews the one it has; fence is the counter of
    -- the key's slot, from which a release that grants it the key takes its
    -- token.
    function existing.queue(key, s, shared, counted, fence)
      local mine
      for _, e in ipairs(s.queue) do
        if e.hold == hold then
          mine = e
        end
      end
      if not mine then
        mine = {hold = hold, shared = shared, counted = counted, owner = owner, fence = L.escape(fence)}
        s.queue[#s.queue + 1] = mine
      end
      mine.polls = mode == 'poll'
      mine.ends = now + tonumber(place)
      L.lapse(key, s, now)
      redis.call('SET', key, L.format(s), 'KEEPTTL')
    end
    return existing
  end

  -- undo undoes what this attempt wrote, and takes its joins out of the
  -- batches.
  local function undo()
    for k = #joined, 1, -1 do
      local j = joined[k]
      if j.batch then
        batches.unjoin(j.batch)
      else
        redis.call('SET', j[1], j[2], 'PXAT', j[3])
      end
    end
    for k = #created, 1, -1 do
      local key = created[k]
      redis.call('DEL', key)
      if batches then
        batches.drop(key)
      end
    end
  end

  -- Each key: taken afresh with SET NX (the usual case), else as slow's take
  -- says. The result: the key's token, or false, the remaining lease and the
  -- state of another owner's key, or nil and the error of a key not served
  -- here (moved) or of any other failure, or nil and 'upgrade'. Once a key is
  -- refused, a "try" call only looks for the other conflicts.
  -- tokens: those of the keys held, in order (after the 1 of a reply that
  -- holds them all).
  local tokens, conflicts, holders = {1}, nil, nil
  local wait, held, slot = 0, 0, 0
  -- clear: no key of the call is held by another owner so far.
  local clear = true
  while i <= last do
    local fence, n = ARGV[i], tonumber(ARGV[i + 1])
    -- counted: the counted keys of the slot so far; their units and
    -- capacity keys follow its lock keys.
    local counted = 0
    local modes, first = nil, i + 2
    if some then
      modes, first = ARGV[i + 2], i + 3
    end
    local base, value = 0, nil
    if clear then
      -- One token for the slot's keys taken afresh (some slots take none:
      -- gaps do not matter, a key's tokens only have to grow), so that
      -- they share one value, made once: a value per key costs more than
      -- the rest of taking it. INCRBY rather than INCR keeps the commands a
      -- locking user needs to one; its '1' is text, as a Lua number is
      -- formatted with %.17g on its way to the server (2.2k instructions).
      base = redis.pcall('INCRBY', fence, '1')
      if type(base) == 'table' then
        undo()
        if layout().moved(base) then
          return {-2}
        end
        return base
      end
      -- %d: Lua's own number to text turns 10^14 and more into
      -- "1e+14", which no reader of the value parses.
      value = string.format('%d', base) .. rest
    end
    for j = 0, n - 1 do
      local key = ARGV[first + j]
      local letter = modes and string.byte(modes, j + 1)
      local shared = letter == SHARED_BYTE
      local units, capkey
      if letter == COUNTED_BYTE then
        local at = first + n + 2 * counted
        units, capkey, counted = tonumber(ARGV[at]), ARGV[at + 1], counted + 1
      end
      local token, left, s
      if not clear then
        token, left, s = long_way(slow, key).verdict(key, shared, units, capkey)
      elseif units then
        token, left = take_units(key, base, units, capkey, owner, hold, lease, created, joined)
        if token == false then
          token, left, s = long_way(slow, key).take(key, base, false, units, left)
        end
      elseif shared then
        token, left, s = long_way(slow, key).take(key, base, true)
      else
        token = base
        local r = redis.pcall('SET', key, value, 'NX', 'PX', lease)
        if not r and fresh then
          -- The owner holds nothing: a key there is another owner's.
          token, left = false, 0
        elseif not r then
          token, left, s = long_way(slow, key).take(key, token, false)
        elseif r.err then
          token, left = nil, r
        else
          created[#created + 1] = key
        end
      end
      if token == nil then
        undo()
        if left == 'upgrade' then
          return {-3, key}
        elseif left == 'none' then
          return {-4, key}
        elseif left == 'over' then
          return {-5, key}
        elseif layout().moved(left) then
          return {-2}
        end
        return left
      elseif token == false and quick then
        undo()
        return {0, 0, left, {key}, {}, 0}
      elseif token == false then
        clear = false
        conflicts, holders = conflicts or {}, holders or {}
        conflicts[#conflicts + 1] = key
        holders[#holders + 1] = slow().holders(s)
        wait = math.max(wait, left)
        if waiting then
          if s then
            slow().queue(key, s, shared, units ~= nil, fence)
          end
          table.remove(tokens, 1)
          return {0, held, wait, conflicts, tokens, j, holders, s and s.token or 0}
        end
      elseif clear then
        tokens[#tokens + 1] = token
      end
    end
    if clear then
      held = held + 1
    end
    slot = slot + 1
    i = first + n + 2 * counted
  end
  if not clear then
    undo()
    return {0, 0, wait, conflicts, {}, 0, holders}
  end
  return tokens, undo
end
