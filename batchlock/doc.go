// Package batchlock locks many keys at once on Redis Cluster (or one Redis
// node): all of them or none, reentrant per owner, deadlock-free, with
// fencing tokens, automatic lease renewal, prompt wake-up of waiters and a
// signal when a lock is lost.
//
// A Client works on a go-redis *redis.ClusterClient, made best with
// ClusterOptions (settings under which calls end with their context and
// recover fast after a failover), or a *redis.Client for one node that is
// not a cluster node (a cluster node behind it is refused at the first call,
// with ErrInvalid).
//
// # What is guaranteed
//
// To its caller a batch is all-or-nothing: Lock, TryLock and Do either return
// holding every key, or return an error having released every hold the call
// took (after any failure — a conflict, a network error, a timeout, a
// cancelled context — no key is left held that was not held before the call).
// What one script call takes is atomic on its node: the keys of a run of
// slots on one master, up to 1024 of them; a call that cannot finish undoes
// what it wrote. Across calls, another observer may briefly see part of a
// batch held while it is being taken or rolled back.
//
// No deadlock. Keys are taken in one global order, by every client alike:
// by slot, then by key. An atomic unit is a run of consecutive slots of that
// order served by one master (one script call). A waiting Lock takes, in
// each call, its keys in order up to the first one another owner holds,
// keeps what it took, gives back what later calls took, and waits for that
// key: it holds only keys before the position it waits for. Along any chain
// of callers each waiting for a key the next one holds, the waited-for
// position therefore strictly grows, so the chain cannot close into a cycle.
// (Waiting at a slot instead, holding a key of it handed over while waiting
// for another key of it, could deadlock two waiters queued in different
// orders on the two keys.)
//
// Two levels. Locks of one Client settle their conflicts in the process: a
// call first takes, key by key in the global order, the in-process gate of
// each of its keys, waiting while another lock of the Client (another owner)
// holds one, and only then sends anything to Redis, so Redis sees at most
// one contender per key from each Client (or several that pass a gate
// together: the locks of one owner, readers), and only conflicts between
// Clients (processes) go through its queues. A gate follows the key's rules: the
// locks of one owner pass together, readers share, a waiting writer is not
// overtaken by later readers, an owner reading a key that asks for it
// exclusively gets ErrUpgrade; TryLock refuses at once, with a
// *ConflictError naming the keys, without a call. A gate is let go the
// moment its lock ends, whatever ends it (Unlock, its lease, a loss,
// ForceUnlock, Close). The gates are kept in step with Redis: a call refused
// in Redis at a key gives back the gates of every later key of its batch
// while it waits, and takes them again, in order, before it asks Redis for
// those keys (taking first, in Redis, the keys before a gate another lock
// holds, and renewing what it holds while it waits at that gate). So a call
// waiting for a key, at its gate or in Redis, holds neither gates nor Redis
// keys after it (in Redis it keeps that key's gate). Along a chain of waits,
// each call waits for a key that the next one holds, at a gate or in Redis;
// that one holds it, so it waits, if at all, for that key or a later one,
// and for that same key only in Redis, behind a holder of another Client,
// which holds the key in Redis and so waits for a later one. The waited-for
// position never goes back and grows at least every second step: no cycle.
//
// Waiters queue. The call that finds a key held records its place in the
// key's queue, in arrival order, with its owner and its slot's fencing
// counter; the release that frees the key grants it to the first waiter
// whose place has not lapsed: a fresh fencing token from that counter, the
// waiter's owner, and a hold of 3s (for a waiter that polls rather than
// listens, until its place would have lapsed), and tells only that waiter,
// with the token. The waiter counts on the key for those 3s from before its
// last attempt that found its place, and goes on with the rest of its batch
// without a call for the key; a renewed lock has the key renewed before half
// the grant has passed, while it waits for later keys or by the watchdog
// once it is handed out, and a WithTTL or WithReplicas lock takes it up with
// its next attempt. No other waiter is woken; a waiter whose place lapsed,
// and the readers a lapsed writer kept waiting, are told so, and queue again
// or join. A waiter that gives up (its context ends, its Client closes)
// leaves the queue, and gives the key back if it was granted it meanwhile. A
// place lasts three poll intervals (WithPollInterval), at least 2s, and each
// attempt of a waiter renews it, so the place of a waiter that died lapses
// soon, and so does the grant to one that died after it queued. When a key's
// lease runs out while others wait for it (its holder died), its queue goes
// with it: the waiters notice when that lease ends and take it in whatever
// order they come, then queue again behind whoever got it. A refused waiter
// listens for the release of the key, then reads the key once (a GET, not an
// attempt) to catch a release that came before it listened. A batch's first
// attempt asks every master at once, and a refusal on one makes the call give
// back what it took on the masters after it and take it again later; so for a
// second after a refusal in Redis, a Client's waiting calls ask one master at
// a time, and a conflict costs the refused attempt alone.
//
// Reentrancy is by owner id: calls with the same owner (WithOwner,
// ContextWithOwner, or inside Do) may hold the same keys at once; each Lock
// releases only its own holds, each hold ends with its own lease, and a key
// is freed when its last live hold goes.
//
// WithMaxHold caps how long a lock is held: at the cap it ends as if lost
// (its cause wraps ErrLockLost and ErrMaxHold) and its keys are released to
// their waiters, so that a stuck holder cannot pin them for ever.
//
// # Batch admission
//
// TryEach takes many baskets in one call, as a batch order processor pulls
// a batch of orders: each basket whole or not at all, an earlier basket
// winning a key over a later one, each basket taken an ordinary Lock of its
// own. The baskets' conflicts among themselves and with the Client's other
// locks are settled in the process; the rest go in one script call per
// master for all the baskets (tryeach.lua, one attempt per basket), which
// takes each basket's keys on that master or none of them, stopping at the
// first key held. A basket refused on one master has what it took on the
// others given back in one more call per master. TryEach never waits and
// never takes a key a waiter is queued for. UnlockEach releases many locks
// with one call per master (release.lua serves several locks in a call).
//
// # Shared keys
//
// WithShared names keys taken shared in the same call as the exclusive ones,
// with the same all-or-nothing, order, leases, loss signal, WithReplicas and
// rollback: readers share a key, a writer excludes every other owner and is
// not overtaken by later readers, and an owner reading a key that asks for it
// exclusively gets ErrUpgrade at once. WithShared's documentation has the
// rules, reentrancy across modes and what Token means for a shared key.
//
// # Leases, loss and failover
//
// Every lock has a lease, counted from before the first request that granted
// or lengthened it was sent. A call hands a lock out only with at least half
// its lease left; when taking the keys used up more (a slow or frozen
// master), it rolls back and fails with an error wrapping ErrNotObtained.
// Without WithTTL the Client's watchdog renews the lock a third of a lease
// (WithLease, default 30s) after its lease was last confirmed, at once for a
// lock handed out with less than two thirds of it left; locks due within a
// sixth of a lease share a round. When a renewal finds a key no longer held,
// or cannot confirm the lease a sixth of a lease before it runs out, the lock
// is lost: Done closes, Err wraps ErrLockLost, and Do cancels its function's
// context; the lock's other keys are released at once (in the background,
// for at most 5s), so that their waiters need not wait for their lease. A
// key deleted or taken behind the holder's back is so noticed within a
// renewal period (lease/3) and a round trip; ForceUnlock through the
// holder's own Client ends its lock at once. Close ends and releases every
// lock its Client still holds. A fixed WithTTL lease is not
// renewed and ends the lock when it runs out. Done closes no later than the
// validity ends (ValidUntil).
//
// Redis replicates asynchronously: a failover can lose a lock that had not
// reached the replica, and the slot's fencing counter with it. WithReplicas
// closes that window: every write that grants or lengthens a lease (acquire,
// renewal, Extend, the lease restart after a wait) counts only once replicas
// acknowledged it, when it asks for every replica of each master: with more
// replicas than it asks for, a failover to one that did not acknowledge
// (CLUSTER FAILOVER TAKEOVER on it, or a failover while the others are down)
// loses the lock. Leases assume clocks advance at about the same rate
// everywhere. Fencing tokens (Lock.Token) are the defence against a holder
// that was paused past its lease: storage that rejects a write with a token
// smaller than one it has seen for the key cannot be written by a stale
// holder.
//
// # Contexts, cancellation and clean-up
//
// A call returns within its context. A context's deadline bounds every read;
// a context cancelled without a deadline is noticed when the pending replies
// arrive, at worst after the go-redis client's ReadTimeout. Without a
// deadline, retries of transient errors (a failover's CLUSTERDOWN and MOVED,
// a slot in migration, refused connections) stop after 10s, with an error
// naming the slot. When a call fails, the holds it may have taken are
// released for at most 5s more: the call waits for that while its context
// lasts, and leaves it running in the background once the context is done;
// Close waits for it. So is the give-back of keys a waiting call took out of
// order. A hold whose acquire had an unknown outcome (an attempt that may have
// run, its reply lost, even when a later attempt's reply came) is also
// marked cancelled in each slot it was sent to, for one lease, so that the
// acquire, should it still be in flight (a frozen master), cannot take it
// later.
//
// # Slots on the move
//
// Every script call goes to its master with no key declared: each key is
// judged where it is by the script, so a key whose slot moved or is being
// migrated stops only itself, and the keys that did not move go through as
// if nothing happened. The keys found elsewhere are sent again, one call per
// slot declaring one of them: to the slot's new master after MOVED, and,
// after ASK, for a release, a renewal, Extend or ForceUnlock, to the
// importing master with ASKING (the source no longer has those keys, so the
// importing master is where they are). Keys of a slot being migrated cannot
// be taken until it settles: the acquire is tried again within its context.
// No call carries more than 1024 keys, whatever the batch or the watchdog's
// round.
//
// Unlock with a context that is already done still makes its attempt, for at
// most 2s, so that a deferred Unlock with a request's ended context releases.
// A failed Unlock can be called again; until one succeeds the lock is no
// longer renewed, and its keys are freed when their lease runs out.
//
// # Lifetime and administration
//
// A Lock's Context ends the moment the lock ends, with a cause that says why
// (wrapping ErrLockLost, or ErrNotHeld once released); Done and Err derive
// from it, and Do runs its function in a child of it. Held lists the keys
// held under the Client's prefix, and ForceUnlock releases keys whoever holds
// them, for operators and tools: the batchlock command is built on them.
//
// # Cost
//
// A batch costs one script call per master to take it (per run of
// consecutive slots on a master, at most 1024 keys each) and one to release
// it, sent to all masters in parallel: one round trip per master, whatever
// the number of keys. Inside, a key taken afresh costs one SET (its hold
// ends with the key, so the call reads no clock), a release a GET and a DEL
// (read first: in a slot being migrated, a key deleted is no longer local,
// so nothing may be written after it), each slot one INCRBY of its fencing
// counter, and each acquire one EXISTS of its cancel mark; a release sends a
// message (SPUBLISH) only when it hands the key to a waiter. The scripts make
// the rest of what they might need (parsing a value, a queue, a hand-off)
// only when a key calls for it, and answer a call that went as usual with a
// number or a flat list. When a call finds a slot elsewhere (moved, or in
// migration) it changes nothing, and its slots are tried again one call
// each. docs/bench.md measures it against the fenced floor, the least a lock
// with per-key leases and fencing tokens per slot must do: about the same at
// one key, about 1.4x to 1.5x the masters' CPU past a hundred, most of it
// the owner-checked release.
//
// # Data in Redis
//
// Each lock key is prefix+key (default prefix "batchlock:"; a key's own {tag}
// is kept, so keys co-located stay so). Each slot has a fencing counter,
// which never expires, and the cancel marks of rolled-back holds, under
// reserved names: keys starting with "fence:{" or "cancel:{" are refused.
// Waiters are told of hand-offs with SPUBLISH on a channel named like the
// lock key. The layout is defined in one place for the scripts,
// scripts/layout.lua (the value of a lock key, field by field), and one for
// Go, layout.go (the keys, channels and messages); Held, Inspect and
// ForceUnlock read and change it for tools, and nothing else needs to know it.
//
// # Client settings
//
// batchlock sends its scripts straight to each master's own connection pool
// and retries what can be retried itself: it is the one retry layer, so leave
// go-redis's per-node retries off (ClusterOptions.MaxRetries unset; for a
// single *redis.Client, MaxRetries -1). Set ContextTimeoutEnabled, so that
// reads end with the call's context, and a short ReadTimeout, for calls that
// return on time while a master is frozen or failing over.
package batchlock
