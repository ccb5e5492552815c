package batchlock

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/batchlock/batchlock/internal/errprefix"
	"github.com/batchlock/batchlock/internal/lease"
	"github.com/batchlock/batchlock/internal/wire"
)

// take acquires all of l's groups, or rolls back whatever it may have taken.
// Each attempt asks for the groups not held yet, in the global order, whose
// gates it holds (regate); a refusal keeps the groups before the refused one
// and a place in its queue (keepInOrder), then waits for the hand-off
// (waitForTurn), so a waiter holds only keys, and gates, that come before
// every key it waits for.
func (c *Client) take(ctx context.Context, l *Lock, wait bool) error {
	wt := &waiting{}
	defer func() { wt.sub.close() }()
	for {
		if wt.held == len(l.groups) {
			// The last group was granted while the call waited for it.
			return c.finishTaking(ctx, l, wt, time.Now())
		}
		end := len(l.groups)
		switch {
		case wt.refusedAlone:
			end = wt.held + 1
		case wait && c.contended():
			end = c.masterRunEnd(ctx, l.groups, wt.held)
		}
		if len(l.gated) < len(l.keys) {
			var err error
			if end, err = c.regate(ctx, l, wt, end); err != nil {
				return err
			}
		}
		start := time.Now()
		groups := l.groups[wt.held:end]
		outcome := c.acquire(ctx, l, groups, wt.mode(c, wait))
		l.marks = appendNew(l.marks, outcome.marks...)
		switch {
		case outcome.err != nil:
			taken := outcome.mayHold(groups)
			if wt.waited {
				// Our place in the queue of the group waited for, which
				// this attempt may have left as it was.
				taken = append(taken, groups[0])
			}
			c.rollback(ctx, l, append(slices.Clip(l.groups[:wt.held]), taken...))
			return outcome.err
		case outcome.refused < 0 && end < len(l.groups):
			// The group waited for is ours (or the keys before a gate
			// another lock of the Client holds): the rest goes in one
			// attempt.
			if wt.since.IsZero() {
				wt.since = start
			}
			wt.held = end
			wt.refusedAlone = false
			continue
		case outcome.refused < 0:
			if wt.since.IsZero() {
				wt.since = start
			}
			return c.finishTaking(ctx, l, wt, start)
		}

		c.noteRefusal(start)
		conflict := &ConflictError{Keys: c.names.UserKeys(outcome.conflicts), Holders: c.userHolders(outcome.holders)}
		l.blockers, l.blockerHolders = conflict.Keys, conflict.Holders
		l.emit(Event{Kind: EventConflict, Conflict: conflict.Keys})
		wt.placedAt, wt.refusedToken = start, outcome.blockerToken
		if !wait {
			c.rollback(ctx, l, append(slices.Clip(l.groups[:wt.held]), outcome.mayHold(groups)...))
			return conflict
		}
		if err := c.keepInOrder(ctx, l, wt, outcome, start); err != nil {
			return err
		}
		if err := c.waitForTurn(ctx, l, wt, outcome, conflict); err != nil {
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
func (c *Client) keepInOrder(ctx context.Context, l *Lock, wt *waiting, outcome acquireOutcome, start time.Time) error {
	failed := wt.held + outcome.refused
	var after []group
	for _, i := range append(outcome.granted, outcome.queued...) {
		if wt.held+i > failed {
			after = append(after, l.groups[wt.held+i])
		}
	}
	if err := c.releaseAside(ctx, l, after, nil); err != nil {
		// A give-back that failed is tried again by the rollback; one
		// whose call ended goes on in the background meanwhile.
		c.rollback(ctx, l, append(slices.Clip(l.groups[:failed+1]), after...))
		return fmt.Errorf("%w: could not give back groups taken out of order: %w", ErrNotObtained, errprefix.Inner(err))
	}
	if wt.since.IsZero() && outcome.refused+outcome.partHeld > 0 {
		wt.since = start
	}
	if outcome.partHeld > 0 {
		l.split(failed, outcome.partHeld)
		failed++
	}
	wt.held = failed
	// While it waits, the call keeps the gates of its keys up to the one
	// it waits for, and no later one (see gated.go).
	l.leaveGatesAfter(l.keysBefore(failed) + 1)
	wt.waited = true
	// Until the refused group is granted, attempts ask for it alone:
	// asking for all the rest again and giving most of it back would load
	// the servers for nothing.
	wt.refusedAlone = true
	return nil
}

// finishTaking finishes taking l once every group is held, the last of
// them taken by the attempt that started at start. After a wait the groups'
// leases started at different times; they are restarted only when the wait
// left too little (lease.Kept: nine tenths of a WithTTL lease, half of a
// renewed one, which the watchdog renews at once below two thirds), since
// the restart costs a call per master, and so are the keys granted while
// the call waited (see takeGranted) once half their grant has passed. The
// lock is handed to the caller only with enough of its lease left (see
// lease.Enough); otherwise it is rolled back.
func (c *Client) finishTaking(ctx context.Context, l *Lock, wt *waiting, start time.Time) error {
	// After more than one attempt (a wait, or one master at a time), the
	// oldest lease started with the first that took keys: nothing renewed
	// the keys it took while later attempts ran.
	several := wt.waited || !wt.since.IsZero() && wt.since.Before(start)
	if several {
		start = wt.since // zero when every group was granted
	}
	restart := wt.granted
	if !start.IsZero() && several && !lease.Kept(time.Until(start.Add(l.lease)), l.lease, l.renew) {
		restart = l.groups
	} else if time.Until(wt.grantUntil) >= wire.GrantTime/2 {
		restart = nil
	}
	if len(restart) > 0 {
		sent := time.Now()
		if lost, err := c.extend(ctx, l, restart, l.lease); err != nil || len(lost) > 0 {
			c.rollback(ctx, l, l.groups)
			if err == nil {
				err = fmt.Errorf("%w: %q expired while waiting for the rest", ErrNotHeld, c.names.UserKeys(lost)[0])
			}
			return fmt.Errorf("%w: could not restart the lease: %w", ErrNotObtained, errprefix.Inner(err))
		}
		if len(restart) == len(l.groups) || start.IsZero() {
			start = sent
		}
		wt.granted, wt.grantUntil = nil, time.Time{}
	}
	l.expectGrant(wt.granted, wt.grantUntil)
	if start.IsZero() {
		return nil
	}
	l.confirm(start.Add(l.lease))
	if left := time.Until(start.Add(l.lease)); !lease.Enough(left, l.lease) {
		c.rollback(ctx, l, l.groups)
		return fmt.Errorf("%w: the lease ran out while the keys were taken: %v of %v left",
			ErrNotObtained, max(left, 0).Round(time.Millisecond), l.lease)
	}
	return nil
}

// userHolders is holders (by lock key) by key without the prefix.
func (c *Client) userHolders(holders map[string][]string) map[string][]string {
	out := make(map[string][]string, len(holders))
	for key, owners := range holders {
		out[c.names.UserKey(key)] = owners
	}
	return out
}
