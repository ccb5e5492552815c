// Package batchlock locks many keys at once on Redis Cluster (or one Redis
// node): all of them or none, reentrant per owner, deadlock-free, with
// fencing tokens, automatic lease renewal, prompt hand-off to waiters and a
// signal when a lock is lost.
//
// A Client works on a go-redis *redis.ClusterClient, made best with
// ClusterOptions, or a *redis.Client for one node that is not a cluster node.
// batchlock is its calls' one retry layer: start from ClusterOptions and
// change what you must, keeping go-redis's per-node retries off,
// ContextTimeoutEnabled on and a short ReadTimeout. Client.Check tells
// whether a deployment is fit.
//
// # What is guaranteed
//
// All or nothing, to its caller: Lock, TryLock and Do return holding every
// key, or return an error having released every hold the call took, whatever
// ended it (a conflict, a network error, a timeout, a cancelled context).
// Another observer may briefly see part of a batch held while it is being
// taken or rolled back.
//
// No deadlock: every call takes its keys in one global order (by slot, then
// by key) and, while it waits, holds no key after the one it waits for,
// neither in Redis nor at the in-process gates where the locks of one Client
// settle their conflicts. Only conflicts between Clients reach Redis.
//
// Waiters queue for a key in arrival order. The release that frees it grants
// it to the first waiter still there, with a fresh fencing token, and tells
// that waiter alone, which goes on without a call for that key.
//
// Locks of one owner (WithOwner, ContextWithOwner, or inside Do) are
// reentrant: each releases only its own holds, and a key is freed when its
// last live hold goes. WithShared keys are shared by readers; a waiting
// writer is not overtaken by later readers, and an owner reading a key that
// asks for it exclusively gets ErrUpgrade. WithUnits keys are counted: any
// number of owners hold units of one at once while they fit its capacity
// (SetCapacity), and Consume sells them as it releases them. TryEach takes
// many baskets in one
// call, each whole or not at all; UnlockEach releases many locks with one
// call per master. A Processor is a batch processor's admission on them,
// one per replica: baskets go in as they arrive, and each Next takes the
// oldest that are free.
//
// # Leases, loss and fencing
//
// A lease is counted from before the request that granted or lengthened it
// was sent, and ValidUntil says until when it holds; a call hands a lock out
// only with at least half its lease left. Without WithTTL the Client's
// watchdog renews a lock every third of its lease (WithLease, default 30s).
// When a renewal finds a key gone, or cannot confirm the lease a sixth of a
// lease before it ends, the lock is lost: Done closes, Err wraps ErrLockLost,
// Do cancels its function's context, and the lock's other keys are released
// at once. Done closes no later than ValidUntil. WithMaxHold caps how long a
// lock may be held.
//
// Redis replicates asynchronously: a failover can lose a lock that had not
// reached the replica, and its slot's fencing counter with it. WithReplicas
// makes every write that grants or lengthens a lease count only once the
// replicas acknowledged it. Leases assume clocks run at about the same rate
// everywhere. Fencing tokens (Lock.Token) are the defence against a holder
// paused past its lease: storage that refuses a token smaller than one it has
// seen for the key cannot be written by a stale holder.
//
// # Contexts and clean-up
//
// A call returns within its context; without a deadline, retries of transient
// errors (a failover, a slot in migration) stop after 10s. When a call fails,
// the holds it may have taken are released for at most 5s more, in the
// background once its context is done. Close ends and releases every lock its
// Client holds, and waits for those releases. Unlock with a context already
// done still tries for 2s; a failed Unlock can be called again, and until one
// succeeds the keys go when their lease runs out.
//
// # Data in Redis
//
// Each lock key is prefix+key (default prefix "batchlock:"; a key's own {tag}
// is kept). Each slot has a fencing counter, which never expires, and the
// cancel marks of rolled-back holds: keys starting with "fence:{" or
// "cancel:{" are refused. Waiters are told of hand-offs with SPUBLISH on a
// channel named like the lock key. Held, Inspect and ForceUnlock read and
// change locks for tools; nothing else needs to know the layout.
//
// docs/design.md explains how it works and why (the deadlock argument,
// queues and grants, slots on the move, cost); docs/speed.md measures it.
package batchlock
