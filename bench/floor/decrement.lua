#!lua flags=allow-cross-slot-keys
-- floor/decrement.lua: the decrement floor's sale of a tick's baskets on
-- one master: per basket's part, each key's count read, then all of them
-- decremented (DECRBY) only if every one has the units asked. Sent with
-- the units negated, it gives a part back (no count is short of a
-- negative number).
--
-- KEYS[1]     a key of the master, to route the call
-- ARGV[1..]   for each basket's part on this master: the basket's number,
--             its number of keys n, then n times a count key and the units
--
-- Returns the numbers of the baskets refused (a count short), nothing of
-- which this call took.
local refused = {}
local i = 1
while i <= #ARGV do
  local basket, n = ARGV[i], tonumber(ARGV[i + 1])
  local last = i + 2 * n
  local short = false
  for j = i + 2, last, 2 do
    if tonumber(redis.call('GET', ARGV[j]) or '0') < tonumber(ARGV[j + 1]) then
      short = true
      break
    end
  end
  if short then
    refused[#refused + 1] = tonumber(basket)
  else
    for j = i + 2, last, 2 do
      redis.call('DECRBY', ARGV[j], ARGV[j + 1])
    end
  end
  i = last + 2
end
return refused
