#!lua flags=allow-cross-slot-keys
-- floor/hold.lua: the hold floor's calls on one master. "take" is the
-- decrement floor's check and decrement of each basket's part, and keeps
-- what each key's count gave as a hold: a key of its own in the count's
-- slot (the count key, which carries its slot's hashtag, then the hold id),
-- expiring with a lease, holding the token its count's fencing counter
-- gave. "back" gives a part back (counts restored, holds deleted); "sell"
-- turns its holds into a sale (the holds deleted, the units staying taken).
-- A hold whose lease ends gives nothing back: that is left out, as the
-- least a lock with leases costs.
--
-- KEYS[1]     a key of the master, to route the call
-- ARGV[1]     "take", "back" or "sell"
-- ARGV[2]     the holds' lease in milliseconds
-- ARGV[3..]   for each basket's part on this master: the basket's number,
--             its hold id, its number of keys n, then n times a count key
--             and the units
--
-- Returns, of "take", the numbers of the baskets refused (a count short),
-- nothing of which this call took; of "sell", those with a hold gone (its
-- lease ended), sold in part; of "back", nothing.
local op, lease = ARGV[1], ARGV[2]
local out = {}
local i = 3
while i <= #ARGV do
  local basket, hold, n = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local last = i + 1 + 2 * n
  if op == 'take' then
    local short = false
    for j = i + 3, last, 2 do
      if tonumber(redis.call('GET', ARGV[j]) or '0') < tonumber(ARGV[j + 1]) then
        short = true
        break
      end
    end
    if short then
      out[#out + 1] = tonumber(basket)
    else
      for j = i + 3, last, 2 do
        local key = ARGV[j]
        redis.call('DECRBY', key, ARGV[j + 1])
        redis.call('SET', key .. hold, redis.call('INCRBY', key .. 'fence', '1'), 'PX', lease)
      end
    end
  else
    local gone = false
    for j = i + 3, last, 2 do
      local key = ARGV[j]
      gone = redis.call('DEL', key .. hold) == 0 or gone
      if op == 'back' then
        redis.call('INCRBY', key, ARGV[j + 1])
      end
    end
    if gone and op == 'sell' then
      out[#out + 1] = tonumber(basket)
    end
  end
  i = last + 2
end
return out
