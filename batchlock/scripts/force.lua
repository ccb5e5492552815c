-- force.lua: release one lock key whoever holds it, for an operator.
--
-- KEYS[1]  a lock key
--
-- Deletes the key and announces the release as release.lua does (SPUBLISH
-- on a channel named like the key), so that waiters are woken.
-- Returns {now, field, value, ...}: the server time in milliseconds, and the
-- key's fields and values before it was deleted; {now} alone when it was not
-- held.
local time = redis.call('TIME')
local reply = {tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)}
local fields = redis.call('HGETALL', KEYS[1])
if #fields > 0 then
  redis.call('DEL', KEYS[1])
  redis.call('SPUBLISH', KEYS[1], 'released')
end
for i = 1, #fields do
  reply[#reply + 1] = fields[i]
end
return reply
