package batchlock

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/batchlock/batchlock/internal/handoff"
	"github.com/batchlock/batchlock/internal/lease"
)

// acquisition is one Lock or TryLock call taking its lock, and all its
// state: it enters the gates (gated.go), makes attempts in Redis (take, each
// one acquire call), and after a refusal keeps its keys in order
// (keepInOrder), waits for its turn (wait.go, recheck.go), renews what it
// holds meanwhile, and finishes with the lease checked (finishTaking).
type acquisition struct {
	c    *Client
	l    *Lock
	wait bool // Lock: wait for keys others hold; TryLock: refuse at once
	// ctx is the call's context, which a WithWait may outlast: a rollback
	// waits for its release while it lasts, so that the call returns with
	// nothing held, its wait over or not.
	ctx context.Context

	held  int       // groups[:held] are held
	since time.Time // the oldest lease among those not granted started then
	// granted are the held groups granted by a release and not renewed
	// since, counted on until grantUntil.
	granted    []group
	grantUntil time.Time
	// placedAt is when the last attempt that found the call's place in a
	// queue was sent, and refusedToken the token of the key that refused
	// it then.
	placedAt     time.Time
	refusedToken int64
	waited       bool // more than one attempt was made
	refusedAlone bool // the next attempt asks for groups[held], the one refused, alone
	sub          *handoff.Subscription
	attempt      int
	// queuedFor are the lock keys whose queue the call took a place in
	// last (EventQueued says each once).
	queuedFor []string
	// blockers are the keys (without the prefix) the call waited for last,
	// at a gate or in Redis, and who held them, by key: what a WithWait
	// that runs out names.
	blockers       []string
	blockerHolders map[string][]string
}

// take acquires all of l's groups, or rolls back whatever it may have taken.
// Each attempt asks for the groups not held yet, in the global order, whose
// gates it holds (regate); a refusal keeps the groups before the refused one
// and a place in its queue (keepInOrder), then waits for the hand-off
// (waitForTurn), so a waiter holds only keys, and gates, that come before
// every key it waits for.
func (a *acquisition) take(ctx context.Context) error {
	c, l, wait := a.c, a.l, a.wait
	defer func() { a.sub.Close() }()
	for {
		if a.held == len(l.groups) {
			// The last group was granted while the call waited for it.
			return a.finishTaking(ctx, time.Now())
		}
		end := len(l.groups)
		switch {
		case a.refusedAlone:
			end = a.held + 1
		case wait && c.contended():
			end = c.masterRunEnd(ctx, l.groups, a.held)
		}
		if len(l.gated) < len(l.keys) {
			var err error
			if end, err = a.regate(ctx, end); err != nil {
				return err
			}
		}
		start := time.Now()
		groups := l.groups[a.held:end]
		outcome := c.acquire(ctx, l, groups, a.mode())
		l.marks = appendNew(l.marks, outcome.marks...)
		switch {
		case outcome.err != nil:
			taken := outcome.mayHold(groups)
			if a.waited {
				// Our place in the queue of the group waited for, which
				// this attempt may have left as it was.
				taken = append(taken, groups[0])
			}
			a.rollback(append(slices.Clip(l.groups[:a.held]), taken...))
			return outcome.err
		case outcome.refused < 0 && end < len(l.groups):
			// The group waited for is ours (or the keys before a gate
			// another lock of the Client holds): the rest goes in one
			// attempt.
			if a.since.IsZero() {
				a.since = start
			}
			a.held = end
			a.refusedAlone = false
			continue
		case outcome.refused < 0:
			if a.since.IsZero() {
				a.since = start
			}
			return a.finishTaking(ctx, start)
		}

		c.noteRefusal(start)
		conflict := &ConflictError{Keys: c.names.UserKeys(outcome.conflicts), Holders: c.userHolders(outcome.holders)}
		a.blockers, a.blockerHolders = conflict.Keys, conflict.Holders
		l.emit(Event{Kind: EventConflict, Conflict: conflict.Keys})
		a.placedAt, a.refusedToken = start, outcome.blockerToken
		if !wait {
			a.rollback(append(slices.Clip(l.groups[:a.held]), outcome.mayHold(groups)...))
			return conflict
		}
		if err := a.keepInOrder(ctx, outcome, start); err != nil {
			return err
		}
		if err := a.waitForTurn(ctx, outcome, conflict); err != nil {
			return err
		}
	}
}

