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
	// EventAcquired: a call now holds its keys; Duration is the call's time, waiting included.
	EventAcquired EventKind = "acquired"
	// EventConflict: an attempt of Lock, TryLock or Do met keys another owner holds.
	EventConflict EventKind = "conflict"
	// EventRefused: TryEach refused a basket, not a failure; Err is its *ConflictError.
	EventRefused EventKind = "refused"
	// EventQueued: a waiting call took a place in a key's queue in Redis, once per key.
	EventQueued EventKind = "queued"
	// EventHandedOff: a release handed a waiting call the keys it waited for.
	EventHandedOff EventKind = "handed off"
	// EventRenewed: the watchdog renewed the lock; Duration is the lease left as it landed.
	EventRenewed EventKind = "renewed"
	// EventLost: the lock was lost (never for Close); Err says why.
	EventLost EventKind = "lost"
	// EventReleased: Unlock or Close released the lock; Duration is how long it was held, Err
	// set when the release failed.
	EventReleased EventKind = "released"
	// EventFailed: a call gave up after sending something (a TryEach: one per basket); Err says why.
	EventFailed EventKind = "failed"
	// EventAdmitted: a Processor's Next handed out a basket's lock; Duration is Taken.Waited.
	EventAdmitted EventKind = "admitted"
)
