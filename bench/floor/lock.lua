#!lua flags=allow-cross-slot-keys
-- floor/lock.lua: the least a lock with per-key leases must do to take keys:
-- write each one with a lease.
--
-- KEYS[1]     a key of the master, to route the call
-- ARGV[1]     lease in milliseconds
-- ARGV[2..n]  the keys, all served by this master
--
-- Returns the number of keys written.
for i = 2, #ARGV do
  redis.call('SET', ARGV[i], '1', 'PX', ARGV[1])
end
return #ARGV - 1
