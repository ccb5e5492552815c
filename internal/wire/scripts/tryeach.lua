-- tryeach.lua: try the baskets of a TryEach call, each for its own hold,
-- on the lock keys that this master serves: each basket's keys here are
-- taken all or none, on their own (the process settled conflicts among
-- the baskets before sending them).
--
-- KEYS      none; or, on a call retried after its slot was found elsewhere,
--           a slot's fencing counter, for the server to check where the
--           slot is
-- ARGV[1]   lease in milliseconds
-- ARGV[2]   "first" (each basket's keys here all or none, stopping at the
--           first one another owner holds), or "fresh" (the same, for owners
--           made for this call, which hold no key), with an "s" after it
--           when some key is asked for shared
-- ARGV[3]   the call's cancel mark (in the first slot; see release.lua)
-- ARGV[4..] per basket: its owner id, escaped (see layout.lua), its hold
--           field ("h:" .. hold id), the number c of arguments of its slots,
--           then those c arguments, as attempt.lua reads them
--
-- Returns {reply, ...}: per basket in order, acquire.lua's reply for it in
-- "try" mode ({1, token, ...}; {0, 0, wait, {key}, {}, 0}, naming only the
-- first key held; {-2} for a basket with a slot not served here, which
-- changed nothing of it; or {-3, key}, {-4, key}, {-5, key}).
-- Returns {-1}: the call was cancelled by a rollback that overtook it;
-- nothing was changed.
-- Returns {-2}: the slot of the cancel mark is not served here; nothing was
-- changed.
-- An error of a key fails the call: what the baskets before it wrote is
-- undone.
local lease, mode = ARGV[1], ARGV[2]
local stop = cancelled(ARGV[3])
if stop then
  return stop
end

local replies, undos = {}, {}
local i = 4
while i <= #ARGV do
  local owner, hold, c = ARGV[i], ARGV[i + 1], tonumber(ARGV[i + 2])
  local reply, undo = attempt(owner, hold, lease, mode, 0, i + 3, i + 2 + c)
  if reply.err then
    for k = #undos, 1, -1 do
      undos[k]()
    end
    return reply
  end
  undos[#undos + 1] = undo
  replies[#replies + 1] = reply
  i = i + 3 + c
end
return replies
