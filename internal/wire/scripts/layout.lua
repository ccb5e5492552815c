-- layout.lua: the value of a lock key, read and written by every script
-- (each is this file followed by its own). The names of the keys (lock keys,
-- fencing counters, cancel marks), the channels and the ids are described in
-- layout.go, the layout's one definition on the Go side.
--
-- A lock key is a string "<token> <queue> <holds> <owner>":
--   token  the fencing token of the ownership, in decimal; of a shared key,
--          the token of its shared ownership, which every owner holding it
--          shares
--   queue  the waiters, in arrival order, as "<hold>@<ends>=<owner>=<fence>"
--          comma-separated (each waiting call's hold field; the server time
--          in milliseconds at which its place lapses unless renewed, with
--          "s" after it for a call that asks for the key shared, "n" for one
--          that asks for units of it, then "p"
--          for one that polls rather than listens; its owner id, and its
--          slot's fencing counter escaped as owner ids are: what a release
--          needs to grant it the key), or "-"
--   holds  "<hold>=<ends>", comma-separated: each hold field ("h:" .. hold
--          id, in hex digits) and the server time in milliseconds at which
--          its lease ends, or nothing after "=" for the one hold of a key
--          taken afresh, which ends with the key; "g" after <ends> marks a
--          grant: a hold a release gave a waiter, which no call of the
--          waiter's has renewed yet; on a shared key
--          "<hold>=<ends>=<owner>", each hold with its owner; on a
--          counted key "<hold>=<ends>=<owner>=<units>", each hold with its
--          owner and the units it holds
--   owner  the owner id, to the end of the value; for a key held shared "*"
--          and, once every hold's end is written, the earliest of them or
--          less (a hold that leaves it as it is), so that a hold joins
--          readers that are live without the others being read, and one
--          leaves them so (attempt.lua, release.lua);
--          for a counted one "#<units>", the units of the holds it lists,
--          ended or not: never fewer than the live holds', so that a hold
--          whose units fit them joins a key of many holders, nobody
--          waiting, without the others being read, and one leaves it so
--          (attempt.lua, release.lua); a hold whose lease ended counts
--          there until a script that reads every hold drops it
-- A counted key's capacity, the units that may be held of it at once, is a
-- key of its own in the key's slot (its name comes from the client, see
-- keyspace.go), which outlives the holds; the units free are the capacity
-- less the units of the live holds. A counted key may be left with no hold
-- and a queue: its first waiter asks for units, which a release does not
-- grant but announces ("released"), the waiters keeping their places.
-- Owner ids are escaped by the client (see owner.go): they hold no
-- whitespace or control byte, comma, "=", "@", "*" or "#", so "*" is no
-- owner's id and none starts with "#".
-- A hold that joins or leaves a counted or shared key without the others
-- being read is written in place (SETRANGE), for a new value as long as the
-- key's many holds costs about as much as reading them all: one that leaves
-- turns its entry into commas (a hole, empty entries between its
-- neighbours), one that joins fills a hole as long as it or goes after the
-- last hold, and an owner field written shorter than it was is followed by
-- spaces. A script that reads every hold writes the value afresh, without
-- them. The holds that one call joins to a key in units (tryeach.lua's
-- batches) or lets leave it so (release.lua's left) are written together,
-- once: the joins after the last hold, or with the value written whole when
-- it has holes.
-- The key expires with its longest hold (PXAT), or later: a hold that
-- leaves without the others being read (release.lua) leaves the key's
-- expiry as it was, the end of the longest hold it listed at most, and one
-- that joins so past that expiry sets it a lease after its own end, so that
-- those joining within that lease are written in place.

-- A key granted to a waiter is its for this long unless the waiter renews it
-- (a waiter that polls gets as long as its place would have lasted): time
-- enough for the waiter to hear of it and renew it, and the most a waiter
-- gone meanwhile holds the key up.
local GRANT_MS = 3000

-- RELEASED is the message of a key freed with nobody to hand it to: every
-- waiter of the key tries again (a grant's message is the waiter's hold, a
-- space and the key's new token).
local RELEASED = 'released'

-- AGAIN starts the message that tells one waiter (AGAIN .. its hold field)
-- to try again without having been handed the key: its place lapsed, or a
-- writer ahead of the reader it is left the queue.
local AGAIN = 'again:'

-- SHARED is the owner field of a key held shared, COUNTED the start of a
-- counted one's.
local SHARED = '*'
local COUNTED = '#'

-- split reads v, the value of a key with a hold and nobody waiting whose
-- owner field is mark (COUNTED or SHARED) and a number: a counted key's
-- units, a shared key's earliest end (see above). It returns where its
-- token ends (the space after it), where its owner field starts (the
-- space before it) and that number; nil for any other value. Its holds
-- lie between, after " - ". It finds them without a pattern or a copy,
-- which would cost as much as reading every hold: only the owner field
-- has a space and mark.
local function split(v, mark)
  local gap = string.find(v, ' ', 1, true)
  if not gap or string.sub(v, gap, gap + 2) ~= ' - ' then
    return nil
  end
  local at = string.find(v, ' ' .. mark, gap + 3, true)
  local n = at and at > gap + 3 and tonumber(string.sub(v, at + 2))
  if not n then
    return nil
  end
  return gap, at, n
end

-- find_hold finds hold's entry in v, a value that split reads as a
-- counted or a shared key's: it returns where the entry starts, split's
-- gap, at and number, and whether the key is counted; nil when v is no such
-- value or does not list the hold. The entry is the first of the holds, or
-- one after a comma.
local function find_hold(v, hold)
  local counted = true
  local gap, at, n = split(v, COUNTED)
  if not gap then
    counted, gap, at, n = false, split(v, SHARED)
    if not gap then
      return nil
    end
  end
  local holds = gap + 3
  local first = string.find(v, ',' .. hold .. '=', holds, true)
  if first then
    first = first + 1
  elseif string.sub(v, holds, holds + #hold) == hold .. '=' then
    first = holds
  else
    return nil
  end
  return first, gap, at, n, counted
end

-- write_at writes s over key's value v from position at (where v's owner
-- field starts, the space before it), followed by spaces over what was
-- there, when s is shorter.
local function write_at(key, v, at, s)
  local over = #v - at + 1 - #s
  if over > 0 then
    s = s .. string.rep(' ', over)
  end
  redis.call('SETRANGE', key, at - 1, s)
end

-- comma_runs are runs of commas by length, made once per call: a hole of
-- a hold that left, or the run a join looks for.
local comma_runs = {}
local function commas(n)
  local run = comma_runs[n]
  if not run then
    run = string.rep(',', n)
    comma_runs[n] = run
  end
  return run
end

-- join_in_place adds entry to the holds of key, whose value v split read
-- (gap, at), and makes its owner field field, in place: into the first hole
-- it fits, between commas, or after the last hold.
local function join_in_place(key, v, gap, at, entry, field)
  local holds, run = gap + 3, commas(#entry + 1)
  local hole = string.find(v, run, holds, true)
  while hole do
    -- The hole starts the holds, or the entry keeps the comma before it
    -- and needs one, or the owner field, after it.
    local next = string.sub(v, hole + #run, hole + #run)
    if hole == holds or next == ',' or next == ' ' then
      redis.call('SETRANGE', key, hole == holds and hole - 1 or hole, entry)
      write_at(key, v, at, ' ' .. field)
      return
    end
    hole = string.find(v, run, hole + #run, true)
  end
  write_at(key, v, at, ',' .. entry .. ' ' .. field)
end

-- compact returns the holds of value v, which split read (gap, at),
-- without the holes of those that left.
local function compact(v, gap, at)
  local holds = string.gsub(string.sub(v, gap + 3, at - 1), ',,+', ',')
  return (string.gsub(holds, '^,?(.-),?$', '%1'))
end

-- layout returns the functions that read and write a lock value, made on
-- the first call of a script that needs them: most calls (keys taken
-- afresh, a lone hold released) need none of them, and making them all on
-- every call costs more than the work itself.
local cached_layout
local function layout()
  if cached_layout then
    return cached_layout
  end
  local function now_ms()
    local t = redis.call('TIME')
    return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  end

  -- expiry returns when key, which exists, expires, in the server's
  -- milliseconds, as the server keeps it: an expiry put back from it (an
  -- undo) is the one the key had, where one made of a PTTL and a call's
  -- time read earlier would end a live hold's key early. A key with no
  -- expiry (no lock key's) expires now.
  local function expiry(key)
    local at = redis.call('PEXPIRETIME', key)
    if at < 0 then
      return now_ms()
    end
    return at
  end

  -- failed reports a reply of redis.pcall that is an error.
  local function failed(r)
    return type(r) == 'table' and r.err ~= nil
  end

  -- moved reports an error of redis.pcall that means the key is not served
  -- here now: its slot moved or is being migrated, or the cluster is down.
  local function moved(r)
    return failed(r) and (string.find(r.err, 'non local key', 1, true) ~= nil or
      string.find(r.err, 'cluster is down', 1, true) ~= nil)
  end

  -- get reads key: its value, false when it has none or is not a string (not a
  -- lock key), or nil when this master does not serve it (moved, or in
  -- migration). Any other error is raised as it is.
  local function get(key)
    local v = redis.pcall('GET', key)
    if moved(v) then
      return nil
    elseif failed(v) then
      if string.find(v.err, 'WRONGTYPE', 1, true) then
        return false
      end
      error(v)
    end
    return v
  end

  -- elsewhere reports a reply of redis.pcall that is moved; any other error is
  -- raised as it is.
  local function elsewhere(r)
    if moved(r) then
      return true
    end
    if failed(r) then
      error(r)
    end
    return false
  end

  -- parse returns the state of value v, the value of key at the server
  -- time now, nil when v is not a lock value. A hold written without its
  -- end (by an acquire that took the key afresh) ends with the key.
  local function parse(v, key, now)
    if type(v) ~= 'string' then
      return nil
    end
    local token, queue, holds, owner = string.match(v, '^(%d+) (%S+) (%S*) (.*)$')
    if not token then
      return nil
    end
    local h, g, o, u = {}, {}, nil, nil
    if string.sub(owner, 1, 1) == SHARED then
      owner, o = SHARED, {}
    elseif string.sub(owner, 1, 1) == COUNTED then
      owner, o, u = COUNTED, {}, {}
    end
    for id, ends, grant, who, units in string.gmatch(holds, '([^,=]+)=(%d*)(g?)=?([^,=]*)=?(%d*)') do
      if ends == '' then
        h[id] = expiry(key)
      else
        h[id] = tonumber(ends)
      end
      if grant == 'g' then
        g[id] = true
      end
      if o then
        o[id] = who
      end
      if u then
        u[id] = tonumber(units) or 0
      end
    end
    local q = {}
    for id, ends, kind, polls, who, fence in string.gmatch(queue, '([^,@]+)@(%d+)([sn]?)(p?)=?([^,=]*)=?([^,]*)') do
      q[#q + 1] = {hold = id, ends = tonumber(ends), shared = kind == 's', counted = kind == 'n', polls = polls == 'p',
        owner = who, fence = fence}
    end
    -- owners: of a shared or counted key, the owner of each hold; nil
    -- otherwise. units: of a counted key, the units of each hold.
    -- granted: the holds that are grants.
    return {token = tonumber(token), queue = q, holds = h, granted = g, owner = owner, owners = o, units = u}
  end

  -- held returns the units of the live holds of counted key state s (whose
  -- ended holds live dropped), but for those of hold skip.
  local function held(s, skip)
    local n = 0
    for id in pairs(s.holds) do
      if id ~= skip then
        n = n + (s.units[id] or 0)
      end
    end
    return n
  end

  -- holder reports whether owner has a hold on the key of state s.
  local function holder(s, owner)
    if not s.owners then
      return s.owner == owner
    end
    for id in pairs(s.holds) do
      if s.owners[id] == owner then
        return true
      end
    end
    return false
  end

  -- live drops the holds of s whose lease ended by now, and returns when the
  -- longest of the others ends: 0 when none is left.
  local function live(s, now)
    local latest = 0
    for id, ends in pairs(s.holds) do
      if ends > now then
        latest = math.max(latest, ends)
      else
        s.holds[id] = nil
      end
    end
    return latest
  end

  local function format(s)
    local holds = {}
    local units, earliest = 0, nil
    for id, ends in pairs(s.holds) do
      earliest = math.min(earliest or ends, ends)
      local e = id .. '=' .. string.format('%d', ends)
      if s.granted[id] then
        e = e .. 'g'
      end
      if s.owners then
        e = e .. '=' .. (s.owners[id] or '')
      end
      if s.units then
        e = e .. '=' .. string.format('%d', s.units[id] or 0)
        units = units + (s.units[id] or 0)
      end
      holds[#holds + 1] = e
    end
    local owner = s.owner
    if owner == COUNTED then
      owner = COUNTED .. string.format('%d', units)
    elseif owner == SHARED and earliest then
      owner = SHARED .. string.format('%d', earliest)
    end
    local queue = {}
    for _, e in ipairs(s.queue) do
      queue[#queue + 1] = e.hold .. '@' .. string.format('%d', e.ends) .. (e.shared and 's' or '') .. (e.counted and 'n' or '') ..
        (e.polls and 'p' or '') ..
        '=' .. e.owner .. '=' .. e.fence
    end
    if #queue == 0 then
      queue[1] = '-'
    end
    return string.format('%d', s.token) .. ' ' .. table.concat(queue, ',') .. ' ' .. table.concat(holds, ',') .. ' ' .. owner
  end

  -- leave takes hold's place in the queue of s out, and returns it (nil when
  -- it had none).
  local function leave(s, hold)
    for i, e in ipairs(s.queue) do
      if e.hold == hold then
        return table.remove(s.queue, i)
      end
    end
    return nil
  end

  -- wake tells the readers at the head of the queue of key (state s, held
  -- shared), up to the first writer, that they may join: a writer ahead of
  -- them left the queue.
  local function wake(key, s, now)
    for _, e in ipairs(s.queue) do
      if e.ends > now then
        if not e.shared then
          return
        end
        redis.call('SPUBLISH', key, AGAIN .. e.hold)
      end
    end
  end

  -- drop_lapsed drops the places in the queue of key (state s) that lapsed
  -- by now, and tells each of their waiters (AGAIN and its hold field), which,
  -- should it still be alive, queues again at once. It returns whether some
  -- place lapsed, and whether one of them was a writer's.
  local function drop_lapsed(key, s, now)
    local lapsed, writer = false, false
    for i = #s.queue, 1, -1 do
      local e = s.queue[i]
      if e.ends <= now then
        table.remove(s.queue, i)
        redis.call('SPUBLISH', key, AGAIN .. e.hold)
        lapsed = true
        writer = writer or not e.shared
      end
    end
    return lapsed, writer
  end

  -- lapse drops the places in the queue of key (state s) that lapsed, so that
  -- a key that never changes hands (readers coming and going) does not keep
  -- the places of waiters that died, and tells their waiters. When a writer's
  -- place went from a key held shared, the readers it kept waiting are told
  -- they may join.
  local function lapse(key, s, now)
    local _, writer = drop_lapsed(key, s, now)
    if writer and s.owner == SHARED then
      wake(key, s, now)
    end
  end

  -- escape writes a name as owner ids are written (see owner.go), so that
  -- a fencing counter fits in a place in a queue; unescape reads it back.
  local function escape(name)
    return (string.gsub(name, '[%z\1-\32\127,=@*#%%]', function(c)
      return string.format('%%%02X', string.byte(c))
    end))
  end
  local function unescape(name)
    return (string.gsub(name, '%%(%x%x)', function(h)
      return string.char(tonumber(h, 16))
    end))
  end

  -- hand grants key, whose holds have all ended, to the first waiter of s
  -- whose place has not lapsed: a fresh token from the counter its place
  -- names, its owner, and a hold of GRANT_MS (a waiter that polls until its
  -- place would have lapsed, if that is later), marked a grant; the waiter is
  -- told with one message on the key's channel, its hold field and the
  -- token, and counts on the key for GRANT_MS from before its last call
  -- that found its place there. A first waiter that asks for the key shared
  -- is granted it together with the readers right behind it, up to the
  -- first waiter that asks for it exclusively, all of them with one token;
  -- each is told. With no such waiter, or when its counter is not here
  -- (its slot in migration), the key is deleted, and the release
  -- announced to anyone polling ("released") if some waiter's place had
  -- lapsed or was dropped.
  local function hand(key, s, now)
    local lapsed = drop_lapsed(key, s, now)
    if s.queue[1] and s.queue[1].counted then
      -- Units are not granted: the waiters keep their places in a key left
      -- with no hold, and try again; the first of them is let in first.
      local until_ms = 0
      for _, e in ipairs(s.queue) do
        until_ms = math.max(until_ms, e.ends)
      end
      s.holds, s.granted, s.owner, s.owners, s.units = {}, {}, COUNTED, {}, {}
      redis.call('SPUBLISH', key, RELEASED)
      redis.call('SET', key, format(s), 'PXAT', until_ms)
      return
    end
    local handed = {}
    while #s.queue > 0 do
      local first = s.queue[1]
      if #handed > 0 and not (handed[1].shared and first.shared) then
        break
      end
      handed[#handed + 1] = first
      table.remove(s.queue, 1)
      if not first.shared then
        break
      end
    end
    local token
    if #handed > 0 and handed[1].fence ~= '' then
      -- A counter never expires, so one missing here lives elsewhere: a
      -- release sent on to a master importing the slot (ASKING) would
      -- otherwise create it afresh and grant a token that went back.
      local fence = unescape(handed[1].fence)
      local there = redis.pcall('EXISTS', fence)
      if not elsewhere(there) and there == 1 then
        -- INCRBY, as acquires do: the commands a locking user needs stay
        -- as they were (see docs/operators.md's ACL).
        token = redis.pcall('INCRBY', fence, '1')
        if elsewhere(token) or token <= s.token then
          token = nil
        end
      end
    end
    if not token then
      lapsed, handed = lapsed or #handed > 0, {}
    end
    if #handed > 0 then
      s.holds, s.granted, s.owner, s.owners, s.token = {}, {}, handed[1].owner, nil, token
      if handed[1].shared then
        s.owner, s.owners = SHARED, {}
      end
      local expires = 0
      for _, w in ipairs(handed) do
        local ends = now + GRANT_MS
        if w.polls then
          ends = math.max(ends, w.ends)
        end
        s.holds[w.hold], s.granted[w.hold] = ends, true
        expires = math.max(expires, ends)
        if s.owners then
          s.owners[w.hold] = w.owner
        end
      end
      redis.call('SET', key, format(s), 'PXAT', expires)
      local told = ' ' .. string.format('%d', token)
      for _, w in ipairs(handed) do
        redis.call('SPUBLISH', key, w.hold .. told)
      end
      return
    end
    -- Announced first: in a slot being migrated the key, once deleted, is
    -- no longer local, and neither is its channel.
    if lapsed then
      redis.call('SPUBLISH', key, RELEASED)
    end
    redis.call('DEL', key)
  end

  -- rewrite stores s as key's value, expiring with its longest live hold, or
  -- hands the key on when no live hold is left. freed says units of a
  -- counted key were let go, which its waiters are told.
  local function rewrite(key, s, now, freed)
    local latest = live(s, now)
    if latest > 0 then
      if freed and s.owner == COUNTED and #s.queue > 0 then
        redis.call('SPUBLISH', key, RELEASED)
      end
      redis.call('SET', key, format(s), 'PXAT', latest)
    else
      hand(key, s, now)
    end
  end

  cached_layout = {now_ms = now_ms, expiry = expiry, failed = failed, moved = moved, get = get, elsewhere = elsewhere,
    parse = parse, held = held, holder = holder, live = live, format = format, leave = leave,
    wake = wake, lapse = lapse, hand = hand, rewrite = rewrite, escape = escape}
  return cached_layout
end
