package batchlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/batchlock/batchlock/internal/backoff"
	"github.com/batchlock/batchlock/internal/lease"
)

// Lock takes every key for the caller, waiting while other owners hold some
// of them, until ctx is done. It returns a held Lock, or an error and no key
// held that was not held before the call.
//
// Keys are taken in a global order that every client shares (by slot, then
// key): first the in-process gate of each key (another lock of this Client
// holding one is waited for in the process), then in Redis, where the call
// keeps the keys it holds, queues for the first one it could not get (handed
// to it by the holder's release, or free once its lease runs out) and goes
// on from there, so no two callers can wait on each other (no deadlock) and
// a big batch is not starved by small ones. The keys it holds are kept alive
// while it waits; once the whole batch is held, their leases are restarted
// if less than nine tenths of a WithTTL lock's lease is left, or less than
// half of a renewed lock's.
func (c *Client) Lock(ctx context.Context, keys []string, opts ...LockOption) (*Lock, error) {
	return c.lock(ctx, keys, opts, true)
}

// TryLock makes one attempt to take every key. When another owner holds any
// of them it returns a *ConflictError (which Is ErrNotObtained) listing
// those keys, and no key held that was not held before the call; when it is
// another lock of this Client, at once, without a call to Redis.
func (c *Client) TryLock(ctx context.Context, keys []string, opts ...LockOption) (*Lock, error) {
	return c.lock(ctx, keys, opts, false)
}

func (c *Client) lock(ctx context.Context, keys []string, opts []LockOption, wait bool) (*Lock, error) {
	var lc lockConfig
	for _, o := range opts {
		o.applyLock(&lc)
	}
	if err := lc.validate(); err != nil {
		return nil, err
	}
	userKeys, groups, err := c.plan(keys, lc.shared)
	if err != nil {
		return nil, err
	}
	ctx, end, err := c.begin(ctx)
	if err != nil {
		return nil, err
	}
	defer end()
	if err := context.Cause(ctx); err != nil {
		return nil, err
	}

	owner := lc.owner
	if !lc.ownerSet {
		if o, ok := OwnerFromContext(ctx); ok && o != "" {
			owner = o
		} else {
			owner = randomID(16)
		}
	}
	leaseLen, renew := c.cfg.lease, true
	if lc.ttlSet {
		leaseLen, renew = lc.ttl, false
	}
	l := newLock(ctx, c, owner, userKeys, groups, leaseLen, renew)
	l.ack = c.cfg.ack
	if lc.ackSet {
		l.ack = lc.ack
	}

	start := time.Now()
	c.taking.Add(1)
	defer c.taking.Add(-1)
	handedOut := false
	defer func() {
		// Also on a panic (an observer's): a gate held by a lock nobody
		// has would block this Client's other locks on its key for good.
		if !handedOut {
			l.leaveGates()
		}
	}()
	waitCtx, stopWaiting := ctx, context.CancelFunc(func() {})
	if lc.waitSet && wait {
		waitCtx, stopWaiting = context.WithTimeoutCause(ctx, lc.wait, errWaitOver)
	}
	err = c.enterGates(waitCtx, l, wait)
	if err == nil {
		err = c.take(waitCtx, l, wait)
	}
	stopWaiting()
	if err != nil && context.Cause(waitCtx) == errWaitOver && ctx.Err() == nil && len(l.blockers) > 0 {
		err = &ConflictError{Keys: l.blockers, Holders: l.blockerHolders, cause: fmt.Errorf("waited %v: %w", lc.wait, context.DeadlineExceeded)}
	}
	if err == nil {
		// A context cancelled (rather than past its deadline) is noticed
		// only once replies arrive, and Close may have come meanwhile: the
		// caller gave up, so the keys go back. Close is read directly, as
		// its cancellation of ctx runs in a goroutine of its own.
		switch {
		case c.closing.Err() != nil:
			err = ErrClosed
		case context.Cause(ctx) != nil:
			err = context.Cause(ctx)
		}
		if err != nil {
			c.rollback(ctx, l, l.groups)
		} else {
			c.watchdog.add(l)
			c.hold(l)
		}
	}
	if err != nil {
		l.emit(Event{Kind: EventFailed, Duration: time.Since(start), Err: err})
		return nil, err
	}
	handedOut = true
	l.acquiredAt = time.Now()
	if capped := lc.maxHold; capped.set || c.cfg.maxHold.set {
		if !capped.set {
			capped = c.cfg.maxHold
		}
		l.capHold(capped.d)
	}
	l.emit(Event{Kind: EventAcquired, Duration: l.acquiredAt.Sub(start)})
	return l, nil
}