// keepInOrder keeps, after a refusal, the groups before the first refused
// one and the keys of that one before the key refused, which holds our place
// in its queue; it gives back what other runs took or queued after it, so
// that the next attempt takes it in order again. The give-back is a rollback
// of those groups: when the call ends meanwhile, it goes on in the
// background, and so does the rollback of the rest.
func (a *acquisition) keepInOrder(ctx context.Context, outcome acquireOutcome, start time.Time) error {
	c, l := a.c, a.l
	failed := a.held + outcome.refused
	var after []group
	for _, i := range append(outcome.granted, outcome.queued...) {
		if a.held+i > failed {
			after = append(after, l.groups[a.held+i])
		}
	}
	if err := c.releaseAside(ctx, l, after, nil); err != nil {
		// A give-back that failed is tried again by the rollback; one
		// whose call ended goes on in the background meanwhile.
		a.rollback(append(slices.Clip(l.groups[:failed+1]), after...))
		return fmt.Errorf("%w: could not give back groups taken out of order: %w", ErrNotObtained, inner(err))
	}
	if a.since.IsZero() && outcome.refused+outcome.partHeld > 0 {
		a.since = start
	}
	if outcome.partHeld > 0 {
		l.split(failed, outcome.partHeld)
		failed++
	}
	a.held = failed
	// While it waits, the call keeps the gates of its keys up to the one
	// it waits for, and no later one (see gated.go).
	l.leaveGatesAfter(l.keysBefore(failed) + 1)
	a.waited = true
	// Until the refused group is granted, attempts ask for it alone:
	// asking for all the rest again and giving most of it back would load
	// the servers for nothing.
	a.refusedAlone = true
	return nil
}

// finishTaking finishes taking l once every group is held, the last of
// them taken by the attempt that started at start. After a wait the groups'
// leases started at different times; they are restarted only when the wait
// left too little (lease.Kept: nine tenths of a WithTTL lease, half of a
// renewed one, which the watchdog renews at once below two thirds), since
// the restart costs a call per master. The keys granted while the call
// waited (see takeGranted) are counted on for what is left of their grant:
// they are restarted to the lease unless that is enough already (a lease
// of the grant's order). The lock is handed to the caller only with enough
// of its lease left (see lease.Enough); otherwise it is rolled back.
func (a *acquisition) finishTaking(ctx context.Context, start time.Time) error {
	c, l := a.c, a.l
	// After more than one attempt (a wait, or one master at a time), the
	// oldest lease started with the first that took keys: nothing renewed
	// the keys it took while later attempts ran.
	several := a.waited || !a.since.IsZero() && a.since.Before(start)
	if several {
		start = a.since // zero when every group was granted
	}
	restart := a.granted
	if !start.IsZero() && several && !lease.Kept(time.Until(start.Add(l.lease)), l.lease, l.renew) {
		restart = l.groups
	} else if lease.Enough(time.Until(a.grantUntil), l.lease) {
		restart = nil
	}
	if len(restart) > 0 {
		sent := time.Now()
		if lost, err := c.extend(ctx, l, restart, l.lease); err != nil || len(lost) > 0 {
			a.rollback(l.groups)
			if err == nil {
				err = fmt.Errorf("%w: %q expired while waiting for the rest", ErrNotHeld, c.names.UserKeys(lost)[0])
			}
			return fmt.Errorf("%w: could not restart the lease: %w", ErrNotObtained, inner(err))
		}
		if len(restart) == len(l.groups) || start.IsZero() {
			start = sent
		}
		a.granted, a.grantUntil = nil, time.Time{}
	}
	l.expectGrant(a.granted, a.grantUntil)
	if start.IsZero() {
		return nil
	}
	l.confirm(start.Add(l.lease))
	if left := time.Until(start.Add(l.lease)); !lease.Enough(left, l.lease) {
		a.rollback(l.groups)
		return fmt.Errorf("%w: the lease ran out while the keys were taken: %v of %v left",
			ErrNotObtained, max(left, 0).Round(time.Millisecond), l.lease)
	}
	return nil
}

// rollback rolls back groups of the call's lock, and the cancel marks of
// its calls of unknown outcome (see Client.rollback), waiting for the
// release while the call's context lasts.
func (a *acquisition) rollback(groups []group) {
	a.c.rollback(a.ctx, a.l, groups)
}

// userHolders is holders (by lock key) by key without the prefix.
func (c *Client) userHolders(holders map[string][]string) map[string][]string {
	out := make(map[string][]string, len(holders))
	for key, owners := range holders {
		out[c.names.UserKey(key)] = owners
	}
	return out
}
