package batchlock

import (
	"time"

	"github.com/batchlock/batchlock/internal/lease"
)

// validity is until when a lock, or a call taking one, may count on its
// keys, each time measured from before the request that set it: the lease
// of the keys it took (until, the earliest of their ends; zero while it
// holds none but granted ones), and the keys a release granted it and no
// call of its own renewed since (granted, counted on until grantUntil). The
// acquisition keeps one while it takes the keys, hands it to the Lock, and
// the watchdog and Extend move it on; these methods are the only ways it
// changes.
type validity struct {
	until      time.Time
	granted    []group
	grantUntil time.Time
}

// end is until when every key is known held: the earlier of the two.
func (v validity) end() time.Time {
	if !v.grantUntil.IsZero() && (v.until.IsZero() || v.grantUntil.Before(v.until)) {
		return v.grantUntil
	}
	return v.until
}

// took records keys taken with a lease that runs until end: the lock's
// lease is the earliest of its keys'.
func (v *validity) took(end time.Time) {
	if v.until.IsZero() || end.Before(v.until) {
		v.until = end
	}
}

// grant records g, granted by a release and counted on until until.
func (v *validity) grant(g group, until time.Time) {
	if v.grantUntil.IsZero() || until.Before(v.grantUntil) {
		v.grantUntil = until
	}
	v.granted = append(v.granted, g)
}

// renewed records that every key was renewed until at least end (a lease
// that ran longer is kept): the keys taken run until the later of end and
// what they had, the granted ones until end, or until their grant ends if
// that is later (then still to be renewed).
func (v *validity) renewed(end time.Time) {
	if (v.granted == nil || !v.until.IsZero()) && end.After(v.until) {
		v.until = end
	}
	v.grantRenewed(end)
}

// grantRenewed records that the granted keys were renewed until end. A
// grant that runs longer (a lease shorter than a grant) is kept, to be
// renewed again; otherwise the keys run until the earlier of end and the
// others' end.
func (v *validity) grantRenewed(end time.Time) {
	if v.granted == nil || end.Before(v.grantUntil) {
		return
	}
	v.granted, v.grantUntil = nil, time.Time{}
	v.took(end)
}

// renewAt is when the keys are renewed next, for a lease of leaseLen: a
// third of a lease after the oldest lease began, and half a grant before
// the grant runs out; zero when nothing is held.
func (v validity) renewAt(leaseLen time.Duration) time.Time {
	at := v.leaseRenewal(leaseLen)
	if g := v.grantUntil.Add(-grantTime / 2); !v.grantUntil.IsZero() && (at.IsZero() || g.Before(at)) {
		at = g
	}
	return at
}

// leaseRenewal is when the keys taken (not the granted ones) are renewed
// next; zero when there are none.
func (v validity) leaseRenewal(leaseLen time.Duration) time.Time {
	if v.until.IsZero() {
		return time.Time{}
	}
	return v.until.Add(-leaseLen + lease.RenewalPeriod(leaseLen))
}

// lossAt is when a lock with this validity counts as lost: a renewed lock
// a sixth of its lease before its keys' end (half a renewal period), so
// that its holder hears of the loss before another client can take them; a
// fixed lease when it ends; a grant a sixth of a grant before it ends. ok is
// false when nothing bounds it yet.
func (v validity) lossAt(leaseLen time.Duration, renewed bool) (at time.Time, ok bool) {
	if !v.until.IsZero() {
		at, ok = v.until, true
		if renewed {
			at = at.Add(-lease.LossMargin(leaseLen))
		}
	}
	if g := v.grantUntil.Add(-lease.LossMargin(grantTime)); !v.grantUntil.IsZero() && (!ok || g.Before(at)) {
		at, ok = g, true
	}
	return at, ok
}
