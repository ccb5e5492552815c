-- release.lua: drop one hold from every lock key of one slot group.
--
-- KEYS[1]     the slot's set of cancelled holds
-- KEYS[2..n]  lock keys, all in the same slot as KEYS[1]
-- ARGV[1]     owner id
-- ARGV[2]     hold field, "h:" .. hold id
-- ARGV[3]     "1" when an acquire of this hold may still be in flight (its
--             outcome is unknown): the hold is then also recorded as cancelled
--             for ARGV[4] milliseconds, so that a late acquire cannot take it
-- ARGV[4]     how long a cancellation is remembered, in milliseconds
--
-- Hold ids are random and written only by acquire.lua for the key's owner, so
-- a key carrying the hold belongs to the hold's owner. A key left with no hold
-- (only its owner and fence fields) is deleted and its release announced with
-- SPUBLISH on a channel named like the key, which waiters subscribe to.
-- Returns the lock keys, among those without the hold, that another owner
-- holds: the lock on them was lost. A key without the hold that is gone or
-- still the owner's says nothing: a release run twice (a client retrying a
-- pipeline) finds its own work done.
local owner, hold = ARGV[1], ARGV[2]

if ARGV[3] == '1' then
  redis.call('SADD', KEYS[1], hold)
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
end

local taken = {}
for i = 2, #KEYS do
  local key = KEYS[i]
  if redis.call('HDEL', key, hold) == 1 then
    if redis.call('HLEN', key) <= 2 then
      redis.call('DEL', key)
      redis.call('SPUBLISH', key, 'released')
    end
  else
    local current = redis.call('HMGET', key, 'owner')[1]
    if current and current ~= owner then
      taken[#taken + 1] = key
    end
  end
end
return taken