// take acquires all of l's groups, or rolls back whatever it may have taken.
func (c *Client) take(ctx context.Context, l *Lock, wait bool) error {
	wt := &waiting{}
	defer func() { wt.sub.close() }()
	for {
		start := time.Now()
		groups := l.groups[wt.held:]
		if wt.focus {
			groups = groups[:1]
		}
		outcome := c.acquire(ctx, l, groups, wt.mode(c, wait))
		l.marks = appendNew(l.marks, outcome.marks...)
		if outcome.err != nil {
			taken := outcome.mayHold(groups)
			if wt.waited {
				// Our place in the queue of the group waited for, which
				// this attempt may have left as it was.
				taken = append(taken, groups[0])
			}
			c.rollback(ctx, l, append(slices.Clip(l.groups[:wt.held]), taken...))
			return outcome.err
		}
		if outcome.refused < 0 && wt.focus && wt.held+1 < len(l.groups) {
			// The group waited for is ours: the rest goes in one attempt.
			if wt.held == 0 {
				wt.since = start
			}
			wt.held++
			wt.focus = false
			continue
		}
		if outcome.refused < 0 {
			if wt.since.IsZero() {
				wt.since = start
			}
			return c.hand(ctx, l, wt.waited, wt.since, start)
		}

		conflict := &ConflictError{Keys: c.userKeys(outcome.conflicts), Holders: c.userHolders(outcome.holders)}
		l.blockers, l.blockerHolders = conflict.Keys, conflict.Holders
		l.emit(Event{Kind: EventConflict, Conflict: conflict.Keys})
		if !wait {
			c.rollback(ctx, l, append(slices.Clip(l.groups[:wt.held]), outcome.mayHold(groups)...))
			return conflict
		}

		// Keep the groups before the first refused one, and the keys of
		// that one before the key refused, which holds our place in its
		// queue; give back what other runs took or queued after it, so
		// that the next attempt takes it in order again. The give-back is
		// a rollback of those groups: when the call ends meanwhile, it
		// goes on in the background, and so does the rollback of the rest.
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
			return fmt.Errorf("%w: could not give back groups taken out of order: %w", ErrNotObtained, err)
		}
		if wt.held == 0 && failed+outcome.part > 0 {
			wt.since = start
		}
		if outcome.part > 0 {
			l.split(failed, outcome.part)
			failed++
		}
		wt.held = failed
		wt.waited = true
		// Until the refused group is granted, attempts ask for it alone:
		// asking for all the rest again and giving most of it back would
		// load the servers for nothing.
		wt.focus = true

		// Listen for the blockers' release before waiting, and read them
		// once listening, so that a release between the try and the wait
		// is not missed. Each round of this costs a subscription and a
		// read, so a waiter whose blockers keep changing cannot spin faster
		// than the servers answer.
		blockers := outcome.groupConflicts
		if !slices.Equal(blockers, wt.queuedFor) {
			wt.queuedFor = blockers
			l.emit(Event{Kind: EventQueued, Conflict: c.userKeys(blockers)})
		}
		if !wt.sub.covers(blockers) {
			wt.sub.close()
			wt.sub = c.waiters.subscribe(ctx, l.hold, blockers)
			if !wt.sub.active() {
				continue // no message will come: try again, then poll
			}
			switch c.recheck(ctx, l, l.groups[wt.held], blockers) {
			case handedOver:
				wt.focus = false
				l.emit(Event{Kind: EventHandedOff, Conflict: c.userKeys(blockers)})
				fallthrough
			case mayBeFree:
				continue
			}
		}
		if err := c.pause(ctx, l, wt, outcome.wait); err != nil {
			// The group waited for goes too: our place in its queue, and
			// the key itself if it was handed to us meanwhile.
			c.rollback(ctx, l, l.groups[:wt.held+1])
			return fmt.Errorf("%w: waiting for %s: %w", ErrNotObtained, describeKeys(conflict.Keys), err)
		}
		if wt.sub.handedOff() {
			// The key waited for is ours: the next attempt takes it and
			// all the rest, the one call a conflict costs per master.
			wt.focus = false
			l.emit(Event{Kind: EventHandedOff, Conflict: c.userKeys(wt.queuedFor)})
		}
		wt.attempt++
	}
}

