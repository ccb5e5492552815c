-- capacity.lua: set or change the capacity of a counted key: the units that
-- may be held of it at once.
--
-- KEYS[1]   the key's capacity key
-- KEYS[2]   the lock key (of the same slot)
-- KEYS[3]   the change's mark (of the same slot), named for the change
-- ARGV[1]   "set": make the capacity ARGV[2]; "add": add ARGV[2] to it (less
--           when negative), a key with no capacity having 0
-- ARGV[2]   units
-- ARGV[3]   how long the mark lives, in milliseconds
--
-- A capacity is never left below the units of the key's live holds, nor
-- below 0: such a change is refused and nothing is written. A capacity that
-- grows is announced on the key's channel ("released"), so that waiters for
-- units try again. A change made leaves its mark, holding its reply, for
-- as long as ARGV[3] says: the same change sent again (a reply that came
-- late, and the client sent it again) finds it and is not made twice.
--
-- Returns {changed, capacity, held}: 1 when the capacity was written, 0 when
-- the change was refused; the capacity after the call (0 for none); the
-- units of the key's live holds. Sent again, the change made returns what
-- it returned then.
local made = redis.call('GET', KEYS[3])
if made then
  local new, held = string.match(made, '^(%d+) (%d+)$')
  return {1, tonumber(new), tonumber(held)}
end
local L = layout()
local old = tonumber(redis.call('GET', KEYS[1]) or '0')
local units = tonumber(ARGV[2])
local new = units
if ARGV[1] == 'add' then
  new = old + units
end
local held = 0
local v = L.get(KEYS[2])
if v then
  local now = L.now_ms()
  local s = L.parse(v, KEYS[2], now)
  if s and s.units then
    L.live(s, now)
    held = L.held(s)
  end
end
if new < held or new < 0 then
  return {0, old, held}
end
redis.call('SET', KEYS[1], string.format('%d', new))
redis.call('SET', KEYS[3], string.format('%d %d', new, held), 'PX', ARGV[3])
if new > old then
  redis.call('SPUBLISH', KEYS[2], RELEASED)
end
return {1, new, held}
