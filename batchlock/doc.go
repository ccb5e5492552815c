// Package batchlock locks many keys at once on Redis Cluster (or one Redis
// node): all of them or none, reentrant per owner, deadlock-free, with
// fencing tokens, automatic lease renewal, prompt wake-up of waiters and a
// signal when a lock is lost.
//
// # What is guaranteed
//
// To its caller a batch is all-or-nothing: Lock, TryLock and Do either return
// holding every key, or return an error having released every hold the call
// took (after any failure — a conflict, a network error, a timeout, a
// cancelled context — no key is left held that was not held before the call).
// Inside one hash slot a batch is taken atomically, by one Lua script. Across
// slots, another observer may briefly see part of a batch held while it is
// being taken or rolled back.
//
// Keys are taken slot by slot in one global order, by every client alike, so
// waiting callers cannot deadlock each other. Reentrancy is by owner id: calls
// with the same owner (WithOwner, ContextWithOwner, or inside Do) may hold the
// same keys at once; each Lock releases only its own holds, and a key is freed
// when its last hold goes.
//
// Every lock has a lease. Without WithTTL the Client's watchdog renews it
// every lease/3 (WithLease, default 30s); when a renewal finds a key no longer
// held, or cannot confirm the lease before it runs out, the lock is lost:
// Done closes, Err wraps ErrLockLost, and Do cancels its function's context.
// A fixed WithTTL lease is not renewed and ends the lock when it runs out.
//
// Redis replicates asynchronously: a failover can lose a lock that had not
// reached the replica. Leases assume clocks advance at about the same rate
// everywhere. Fencing tokens (Lock.Token) are the defence against a holder
// that was paused past its lease: storage that rejects a write with a token
// smaller than one it has seen for the key cannot be written by a stale
// holder.
//
// # Cost
//
// A batch costs one script call per slot it touches (chunked at 512 keys),
// sent in one pipeline per master, to all masters in parallel: about one
// round trip per master touched, whatever the number of keys.
//
// # Data in Redis
//
// Each lock key is prefix+key (default prefix "batchlock:"), a hash with the
// fields owner, fence and one h:<hold id> per hold. Per slot, prefix+"fence:{"
// + tag + "}" counts fencing tokens (it never expires) and prefix+"cancel:{" +
// tag + "}" remembers holds cancelled by a rollback for one lease. Keys
// starting with "fence:{" or "cancel:{" are therefore refused. A release is
// announced with SPUBLISH on a channel named like the lock key.
//
// # Client settings
//
// Calls honour their context's deadline only as far as the go-redis client
// does: set ContextTimeoutEnabled, and short ReadTimeout and
// ClusterOptions.MaxRedirects, for calls that return on time while a master
// is frozen or failing over.
package batchlock
