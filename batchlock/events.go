package batchlock

import "time"

// EventKind says what happened to a lock.
type EventKind int

const (
	// EventAcquired: a Lock, TryLock or Do call now holds its keys. Duration
	// is the time the call took, waiting included.
	EventAcquired EventKind = iota + 1
	// EventConflict: an attempt found keys held by another owner (Conflict
	// lists them). A waiting call reports one per attempt in Redis, and one
	// per key it waits for in the process (held by another lock of its
	// Client).
	EventConflict
	// EventRenewed: the watchdog renewed the lock's lease. Duration is the
	// lease that was left when the renewal landed: the margin it kept.
	EventRenewed
	// EventLost: the lock was lost; Err says why.
	EventLost
	// EventReleased: Unlock ran. Duration is the time the lock was held; Err
	// is set when the release failed on the network.
	EventReleased
	// EventFailed: a Lock, TryLock or Do call gave up without the lock, after
	// sending something to Redis, or a TryEach call failed as a whole (one
	// event per basket); Err says why (a *ConflictError, ErrNoReplicas, the
	// context's error...). Duration is the time the call took.
	EventFailed
	// EventQueued: a waiting call took a place in the queue, in Redis, of the
	// keys another Client holds (Conflict), where a release will hand them
	// to it. Once per key waited for, not per attempt.
	EventQueued
	// EventHandedOff: a hand-off reached a waiting call: the keys it waited
	// for in Redis (Conflict) were granted to it by their release, and it
	// goes on with the rest of its batch. Told by the release's message or
	// found by the read a waiter makes once it listens.
	EventHandedOff
	// EventRefused: TryEach refused a basket, as it does when another basket,
	// lock or Client holds one of its keys: a refusal, not a failure.
	// Conflict lists the keys it met; Err is the *ConflictError.
	EventRefused
)

func (k EventKind) String() string {
	switch k {
	case EventAcquired:
		return "acquired"
	case EventConflict:
		return "conflict"
	case EventRenewed:
		return "renewed"
	case EventLost:
		return "lost"
	case EventReleased:
		return "released"
	case EventFailed:
		return "failed"
	case EventQueued:
		return "queued"
	case EventHandedOff:
		return "handed off"
	case EventRefused:
		return "refused"
	}
	return "unknown"
}

// Event is one thing that happened to a lock, as given to WithObserver.
// Slices are shared with the library and must not be modified.
type Event struct {
	Kind     EventKind
	Owner    string
	Keys     []string // the lock's keys, without the prefix
	Conflict []string // EventConflict: keys held by another owner
	Duration time.Duration
	Err      error
}
