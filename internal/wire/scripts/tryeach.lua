-- tryeach.lua: try the baskets of a TryEach call, each for its own hold,
-- on the lock keys that this master serves: each basket's keys here are
-- taken all or none, on their own (the process settled conflicts among
-- the baskets before sending them).
--
-- KEYS      none; or, on a call retried after its slot was found elsewhere,
--           a slot's fencing counter, for the server to check where the
--           slot is
-- ARGV[1]   lease in milliseconds
-- ARGV[2]   "first" (each basket's keys here all or none, stopping at the
--           first one another owner holds), or "fresh" (the same, for owners
--           made for this call, which hold no key), with an "s" after it
--           when some key is asked for shared
-- ARGV[3]   the call's cancel mark (in the first slot; see release.lua)
-- ARGV[4..] per basket: its owner id, escaped (see layout.lua), its hold
--           field ("h:" .. hold id), the number c of arguments of its slots,
--           then those c arguments, as attempt.lua reads them
--
-- Returns {reply, ...}: per basket in order, acquire.lua's reply for it in
-- "try" mode ({1, token, ...}; {0, 0, wait, {key}, {}, 0}, naming only the
-- first key held; {-2} for a basket with a slot not served here, which
-- changed nothing of it; or {-3, key}, {-4, key}, {-5, key}).
-- Returns {-1}: the call was cancelled by a rollback that overtook it;
-- nothing was changed.
-- Returns {-2}: the slot of the cancel mark is not served here; nothing was
-- changed.
-- An error of a key fails the call: what the baskets before it wrote is
-- undone. Lines in units that join a key quickly are written once a key
-- (batching, below).

-- Joins written once a call (attempt.lua's batches): a tick's baskets
-- join the keys an earlier basket of the call took or joined, and a join
-- written at once costs several commands and a read of the key, a hot key's
-- value as long as its many holds. So a line in units that joins quickly
-- (as join_quickly says) is kept in its key's batch, and each batch is
-- written once (flush) at the end of the call, or before its key is read
-- the long way, which must find it written. Here, not in attempt.lua: the
-- functions a script makes on every call cost as much as a small lock.
-- undos is the call's undo list, to which each flush adds its own where it
-- comes.
local function batching(undos)
  local B = {}
  -- of: per key, its batch (see B.of); order: the keys in the order of
  -- their first join; known: the value of each counted key the call took
  -- afresh, which a join reads instead of the key.
  local of, order = {}, {}
  B.known = {}

  -- B.of returns key's batch, made from its value v (the value known when
  -- nil: a key the call took afresh), or nil when there is none, or v is
  -- no counted value with a hold and nobody waiting.
  function B.of(key, v)
    local b = of[key]
    if b then
      return b
    end
    v = v or B.known[key]
    if not v then
      return nil
    end
    local gap, at, n = split(v, COUNTED)
    if not gap then
      return nil
    end
    b = {v = v, gap = gap, at = at, n = n, entries = {}, tokens = {}, units = {}, by = {}, owners = {}, holds = {}}
    of[key] = b
    order[#order + 1] = key
    return b
  end

  -- B.join adds hold of owner, units of it, to batch b with token, as
  -- join_quickly would add it to the key (cap its capacity), recording it
  -- in joined to be undone: it returns token, or false and cap when
  -- join_quickly would not join.
  function B.join(b, units, cap, token, owner, hold, lease, joined)
    if b.n + units > cap or b.holds[hold] or b.owners[owner] or
      string.find(b.v, hold .. '=', b.gap, true) or string.find(b.v, '=' .. owner .. '=', b.gap, true) then
      return false, cap
    end
    local k = #b.entries + 1
    b.entries[k] = counted_parts(hold, lease, owner, units)
    b.tokens[k], b.units[k], b.by[k] = token, units, {hold, owner}
    b.holds[hold], b.owners[owner], b.n, b.lease = true, true, b.n + units, lease
    joined[#joined + 1] = {batch = b}
    return token
  end

  -- B.unjoin takes the last join out of batch b.
  function B.unjoin(b)
    local k = #b.entries
    b.holds[b.by[k][1]], b.owners[b.by[k][2]], b.n = nil, nil, b.n - b.units[k]
    b.entries[k], b.tokens[k], b.units[k], b.by[k] = nil, nil, nil, nil
  end

  -- B.drop forgets key, which an undo deletes.
  function B.drop(key)
    B.known[key], of[key] = nil, nil
  end

  -- write writes key's batch, in place after its last hold when it can
  -- (see layout.lua), else whole without holes, and forgets it, adding
  -- what puts it back to before (nothing else writes a batch's key
  -- meanwhile).
  local function write(key, before)
    -- A key whose batch was written or dropped may be listed twice.
    local b = of[key]
    of[key] = nil
    if not b or #b.entries == 0 then
      return
    end
    local v, gap, at = b.v, b.gap, b.at
    local t = string.format('%d', b.tokens[#b.tokens])
    local field = COUNTED .. string.format('%d', b.n)
    local lease = tonumber(b.lease)
    local ends = now_once() + lease
    local expires = layout().expiry(key)
    before[#before + 1] = {key, v, expires}
    local joins = table.concat(b.entries, ',')
    -- The hole of a hold that left is two commas or more.
    if not string.find(v, ',,', gap + 3, true) and ends <= expires and #t == gap - 1 then
      redis.call('SETRANGE', key, 0, t)
      write_at(key, v, at, ',' .. joins .. ' ' .. field)
    else
      local kept = compact(v, gap, at)
      if kept ~= '' then
        joins = kept .. ',' .. joins
      end
      redis.call('SET', key, t .. ' - ' .. joins .. ' ' .. field, 'PXAT', math.max(expires, ends + lease))
    end
  end

  -- B.flush writes the batch of key only, or every batch, and forgets the
  -- values known of them: the keys now hold what they said. Its undo,
  -- added to undos, puts them back as they were before it.
  function B.flush(key)
    local before = {}
    if key then
      write(key, before)
      B.known[key] = nil
    else
      for _, k in ipairs(order) do
        write(k, before)
      end
      order, B.known = {}, {}
    end
    if #before > 0 then
      undos[#undos + 1] = function()
        for _, o in ipairs(before) do
          redis.call('SET', o[1], o[2], 'PXAT', o[3])
        end
      end
    end
  end
  return B
end

local lease, mode = ARGV[1], ARGV[2]
local stop = cancelled(ARGV[3])
if stop then
  return stop
end

local replies, undos = {}, {}
batches = batching(undos)
local i = 4
while i <= #ARGV do
  local owner, hold, c = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local reply, undo = attempt(owner, hold, lease, mode, 0, i + 3, i + 2 + c)
  if reply.err then
    for k = #undos, 1, -1 do
      undos[k]()
    end
    return reply
  end
  undos[#undos + 1] = undo
  replies[#replies + 1] = reply
  i = i + 3 + c
end
batches.flush()
return replies