// hand finishes taking l once every group is held, the last of them taken by
// the attempt that started at start, the oldest lease at since. After a
// wait the groups' leases started at different times; they are restarted
// only when the wait left too little (lease.Kept: nine tenths of a WithTTL
// lease, half of a renewed one, which the watchdog renews at once below two
// thirds), since the restart costs a call per master. The lock is handed to the
// caller only with enough of its lease left (see lease.Enough); otherwise
// it is rolled back.
func (c *Client) hand(ctx context.Context, l *Lock, waited bool, since, start time.Time) error {
	if waited {
		start = since
	}
	if waited && !lease.Kept(time.Until(since.Add(l.lease)), l.lease, l.renew) {
		start = time.Now()
		if lost, err := c.extend(ctx, l, l.groups, l.lease); err != nil || len(lost) > 0 {
			c.rollback(ctx, l, l.groups)
			if err == nil {
				err = fmt.Errorf("%w: %q expired while waiting for the rest", ErrNotHeld, c.userKeys(lost)[0])
			}
			return fmt.Errorf("%w: could not restart the lease: %w", ErrNotObtained, err)
		}
	}
	l.confirm(start.Add(l.lease))
	if left := time.Until(l.ValidUntil()); !lease.Enough(left, l.lease) {
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
		out[key[len(c.cfg.prefix):]] = owners
	}
	return out
}

// errWaitOver is the cause that ends a wait bounded by WithWait.
var errWaitOver = errors.New("batchlock: waited for WithWait")

// place is how long a waiting call's place in a key's queue lasts unless it
// asks again: a few of its polls, which renew it, so that the place of a
// waiter that died lapses soon.
func (c *Client) place() time.Duration { return max(3*c.cfg.pollMax, 2*time.Second) }

// waiting is the state of a Lock call that waits for some of its groups.
type waiting struct {
	held    int       // groups[:held] are held
	since   time.Time // the oldest lease among them started then
	waited  bool      // more than one attempt was made
	focus   bool      // the next attempt asks for groups[held] alone
	sub     *subscription
	attempt int
	// queuedFor are the lock keys whose queue the call took a place in
	// last (EventQueued says each once).
	queuedFor []string
}

// mode is the mode of the next attempt: a waiter that will not hear of its
// hand-off (no pub/sub, or a subscription not confirmed) polls, and its
// place in a queue says so, so that a key handed to it is kept for it until
// its next poll.
func (wt *waiting) mode(c *Client, wait bool) string {
	switch {
	case !wait:
		return modeTry
	case !c.cfg.pubsub || wt.sub != nil && !wt.sub.active():
		return modePoll
	}
	return modeWait
}

// pause waits for a release message, the blocker's lease, a backoff or ctx,
// whichever comes first. Meanwhile it renews the groups already held a third
// of a lease after their oldest lease started, however the wait is cut up.
func (c *Client) pause(ctx context.Context, l *Lock, wt *waiting, blockerLease time.Duration) error {
	d := backoff.Jittered(wt.attempt, time.Millisecond, c.cfg.pollMax)
	if wt.sub.active() {
		// Woken by messages, polling is only the safety net for a lost one.
		d = c.cfg.pollMax
	}
	if blockerLease > 0 && blockerLease+time.Millisecond < d {
		d = blockerLease + time.Millisecond
	}
	deadline := time.Now().Add(d)
	for {
		next := deadline
		renewAt := wt.since.Add(l.lease / 3)
		if wt.held > 0 && renewAt.Before(next) {
			next = renewAt
		}
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-wt.sub.wakeups():
			t.Stop()
			return nil
		case <-t.C:
		}
		if wt.held > 0 && !time.Now().Before(renewAt) {
			start := time.Now()
			// A renewal that takes long (a slow master) must not make the
			// place in the queue lapse: it gets a third of a place (or of
			// the lease), and if it has not landed by then the next attempt,
			// which renews the place, goes first and the renewal is tried
			// again after it, until the held keys' lease has run out.
			rctx, cancel := context.WithTimeout(ctx, min(c.place(), l.lease)/3)
			lost, err := c.extend(rctx, l, l.groups[:wt.held], l.lease)
			cancel()
			switch {
			case len(lost) > 0:
				return fmt.Errorf("%w: %q expired while waiting for the rest", ErrNotHeld, c.userKeys(lost)[0])
			case err == nil:
				wt.since = start
			case ctx.Err() != nil:
				return context.Cause(ctx)
			case time.Since(wt.since) >= l.lease:
				return err
			default:
				return nil
			}
		}
		if !time.Now().Before(deadline) {
			return nil
		}
	}
}
