-- acquire.lua: take, for one hold of an owner, the lock keys of a run of
-- consecutive slots (in the global order) that this master serves.
--
-- KEYS      none; or, on a call retried after its slot was found elsewhere,
--           the slot's fencing counter, for the server to check where the
--           slot is
-- ARGV[1]   owner id, escaped (see layout.lua)
-- ARGV[2]   hold field, "h:" .. hold id
-- ARGV[3]   lease in milliseconds
-- ARGV[4]   "try": every key of the call or none; "wait": the keys in order
--           up to the first one another owner holds, which are kept, and a
--           place in that key's queue; "poll": as "wait", for a waiter that
--           polls instead of listening for its hand-off message; with an
--           "s" after it when some key is asked for shared
-- ARGV[5]   this hold's cancel mark (in the first slot; see release.lua)
-- ARGV[6]   how long a place in a queue lasts unless renewed, in milliseconds
-- ARGV[7..] per slot: its fencing counter, the number n of its lock keys,
--           with "s" after the mode, their modes (one letter per key: "s"
--           shared, "x" exclusive), then those n lock keys
--
-- The keys are taken as attempt.lua says, once this hold's cancel mark is
-- found unset.
--
-- Returns {1, token, ...}: every key is held, one token per key in order.
-- Returns {0, held, wait, {key, ...}, {token, ...}, part, {holders, ...}
-- [, token]}:
-- keys are held by another owner; holders, one per key listed, names the
-- owners holding it (escaped, comma-separated; several for a key held
-- shared). "try": all of them are listed, and nothing is held (held
-- and part are 0). "wait", "poll": the first of them is listed and this hold has a
-- place in its queue; the slots before its slot (held of them) and the first
-- part keys of its slot are held, with their tokens in order. wait is the
-- longest remaining lease of the keys listed, in milliseconds; "wait" and
-- "poll" add the fencing token of the key listed, so that a grant of it
-- (which takes a larger one) is told from a stale one.
-- Returns {-1}: this hold was cancelled by a rollback that overtook this
-- call; nothing was changed.
-- Returns {-2}: a slot of the call is not served here, or is in
-- migration; nothing was changed.
-- Returns {-3, key}: the owner holds key shared or in units and asked for
-- it exclusively or for more units; nothing was changed.
-- Returns {-4, key}: key, asked for in units, has no capacity set;
-- nothing was changed.
-- Returns {-5, key}: more units of key than its capacity were asked for;
-- nothing was changed.
local stop = cancelled(ARGV[5])
if stop then
  return stop
end
return (attempt(ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[6], 7, #ARGV))
