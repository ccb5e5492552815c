-- acquire.lua: take every lock key of one slot group for one hold of an
-- owner, or none.
--
-- KEYS[1]     the slot's fencing counter (a string that never expires)
-- KEYS[2]     this hold's cancel mark in the slot (see release.lua)
-- KEYS[3..n]  lock keys, all in the same slot as KEYS[1]
-- ARGV[1]     owner id
-- ARGV[2]     hold field, "h:" .. hold id
-- ARGV[3]     lease in milliseconds
--
-- A lock key is a hash: owner, fence (the token of the ownership) and one
-- field per hold whose value is the server time, in milliseconds, at which
-- the hold's lease ends. The key itself expires with its longest hold.
--
-- Returns {1, token, ...}: every lock key is now held by the owner, with one
-- fencing token per lock key in KEYS order. A key the owner already held keeps
-- its token and gains the hold (its expired holds are dropped); its lease is
-- never shortened.
-- Returns {0, wait, key, ...}: another owner holds the keys listed; nothing was
-- changed; wait is the longest remaining lease among them in milliseconds.
-- Returns {-1}: this hold was cancelled by a rollback that overtook this call;
-- nothing was changed.
local owner, hold, lease = ARGV[1], ARGV[2], tonumber(ARGV[3])

if redis.call('EXISTS', KEYS[2]) == 1 then
  return {-1}
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local ends = now + lease

-- Every read before the first write.
local found, fresh = {}, 0
local refused = {0, 0}
for i = 3, #KEYS do
  local f = redis.call('HMGET', KEYS[i], 'owner', 'fence')
  found[i] = f
  if not f[1] then
    fresh = fresh + 1
  elseif f[1] ~= owner then
    refused[#refused + 1] = KEYS[i]
    local left = redis.call('PTTL', KEYS[i])
    if left > refused[2] then
      refused[2] = left
    end
  end
end
if #refused > 2 then
  return refused
end

local token = 0
if fresh > 0 then
  token = redis.call('INCRBY', KEYS[1], fresh) - fresh
end
local granted = {1}
for i = 3, #KEYS do
  local key = KEYS[i]
  if not found[i][1] then
    token = token + 1
    redis.call('HSET', key, 'owner', owner, 'fence', token, hold, ends)
    redis.call('PEXPIRE', key, lease)
    granted[#granted + 1] = token
  else
    local fields = redis.call('HGETALL', key)
    for j = 1, #fields, 2 do
      local name = fields[j]
      if string.sub(name, 1, 2) == 'h:' and name ~= hold and tonumber(fields[j + 1]) <= now then
        redis.call('HDEL', key, name)
      end
    end
    redis.call('HSET', key, hold, ends)
    redis.call('PEXPIRE', key, lease, 'GT')
    granted[#granted + 1] = tonumber(found[i][2])
  end
end
return granted
