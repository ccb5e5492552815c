-- force.lua: release lock keys that this master serves, whoever holds them,
-- for an operator.
--
-- KEYS[1]   a key in the slot of the first lock key, which routes the call
-- ARGV[1..] lock keys
--
-- Deletes each key and announces the release as release.lua does, so that
-- waiters are woken.
-- Returns {now, value or false, ...}: the server time in milliseconds, and per
-- key the value it had before it was deleted, false when it was not held.
local reply = {now_ms()}
for i = 1, #ARGV do
  -- Announced before it is deleted: in a slot being migrated a key, once
  -- deleted, is no longer local, and neither is its channel.
  local v = redis.call('GET', ARGV[i])
  reply[#reply + 1] = v
  if v then
    redis.call('SPUBLISH', ARGV[i], RELEASED)
    redis.call('DEL', ARGV[i])
  end
end
return reply
