// Package lease holds the rules about lease lengths that batchlock and
// redlock share.
package lease

import (
	"fmt"
	"time"
)

// Shortest is the shortest lease a lock can be given: Redis counts leases
// in milliseconds.
const Shortest = time.Millisecond

// Check says why ttl cannot be a lock's lease, or returns nil.
func Check(ttl time.Duration) error {
	if ttl < Shortest {
		return fmt.Errorf("ttl %v must be at least %v", ttl, Shortest)
	}
	return nil
}

// Enough reports whether a lock whose lease is lease, with left of it still
// to run, may be handed to its caller. At least half must be left: a renewed
// lock must reach its next renewal (a third of a lease away at most) with a
// sixth to spare before it counts as lost, and a holder with a fixed lease
// should get most of what it asked for, not a lock about to run out.
func Enough(left, lease time.Duration) bool {
	return left > 0 && left >= lease/2
}

// Kept reports whether a lock that waited for part of its batch, with left
// of its lease still to run once the whole batch is held, is handed out
// without restarting the leases of the keys it took first. A renewed lock
// needs what Enough needs (the watchdog renews it at once below two thirds);
// a fixed lease (WithTTL) keeps nine tenths of what its holder asked for.
// A restart costs a call per master.
func Kept(left, lease time.Duration, renewed bool) bool {
	if renewed {
		return Enough(left, lease)
	}
	return left > 0 && left >= lease-lease/10
}

// Millis returns d in whole milliseconds, rounded up, for Redis: the server
// keeps a key at least as long as the client counts on it.
func Millis(d time.Duration) int64 {
	return int64((d + time.Millisecond - 1) / time.Millisecond)
}

// The watchdog's rhythm, in fractions of a lease. Enough and Kept rest on
// them: a renewed lock must reach its next renewal with a sixth to spare.

// RenewalPeriod is how long after a lease began it is renewed (with two
// thirds of it left), and how long a renewal call may take.
func RenewalPeriod(lease time.Duration) time.Duration { return lease / 3 }

// RoundHorizon is how far ahead a round of renewals looks: a lock due that
// soon is renewed in this round rather than in one of its own.
func RoundHorizon(lease time.Duration) time.Duration { return lease / 6 }

// LossMargin is how much earlier than its lease's end a renewed lock counts
// as lost (half a renewal period), so that its holder hears of the loss
// before another client can take the keys.
func LossMargin(lease time.Duration) time.Duration { return lease / 6 }

// RetryAfter is how soon a renewal that could not be confirmed is tried
// again.
func RetryAfter(lease time.Duration) time.Duration { return lease / 12 }
