#!lua flags=allow-cross-slot-keys
-- floor/fenced_lock.lua: the least a lock whose fencing tokens move with
-- their slot must do to take keys: for each slot, count the slot's tokens
-- on a counter kept in that slot (one INCRBY by its number of keys), and
-- write each key with its token and a lease.
--
-- KEYS[1]     a key of the master, to route the call
-- ARGV[1]     lease in milliseconds
-- ARGV[2..]   for each slot of the call, all served by this master: the
--             slot's counter key, n, then the slot's n keys
--
-- Returns the number of keys written.
local lease = ARGV[1]
local i, written = 2, 0
while i <= #ARGV do
  local n = tonumber(ARGV[i + 1])
  local token = redis.call('INCRBY', ARGV[i], n) - n
  for j = i + 2, i + 1 + n do
    token = token + 1
    redis.call('SET', ARGV[j], token, 'PX', lease)
  end
  written = written + n
  i = i + 2 + n
end
return written
