package batchlock

import "time"

// Event is one thing that happened to a lock, as given to WithObserver.
// Slices are shared with the library and must not be modified.
type Event struct {
	Kind     EventKind
	Owner    string
	Keys     []string // the lock's keys, without the prefix
	Conflict []string // keys held by another owner (EventConflict, EventQueued, EventHandedOff, EventRefused)
	Duration time.Duration
	Err      error
}

// EventKind says what happened to a lock; it reads as a word.
type EventKind string

const (
	// EventAcquired: a Lock, TryLock, Do or TryEach call now holds its keys;
	// Duration is the time the call took, waiting included.
	EventAcquired EventKind = "acquired"
	// EventConflict: an attempt of Lock, TryLock or Do found keys held by
	// another owner, in Redis or at the Client's gates.
	EventConflict EventKind = "conflict"
	// EventRefused: TryEach refused a basket; Err is its *ConflictError. A
	// refusal, not a failure.
	EventRefused EventKind = "refused"
	// EventQueued: a waiting call took a place in the queue, in Redis, of
	// keys another Client holds; once per key waited for.
	EventQueued EventKind = "queued"
	// EventHandedOff: a release handed the keys a waiting call waited for
	// to it.
	EventHandedOff EventKind = "handed off"
	// EventRenewed: the watchdog renewed the lock; Duration is the lease
	// that was left when the renewal landed.
	EventRenewed EventKind = "renewed"
	// EventLost: the lock was lost (never for Close); Err says why.
	EventLost EventKind = "lost"
	// EventReleased: Unlock ran, or Close ended and released the lock;
	// Duration is how long the lock was held, Err set when the release
	// failed.
	EventReleased EventKind = "released"
	// EventFailed: a call gave up without the lock after sending something
	// to Redis (a TryEach failed as a whole: one per basket); Err says why.
	EventFailed EventKind = "failed"
	// EventAdmitted: a Processor's Next handed out the lock of a basket;
	// Duration is how long the basket waited, from Add to its lock
	// (Taken.Waited).
	EventAdmitted EventKind = "admitted"
)
