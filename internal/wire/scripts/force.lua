-- force.lua: release lock keys that this master serves, whoever holds them,
-- for an operator.
--
-- KEYS      none; or, on a call that follows a redirection, one of its lock
--           keys, for the server to check where their slot is
-- ARGV[1..] lock keys
--
-- Deletes each key and announces the release as release.lua does, so that
-- waiters are woken.
-- Returns {now, {key, ...}, value or false, ...}: the server time in
-- milliseconds, the keys this master does not serve (moved, or in
-- migration), left as they were, and per key the value it had before it was
-- deleted, false when it was not held or not served here.
local L = layout()
local away = {}
local reply = {L.now_ms(), away}
for i = 1, #ARGV do
  local key = ARGV[i]
  local v = L.get(key)
  if v == nil then
    away[#away + 1] = key
    v = false
  elseif v then
    -- Announced before it is deleted: in a slot being migrated a key, once
    -- deleted, is no longer local, and neither is its channel.
    redis.call('SPUBLISH', key, RELEASED)
    redis.call('DEL', key)
  end
  reply[#reply + 1] = v
end
return reply
