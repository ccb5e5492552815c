-- extend.lua: make the lease of every lock key of one slot group that carries
-- a hold run for at least a given time from now.
--
-- KEYS[1..n]  lock keys, all in one slot
-- ARGV[1]     hold field, "h:" .. hold id
-- ARGV[2]     lease in milliseconds
--
-- A lease that already runs longer (another hold of the same owner) is kept.
-- Returns the lock keys that no longer carry the hold: the lock on them is lost.
local hold, lease = ARGV[1], ARGV[2]
local lost = {}
for i = 1, #KEYS do
  local key = KEYS[i]
  if redis.call('HEXISTS', key, hold) == 1 then
    redis.call('PEXPIRE', key, lease, 'GT')
  else
    lost[#lost + 1] = key
  end
end
return lost
