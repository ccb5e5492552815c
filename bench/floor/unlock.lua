#!lua flags=allow-cross-slot-keys
-- floor/unlock.lua: the least a lock must do to release keys: delete each
-- one (a single DEL of keys of several slots is refused, even in a script
-- allowed to cross slots).
--
-- KEYS[1]     a key of the master, to route the call
-- ARGV[1..n]  the keys, all served by this master
--
-- Returns the number of keys deleted.
local n = 0
for i = 1, #ARGV do
  n = n + redis.call('DEL', ARGV[i])
end
return n
