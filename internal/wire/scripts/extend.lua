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
-- Returns 0 when every hold was extended, else {lost, away, lost, away,
-- ...}: per lock in order, the keys that no longer carry a live hold of it
-- (the lock on them is lost), and the keys this master does not serve
-- (moved, or in migration), left as they were.
local now, L

-- renew_quickly makes hold's live entry in key, of value v, end at least
-- lease from now, in place (see layout.lua), and reports whether it did;
-- false when v is not a counted or shared value that split reads, or the
-- hold is not there, not live, or a grant (its mark goes: the long way).
-- Its end is written in place while it does not pass the key's expiry; past
-- it, the key is written whole, expiring a lease after the new end, so that
-- the holds renewed within that lease are written in place.
local function renew_quickly(key, v, hold, lease)
  local first = find_hold(v, hold)
  if not first then
    return false
  end
  local from = first + #hold + 1
  local ends = string.match(v, '^(%d+)=', from)
  if not ends or tonumber(ends) <= now then
    return false
  end
  local renewed = string.format('%d', math.max(tonumber(ends), now + lease))
  if #renewed ~= #ends then
    return false
  elseif renewed == ends then
    return true
  end
  local expires = L.expiry(key)
  if tonumber(renewed) <= expires then
    redis.call('SETRANGE', key, from - 1, renewed)
  else
    redis.call('SET', key, string.sub(v, 1, from - 1) .. renewed .. string.sub(v, from + #ends), 'PXAT',
      tonumber(renewed) + lease)
  end
  return true
end
local locks = 0
local i = 1
while i <= #ARGV do
  local hold, lease, n = ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2])
  locks = locks + 1
  -- The usual value: "<token> - <hold>= <owner>", the key as an acquire
  -- took it afresh for this hold, which ends with the key, nobody waiting
  -- (found by plain comparison, as release.lua does).
  local fresh = ' - ' .. hold .. '= '
  for j = i + 3, i + 2 + n do
    local key = ARGV[j]
    local v = redis.pcall('GET', key)
    local at = type(v) == 'string' and string.find(v, ' ', 1, true)
    if at and string.find(v, fresh, at, true) == at and not string.find(v, ' ', at + #fresh, true) then
      local left = redis.call('PTTL', key)
      if left <= 0 then
        note(locks, 1, key)
      elseif left < lease then
        -- SET rather than PEXPIRE: the commands a locking user needs stay as
        -- they were (see docs/operators.md's ACL).
        redis.call('SET', key, v, 'XX', 'PX', lease)
      end
    else
      L = L or layout()
      now = now or L.now_ms()
      if type(v) == 'table' then
        v = L.get(key) -- an error: moved (nil), not a string (false), or raised
      end
      if v == nil then
        note(locks, 2, key)
      elseif type(v) ~= 'string' or not renew_quickly(key, v, hold, lease) then
        local s = L.parse(v, key, now)
        local ends = s and s.holds[hold]
        if ends and ends > now then
          s.holds[hold], s.granted[hold] = math.max(ends, now + lease), nil
          L.rewrite(key, s, now)
        else
          if ends then
            s.holds[hold] = nil
            L.rewrite(key, s, now)
          end
          note(locks, 1, key)
        end
      end
    end
  end
  i = i + 3 + n
end
return keylists(locks)
