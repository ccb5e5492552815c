// Package redlock takes batchlock's batch locks on several independent Redis
// deployments (single nodes, Sentinel pairs or whole clusters) and counts a
// lock as held only while a majority of them hold it: the Redlock algorithm,
// for users who cannot accept a lock lost to one deployment's failover.
//
// # How it works
//
// An attempt asks every deployment at once for all the keys (batchlock's
// TryLock: all or nothing on each deployment), with one owner id for all and
// a per-deployment timeout (WithDeploymentTimeout, default 200ms). The lock
// is held when a majority (n/2+1 of n) granted it and validity is left: what
// remains, once the attempt is over, of the lease a majority shares (each
// lease counted from the moment its request was sent), less a drift
// allowance of lease*f+2ms (WithDriftFactor, default f=0.01).
// Otherwise everything granted is released, and Lock tries again after a
// random, growing pause. Each deployment's batchlock watchdog renews its part
// of the lock (or a fixed WithTTL lease ends it); Done closes once fewer than
// a majority still hold it, and the remaining minority is released.
// batchlock.WithMaxHold caps a lock here as there, per lock or for every lock
// through WithClientOptions: at the cap every deployment's part ends and
// releases its keys, and the lock is lost with a cause that wraps
// ErrLockLost and says so.
//
// # What is guaranteed
//
// No two owners hold a key at once — two majorities share a deployment, which
// grants a key to one owner at a time — while a minority of the deployments
// may at any moment be down, frozen, partitioned away, or lose what they held
// to a failover. Batches are all-or-nothing to their caller as in batchlock,
// and after a failed call nothing is left held that was not held before,
// except on deployments that did not answer: batchlock's rollback frees
// those when they do, or their lease does.
//
// This rests on assumptions. Clocks must advance at about the same rate on
// the client and the servers (within the drift factor), and must not jump:
// run NTP slewing, not stepping. And a deployment must not forget a lock
// while its lease runs: a node restarted without fsync'd persistence
// (appendfsync always), or a replica promoted before it got the lock, comes
// back without it, and if it was part of one holder's majority another
// client may win a majority too. Keep a restarted node out for at least the
// longest lease (a delayed restart), or persist with fsync.
//
// What no lease can guarantee is the holder's own timing. In the Redlock
// debate (Kleppmann, "How to do distributed locking"; antirez, "Is Redlock
// safe?") both sides agree that a holder paused past its validity — a GC
// pause, swapping, a stopped VM — may act after someone else took the lock;
// only the storage it writes to can stop it, by refusing stale fencing
// tokens. A holder with a fixed lease (WithTTL) must finish within
// Lock.Validity; a renewed one must watch Done.
//
// # Fencing tokens
//
// Each deployment keeps its own fencing counters, so a lock has one token
// per deployment and key: Lock.Tokens, 0 where a deployment did not grant
// it. Tokens of different deployments are unrelated numbers: neither their
// largest nor their sum is a fence (a deployment that granted many locks
// would make an old holder outrank a newer one). What holds is this: on any
// deployment that granted a key to two holders in turn, the later one has
// the larger token, and two majorities always share a deployment. So a
// holder is older than another exactly when some deployment gave it a
// smaller token, which Stale tests. Storage that keeps the tokens of the last
// accepted write per key, and refuses writes whose tokens are Stale against
// them, cannot be written by a stale holder. This too requires deployments
// that keep their data: a node restarted empty counts its tokens from 0
// again, and its tokens then compare wrongly.
//
// # Client settings
//
// Lock keys are named and leased as in batchlock, alike on every deployment
// (WithClientOptions passes batchlock's options, such as WithPrefix and
// WithLease, to all). An attempt never waits for a deployment past the
// deployment timeout, but the request goes on in the background (Close waits
// for it), and Unlock waits for every deployment within its context: give
// each go-redis client ContextTimeoutEnabled and short dial, read and write
// timeouts, so that a frozen deployment costs little.
//
// # Cost
//
// An attempt costs one batchlock TryLock per deployment, in parallel: about
// one round trip per master of the slowest deployment, and the deployment
// timeout when one does not answer.
package redlock
