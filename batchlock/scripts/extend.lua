-- extend.lua: make the leases of holds on lock keys that this master serves
-- run for at least a given time from now; one call serves several locks.
--
-- KEYS      none; or, on a call that follows a redirection, one of its lock
--           keys, for the server to check where their slot is
-- ARGV[1..] per lock: its hold field, the lease in milliseconds, the number
--           n of its keys, then those n lock keys
--
-- A hold whose lease runs longer already keeps it; a key's expiry is never
-- shortened (another hold of the same owner may run longer). A hold whose
-- lease has ended is not revived: it is dropped, and its key reported.
--
-- Returns {lost, away, lost, away, ...}: per lock in order, the keys that
-- no longer carry a live hold of it (the lock on them is lost), and the keys
-- this master does not serve (moved, or in migration), left as they were.
local now = now_ms()
local out = {}
local i = 1
while i <= #ARGV do
  local hold, lease, n = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  local lost, away = {}, {}
  for j = i + 3, i + 2 + n do
    local key = ARGV[j]
    local v = get(key)
    if v == nil then
      away[#away + 1] = key
    else
      local s = parse(v)
      local ends = s and s.holds[hold]
      if ends and ends > now then
        s.holds[hold] = math.max(ends, now + lease)
        rewrite(key, s, now)
      else
        if ends then
          s.holds[hold] = nil
          rewrite(key, s, now)
        end
        lost[#lost + 1] = key
      end
    end
  end
  out[#out + 1] = lost
  out[#out + 1] = away
  i = i + 3 + n
end
return out
