package batchlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/batchlock/batchlock/internal/backoff"
	"github.com/batchlock/batchlock/internal/handoff"
	"github.com/batchlock/batchlock/internal/lease"
	"github.com/batchlock/batchlock/internal/wire"
)

// waitForTurn waits, with a place in the queue of the group refused, until
// its blockers may be gone: it listens for their release before waiting,
// and reads them once listening, so that a release between the attempt and
// the wait is not missed. Each round of this costs a subscription and a
// read, so a waiter whose blockers keep changing cannot spin faster than the
// servers answer. A wait that ends with ctx rolls back every group,
// the one waited for too.
func (a *acquisition) waitForTurn(ctx context.Context, outcome acquireOutcome, conflict *ConflictError) error {
	c, l := a.c, a.l
	blockers := outcome.groupConflicts
	if !slices.Equal(blockers, a.queuedFor) {
		a.queuedFor = blockers
		l.emit(Event{Kind: EventQueued, Conflict: c.names.UserKeys(blockers)})
	}
	if !a.sub.Covers(blockers) {
		a.sub.Close()
		a.sub = c.waiters.Subscribe(ctx, l.hold, blockers)
		if !a.sub.Active() {
			return nil // no message will come: try again, then poll
		}
		switch found, g := a.recheck(ctx, l.groups[a.held], blockers); found {
		case handedOver:
			a.refusedAlone = false
			l.emit(Event{Kind: EventHandedOff, Conflict: c.names.UserKeys(blockers)})
			a.takeGranted(g)
			return nil
		case mayBeFree:
			return nil
		}
	}
	if err := a.pause(ctx, outcome.wait); err != nil {
		// The group waited for goes too: our place in its queue, and the
		// key itself if it was handed to us meanwhile.
		a.rollback(l.groups[:a.held+1])
		return fmt.Errorf("%w: waiting for %s: %w", ErrNotObtained, describeKeys(conflict.Keys), inner(err))
	}
	if g, ok := a.sub.GrantedKey(); ok && slices.Contains(a.queuedFor, g.Key) {
		// The key waited for is ours: the next attempt takes all the rest,
		// and the key too unless it is taken as granted.
		a.refusedAlone = false
		l.emit(Event{Kind: EventHandedOff, Conflict: c.names.UserKeys(a.queuedFor)})
		a.takeGranted(g)
	}
	a.attempt++
	return nil
}

// takeGranted counts g, a key granted to l's hold while it waited, as held
// without a call, when the key is the whole group waited for and the grant
// needs no acknowledgement: its next call on that master would be the only
// one the key costs, and a lock held briefly releases the key before it
// would be due. The grant is counted on for grantTime from before the last
// attempt that found the call's place in the key's queue (the release
// granted it later), and renewed before half of that has passed, by the
// call while it waits or by the watchdog once the lock is handed out. A
// WithTTL lock, which nothing renews, a WithReplicas lock, and a call that
// heard of the grant with less than half of it left take the key up with
// their next attempt instead, and so does a call whose grant carries a
// token no larger than the key had when it last refused the call: a grant
// that came before that refusal, whose message was late (the key was
// granted to this hold, its grant lapsed, and someone else took it).
func (a *acquisition) takeGranted(g handoff.Grant) {
	l := a.l
	waited, until := l.groups[a.held], a.placedAt.Add(wire.GrantTime)
	if !l.renew || l.ack.Replicas > 0 || g.Token <= a.refusedToken || len(waited.keys) != 1 || waited.keys[0] != g.Key ||
		time.Until(until) < wire.GrantTime/2 {
		return
	}
	l.setTokens(waited.keys, []int64{g.Token})
	if a.grantUntil.IsZero() || until.Before(a.grantUntil) {
		a.grantUntil = until
	}
	a.granted = append(a.granted, waited)
	a.held++
}

// errWaitOver is the cause that ends a wait bounded by WithWait.
var errWaitOver = errors.New("batchlock: waited for WithWait")

// placeLease is how long a waiting call's place in a key's queue lasts unless it
// asks again: a few of its polls, which renew it, so that the place of a
// waiter that died lapses soon.
func (c *Client) placeLease() time.Duration { return max(3*c.cfg.pollMax, 2*time.Second) }

