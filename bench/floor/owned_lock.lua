#!lua flags=allow-cross-slot-keys
-- floor/owned_lock.lua: the least a real lock must do to take keys (the lock
-- floor): for each slot, one INCR of a counter kept in that slot, the token
-- of every key of the slot; each key set only if free (SET NX PX) to its
-- token and owner; on a key held, what this call set is deleted.
--
-- KEYS[1]     a key of the master, to route the call
-- ARGV[1]     lease in milliseconds
-- ARGV[2]     the owner
-- ARGV[3..]   for each slot of the call, all served by this master: the
--             slot's counter key, n, then the slot's n keys
--
-- Returns {token, ...}, one per key in order; or {-1, key}: key is held,
-- and nothing of this call is.
local lease, owner = ARGV[1], ARGV[2]
local set, tokens = {}, {}
local i = 3
while i <= #ARGV do
  local n = tonumber(ARGV[i + 1])
  local token = redis.call('INCR', ARGV[i])
  local value = token .. ' ' .. owner
  for j = i + 2, i + 1 + n do
    if not redis.call('SET', ARGV[j], value, 'NX', 'PX', lease) then
      for k = #set, 1, -1 do
        redis.call('DEL', set[k])
      end
      return {-1, ARGV[j]}
    end
    set[#set + 1] = ARGV[j]
    tokens[#tokens + 1] = token
  end
  i = i + 2 + n
end
return tokens
