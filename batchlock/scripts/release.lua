-- release.lua: drop one hold from every lock key of one slot group.
--
-- KEYS[1]     when ARGV[3] is "1": this hold's cancel mark in the slot, and
--             the lock keys follow from KEYS[2]
-- KEYS[1..n]  otherwise: lock keys, all in one slot
-- ARGV[1]     owner id
-- ARGV[2]     hold field, "h:" .. hold id
-- ARGV[3]     "1" when an acquire of this hold may still be in flight (its
--             outcome is unknown): the hold is then also marked cancelled for
--             ARGV[4] milliseconds, so that a late acquire cannot take it
-- ARGV[4]     how long the cancel mark lives, in milliseconds
--
-- Hold ids are random and written only by acquire.lua for the key's owner, so
-- a key carrying the hold belongs to the hold's owner. Holds whose lease has
-- ended are dropped too; a key left with no live hold is deleted and its
-- release announced with SPUBLISH on a channel named like the key, which
-- waiters subscribe to; otherwise the key expires with its longest live hold.
-- Returns the lock keys, among those without the hold, that another owner
-- holds: the lock on them was lost. A key without the hold that is gone or
-- still the owner's says nothing: a release run twice (a client retrying a
-- pipeline) finds its own work done.
local owner, hold = ARGV[1], ARGV[2]

local first = 1
if ARGV[3] == '1' then
  redis.call('SET', KEYS[1], '1', 'PX', ARGV[4])
  first = 2
end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

local taken = {}
for i = first, #KEYS do
  local key = KEYS[i]
  if redis.call('HDEL', key, hold) == 1 then
    local fields = redis.call('HGETALL', key)
    local latest = 0
    for j = 1, #fields, 2 do
      local name = fields[j]
      if string.sub(name, 1, 2) == 'h:' then
        local ends = tonumber(fields[j + 1])
        if ends > now then
          latest = math.max(latest, ends)
        else
          redis.call('HDEL', key, name)
        end
      end
    end
    if latest == 0 then
      redis.call('DEL', key)
      redis.call('SPUBLISH', key, 'released')
    else
      redis.call('PEXPIREAT', key, latest)
    end
  else
    local current = redis.call('HGET', key, 'owner')
    if current and current ~= owner then
      taken[#taken + 1] = key
    end
  end
end
return taken
