package batchlock

import "time"

// Event is one thing that happened to a lock, as given to WithObserver.
// Slices are shared with the library and must not be modified.
type Event struct {
	Kind     string // one of the Event constants
	Owner    string
	Keys     []string // the lock's keys, without the prefix
	Conflict []string // keys held by another owner (EventConflict, EventQueued, EventHandedOff)
	Duration time.Duration
	Err      error
}

// The kinds of Event, each a word.
const (
	// EventAcquired: a call now holds its keys; Duration is the call's time, waiting included (a
	// Processor's basket: from its Add, as Taken.Waited).
	EventAcquired = "acquired"
	// EventConflict: an attempt met keys another owner holds; a basket TryEach refused (not a
	// failure) has its *ConflictError in Err.
	EventConflict = "conflict"
	// EventQueued: a waiting call took a place in a key's queue in Redis, once per key.
	EventQueued = "queued"
	// EventHandedOff: a release handed a waiting call the keys it waited for.
	EventHandedOff = "handed off"
	// EventRenewed: the watchdog renewed the lock; Duration is the lease left as it landed.
	EventRenewed = "renewed"
	// EventLost: the lock was lost (never for Close); Err says why.
	EventLost = "lost"
	// EventReleased: Unlock or Close released the lock; Duration is how long it was held, Err
	// set when the release failed.
	EventReleased = "released"
	// EventFailed: a call gave up after sending something (a TryEach: one per basket); Err says why.
	EventFailed = "failed"
)
