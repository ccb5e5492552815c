-- take.lua: the examples' fenced write, one SKU's units taken under a lock.
--
-- KEYS[1]  the SKU's stock hash: fields units and fence
-- ARGV[1]  the writer's fencing token for the SKU (Lock.Token)
-- ARGV[2]  the units to take
--
-- A token below 1 is refused: Token returns 0 for a key the lock does not
-- hold. A holder whose lock was lost (paused past its lease, say) while
-- another took the SKU over cannot write: its token is older than the one
-- stored.
--
-- Returns the units left; an error starting with NOTOKEN for a token below
-- 1, with STALE when a newer token has written the SKU.
local token = tonumber(ARGV[1])
if token < 1 then
  return redis.error_reply('NOTOKEN ' .. ARGV[1] .. ': not a key of the lock')
end
local seen = tonumber(redis.call('HGET', KEYS[1], 'fence') or '0')
if token < seen then
  return redis.error_reply('STALE fencing token ' .. ARGV[1] .. ' < ' .. seen)
end
redis.call('HSET', KEYS[1], 'fence', token)
return redis.call('HINCRBY', KEYS[1], 'units', -tonumber(ARGV[2]))
