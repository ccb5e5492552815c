-- apply.lua: apply one order line to one SKU's stock hash.
--
-- KEYS[1]  the SKU's stock hash
-- ARGV[1]  quantity
-- ARGV[2]  order id
-- ARGV[3]  fencing token of the writer's lock on the SKU, 0 for none
-- ARGV[4]  "1" when orders write the SKU at once (holds of units): the line
--          is recorded by its order ("o:" .. id), not as the last writer
--
-- The stock check is not here on purpose: it is the order's read phase, over
-- all its lines, that decides; this only writes. units and sold move in one
-- script so that initial == units + sold always holds per SKU.
--
-- Under a lock, only one order writes a SKU at a time, so a SKU whose last
-- writer is this order already carries this line: a retried write (after a
-- timeout or a failover) is not applied twice; orders that write at once
-- are known by their own field.
--
-- Returns 1 when applied, 0 when it already was; an error starting with
-- FENCED when a newer token has written the SKU, which means the writer's
-- lock was lost.
if ARGV[4] == '1' then
  if redis.call('HSETNX', KEYS[1], 'o:' .. ARGV[2], 1) == 0 then
    return 0
  end
elseif redis.call('HGET', KEYS[1], 'last') == ARGV[2] then
  return 0
end
local token = tonumber(ARGV[3])
if token > 0 then
  local seen = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
  if token < seen then
    return redis.error_reply('FENCED token ' .. token .. ' is older than ' .. seen)
  end
  redis.call('HSET', KEYS[1], 'fence', token)
end
local qty = tonumber(ARGV[1])
redis.call('HINCRBY', KEYS[1], 'units', -qty)
redis.call('HINCRBY', KEYS[1], 'sold', qty)
redis.call('HSET', KEYS[1], 'last', ARGV[2])
return 1
