-- extend.lua: make the lease of one hold on every lock key of one slot group
-- run for at least a given time from now.
--
-- KEYS[1..n]  lock keys, all in one slot
-- ARGV[1]     hold field, "h:" .. hold id
-- ARGV[2]     lease in milliseconds
--
-- A hold whose lease runs longer already keeps it; the key's own expiry is
-- never shortened (another hold of the same owner may run longer). A hold
-- whose lease has ended is not revived: it is dropped, and its key reported.
-- Returns the lock keys that no longer carry a live hold: the lock on them is
-- lost.
local hold, lease = ARGV[1], tonumber(ARGV[2])
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)

local lost = {}
for i = 1, #KEYS do
  local key = KEYS[i]
  local ends = tonumber(redis.call('HGET', key, hold))
  if ends and ends > now then
    if now + lease > ends then
      redis.call('HSET', key, hold, now + lease)
    end
    redis.call('PEXPIRE', key, lease, 'GT')
  else
    if ends then
      redis.call('HDEL', key, hold)
    end
    lost[#lost + 1] = key
  end
end
return lost
