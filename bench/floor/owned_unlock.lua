#!lua flags=allow-cross-slot-keys
-- floor/owned_unlock.lua: the least a real lock must do to release keys
-- (the lock floor): read each key and delete it only where the owner is
-- this one.
--
-- KEYS[1]     a key of the master, to route the call
-- ARGV[1]     the owner
-- ARGV[2..]   the keys, all served by this master
--
-- Returns the number of keys deleted.
local suffix = ' ' .. ARGV[1]
local n = 0
for i = 2, #ARGV do
  local v = redis.call('GET', ARGV[i])
  if v and string.sub(v, -#suffix) == suffix then
    n = n + redis.call('DEL', ARGV[i])
  end
end
return n
