// Package gates settles conflicts among the locks of one process, the first
// of batchlock's two levels of locking: a call takes the gate of each of its
// keys, in the global order, before it sends anything for them to Redis, so
// that Redis sees at most one contender per key from the process, and a call
// whose keys another lock of the process holds waits here instead of
// sending calls that Redis would refuse.
//
// A key's gate follows the rules of the key in Redis: the locks of one owner
// pass it together (reentrancy); any number of owners pass it shared, or one
// exclusively; waiters go in in arrival order, and a waiting writer is not
// overtaken by later readers; an owner that holds it shared and asks for it
// exclusively is answered Upgrade, never kept waiting, as two such owners
// would wait for each other. A gate is let go with Leave, once per pass.
package gates
