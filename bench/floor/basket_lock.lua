#!lua flags=allow-cross-slot-keys
-- floor/basket_lock.lua: the cross-process floor's take of a tick's baskets
-- on one master: the lock floor's work (per slot one INCR of its counter,
-- each key set only if free, SET NX PX, to its token and owner) basket by
-- basket, a basket's keys of this call deleted again at its first held key.
--
-- KEYS[1]     a key of the master, to route the call
-- ARGV[1]     lease in milliseconds
-- ARGV[2]     the owner
-- ARGV[3..]   for each basket's part on this master: the basket's number,
--             its number of slots m, then m times: the slot's counter key,
--             n, the slot's n keys
--
-- Returns {refused, tokens}: refused the numbers of the baskets with a key
-- held, nothing of which this call holds; tokens one per key of the other
-- baskets, in order.
local lease, owner = ARGV[1], ARGV[2]
local refused, tokens = {}, {}
local i = 3
while i <= #ARGV do
  local basket, slots = ARGV[i], tonumber(ARGV[i + 1])
  i = i + 2
  local set, taken, held = {}, {}, false
  for _ = 1, slots do
    local n = tonumber(ARGV[i + 1])
    if not held then
      local token = redis.call('INCR', ARGV[i])
      local value = token .. ' ' .. owner
      for j = i + 2, i + 1 + n do
        if not redis.call('SET', ARGV[j], value, 'NX', 'PX', lease) then
          held = true
          break
        end
        set[#set + 1] = ARGV[j]
        taken[#taken + 1] = token
      end
    end
    i = i + 2 + n
  end
  if held then
    for k = #set, 1, -1 do
      redis.call('DEL', set[k])
    end
    refused[#refused + 1] = tonumber(basket)
  else
    for _, t in ipairs(taken) do
      tokens[#tokens + 1] = t
    end
  end
end
return {refused, tokens}
