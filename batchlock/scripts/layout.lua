-- layout.lua: the value of a lock key, read and written by every script
-- (each is this file followed by its own).
--
-- A lock key is a string "<token> <flag> <holds> <owner>":
--   token  the fencing token of the ownership, in decimal
--   flag   "w" once a refused call waits for the key (its release is then
--          announced with SPUBLISH on a channel named like the key), else "-"
--   holds  "<hold>=<ends>", comma-separated: each hold field ("h:" .. hold
--          id) and the server time in milliseconds at which its lease ends
--   owner  the owner id, to the end of the value (it may hold spaces)
-- The key expires with its longest hold (PXAT).

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- parse returns the state of value v, nil when v is not a lock value.
local function parse(v)
  if type(v) ~= 'string' then
    return nil
  end
  local token, flag, holds, owner = string.match(v, '^(%d+) (%S) (%S*) (.*)$')
  if not token then
    return nil
  end
  local h = {}
  for id, ends in string.gmatch(holds, '([^,=]+)=(%d+)') do
    h[id] = tonumber(ends)
  end
  return {token = tonumber(token), waited = flag == 'w', holds = h, owner = owner}
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
  for id, ends in pairs(s.holds) do
    holds[#holds + 1] = id .. '=' .. string.format('%d', ends)
  end
  local flag = '-'
  if s.waited then
    flag = 'w'
  end
  return string.format('%d', s.token) .. ' ' .. flag .. ' ' .. table.concat(holds, ',') .. ' ' .. s.owner
end

-- rewrite stores s as key's value, expiring with its longest live hold, or
-- deletes the key when no live hold is left; it reports whether it deleted.
local function rewrite(key, s, now)
  local latest = live(s, now)
  if latest > 0 then
    redis.call('SET', key, format(s), 'PXAT', latest)
    return false
  end
  redis.call('DEL', key)
  return true
end

-- fresh returns the value, by fencing token, of a key taken afresh by one
-- hold whose lease ends at ends (decimal milliseconds).
local function fresh(hold, ends, owner)
  local rest = ' - ' .. hold .. '=' .. ends .. ' ' .. owner
  return function(token)
    return string.format('%d', token) .. rest
  end
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
