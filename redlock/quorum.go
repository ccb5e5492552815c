package redlock

import (
	"slices"
	"time"
)

// quorum is the number of deployments that make a majority of n: two
// majorities always share a deployment, which is what makes the lock
// exclusive.
func quorum(n int) int { return n/2 + 1 }

// validity is how long a majority of the granted leases still runs at now,
// less the drift allowance, and the longest lease granted: until is, per
// granting deployment, the time its lease was confirmed to run to, measured
// from before its request was sent. Validity is not positive when fewer than
// a majority of the n deployments granted. start, taken before any request
// was sent, bounds the lease from above, so that the allowance and the lease
// err on the long side.
func validity(start, now time.Time, until []time.Time, n int, drift float64) (v, lease time.Duration) {
	q := quorum(n)
	if len(until) < q {
		return 0, 0
	}
	sorted := slices.SortedFunc(slices.Values(until), func(a, b time.Time) int { return b.Compare(a) })
	lease = sorted[0].Sub(start)
	// The q-th latest end is the last moment q deployments still hold.
	return sorted[q-1].Sub(now) - driftAllowance(lease, drift), lease
}

// driftAllowance is the part of a lease given up for clock drift.
func driftAllowance(lease time.Duration, drift float64) time.Duration {
	return time.Duration(float64(lease)*drift) + driftFloor
}