// reached are the groups of l a failed call may hold or be queued for: those
// held, and after a refusal the one it waited for (its place in the queue,
// or the key handed to it).
func (a *acquisition) reached() []group {
	l := a.l
	if a.waited {
		return l.groups[:a.held+1]
	}
	return l.groups[:a.held]
}

// mode is the mode of the next attempt: a waiter that will not hear of its
// hand-off (no pub/sub, or a subscription not confirmed) polls, and its
// place in a queue says so, so that a key handed to it is kept for it until
// its next poll.
func (a *acquisition) mode() string {
	c, wait := a.c, a.wait
	switch {
	case !wait:
		return wire.ModeTry
	case !c.cfg.pubsub || a.sub != nil && !a.sub.Active():
		return wire.ModePoll
	}
	return wire.ModeWait
}

// pause waits for a release message, the blocker's lease, a backoff or ctx,
// whichever comes first. Meanwhile it renews the groups already held a third
// of a lease after their oldest lease started, however the wait is cut up.
func (a *acquisition) pause(ctx context.Context, blockerLease time.Duration) error {
	c := a.c
	d := backoff.Jittered(a.attempt, time.Millisecond, c.cfg.pollMax)
	if a.sub.Active() {
		// Woken by messages, polling is only the safety net for a lost one.
		d = c.cfg.pollMax
	}
	if blockerLease > 0 && blockerLease+time.Millisecond < d {
		d = blockerLease + time.Millisecond
	}
	deadline := time.Now().Add(d)
	for {
		next := deadline
		renewAt := a.renewAt()
		if a.held > 0 && renewAt.Before(next) {
			next = renewAt
		}
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-a.sub.Wakeups():
			t.Stop()
			return nil
		case <-t.C:
		}
		if a.held > 0 && !time.Now().Before(renewAt) {
			renewed, err := a.renewHeld(ctx)
			if err != nil {
				return err
			}
			if !renewed {
				// The next attempt, which renews the place, goes first and
				// the renewal is tried again after it.
				return nil
			}
		}
		if !time.Now().Before(deadline) {
			return nil
		}
	}
}

// renewAt is when the groups held while waiting are renewed: a third of a
// lease after the oldest lease began, and a granted key half its grant
// before the grant runs out.
func (a *acquisition) renewAt() time.Time {
	l := a.l
	at := a.since.Add(lease.RenewalPeriod(l.lease))
	if g := grantRenewal(a.grantUntil); !a.grantUntil.IsZero() && (a.since.IsZero() || g.Before(at)) {
		at = g
	}
	return at
}

// grantRenewal is when a grant counted on until until is renewed: half a
// grant before it runs out.
func grantRenewal(until time.Time) time.Time { return until.Add(-wire.GrantTime / 2) }

// validUntil is how long the groups held while waiting are known to be.
func (a *acquisition) validUntil() time.Time {
	l := a.l
	if a.since.IsZero() {
		return a.grantUntil
	}
	until := a.since.Add(l.lease)
	if !a.grantUntil.IsZero() && a.grantUntil.Before(until) {
		until = a.grantUntil
	}
	return until
}

// renewHeld renews the groups l holds while it waits for the rest, and
// reports whether it did. A renewal that takes long (a slow master) must not
// make a place in a queue lapse: it gets a third of a place (or of the
// lease), and when it has not landed by then it reports false, to be tried
// again, until the held keys' lease has run out; it returns an error when
// they are lost, the lease ran out or ctx ended.
func (a *acquisition) renewHeld(ctx context.Context) (bool, error) {
	c, l := a.c, a.l
	start := time.Now()
	rctx, cancel := context.WithTimeout(ctx, lease.RenewalPeriod(min(c.placeLease(), l.lease)))
	lost, err := c.extend(rctx, l, l.groups[:a.held], l.lease)
	cancel()
	switch {
	case len(lost) > 0:
		return false, fmt.Errorf("%w: %q expired while waiting for the rest", ErrNotHeld, c.names.UserKeys(lost)[0])
	case err == nil:
		a.since, a.granted, a.grantUntil = start, nil, time.Time{}
		return true, nil
	case ctx.Err() != nil:
		return false, context.Cause(ctx)
	case !time.Now().Before(a.validUntil()):
		return false, err
	}
	return false, nil
}
