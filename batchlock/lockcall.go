package batchlock

import (
	"context"
	"fmt"
	"time"
)

// Lock takes every key for the caller, waiting while other owners hold some
// of them, until ctx is done. It returns a held Lock, or an error and no key
// held that was not held before the call.
//
// Keys are taken in a global order that every client shares (by slot, then
// key): first the in-process gate of each key (another lock of this Client
// holding one is waited for in the process), then in Redis, where the call
// keeps the keys it holds, queues for the first one it could not get (granted
// to it by the holder's release, or free once its lease runs out) and goes
// on from there, so no two callers can wait on each other (no deadlock) and
// a big batch is not starved by small ones. The first attempt asks every
// master at once; for a second after the Client was refused in Redis, each
// attempt asks one master, so that a refusal leaves nothing taken after the
// key refused to give back. The keys it holds are kept alive while it waits;
// once the whole batch is held, their leases are restarted if less than nine
// tenths of a WithTTL lock's lease is left, or less than half of a renewed
// lock's.
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
	if err := checkContext(ctx); err != nil {
		return nil, err
	}
	lc, err := lockConfigOf(opts)
	if err != nil {
		return nil, err
	}
	userKeys, groups, err := c.plan(keys, lc.shared)
	if err != nil {
		return nil, err
	}
	ctx, end, err := c.beginTaking(ctx)
	if err != nil {
		return nil, err
	}
	defer end()

	l := c.newLockFor(ctx, lc, userKeys, groups)

	start := time.Now()
	returned := false
	defer func() {
		if !returned {
			// A panic (an observer's): the call leaves nothing behind, not
			// a key, a place in a queue or a gate, and the lock it may have
			// taken is nobody's, then the panic goes on.
			c.abandon(ctx, l)
		}
	}()
	waitCtx, stopWaiting := ctx, context.CancelFunc(func() {})
	if lc.waitSet && wait {
		waitCtx, stopWaiting = context.WithTimeoutCause(ctx, lc.wait, errWaitOver)
	}
	a := &acquisition{c: c, l: l, wait: wait, ctx: ctx}
	err = a.enterGates(waitCtx)
	if err == nil {
		err = a.take(waitCtx)
	}
	stopWaiting()
	if err != nil && context.Cause(waitCtx) == errWaitOver && ctx.Err() == nil {
		waited := fmt.Errorf("waited %v: %w", lc.wait, context.DeadlineExceeded)
		if len(a.blockers) > 0 {
			err = &ConflictError{Keys: a.blockers, Holders: a.blockerHolders, cause: waited}
		} else {
			// No key was refused: the wait ran out in the routing's retries
			// (a slot in migration, a master down).
			err = fmt.Errorf("%w: %w: %w", ErrNotObtained, waited, inner(err))
		}
	}
	if err == nil {
		err = c.keepIfWanted(ctx, l)
	}
	if err != nil {
		l.leaveGates()
		l.emit(Event{Kind: EventFailed, Duration: time.Since(start), Err: err})
		returned = true
		return nil, err
	}
	c.handOut(l, lc, start)
	returned = true
	return l, nil
}

// abandon ends l, which a call that panicked may have taken or left partly
// taken, and rolls back every group of it.
func (c *Client) abandon(ctx context.Context, l *Lock) {
	c.watchdog.remove(l)
	l.finish(fmt.Errorf("%w: the call that took it panicked", ErrNotHeld))
	c.rollback(ctx, l, l.groups)
}

// newLockFor is the lock a call with lc takes of groups: its owner (WithOwner,
// else the context's, else a fresh one), its lease (WithTTL, else the
// Client's, renewed) and the acknowledgement it needs of replicas.
func (c *Client) newLockFor(ctx context.Context, lc lockConfig, userKeys []string, groups []group) *Lock {
	owner := lc.owner
	if !lc.ownerSet {
		if o, ok := OwnerFromContext(ctx); ok && o != "" {
			owner = o
		} else {
			owner = c.newOwner()
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
	return l
}

// keepIfWanted keeps l, every key taken, unless its caller gave up: a
// context cancelled (rather than past its deadline) is noticed only once
// replies arrive, and Close may have come meanwhile; the keys then go back.
// Close is read directly, as its cancellation of ctx runs in a goroutine of
// its own.
func (c *Client) keepIfWanted(ctx context.Context, l *Lock) error {
	var err error
	switch {
	case ctx.Err() != nil && c.closing.Err() == nil:
		err = ended(ctx)
	case !c.hold(l):
		err = ErrClosed
	}
	if err != nil {
		c.rollback(ctx, l, l.groups)
		return err
	}
	c.watchdog.add(l)
	return nil
}

// handOut starts l's life with its caller: its hold counted from now, capped
// by WithMaxHold (the call's, else the Client's).
func (c *Client) handOut(l *Lock, lc lockConfig, start time.Time) {
	l.acquiredAt = time.Now()
	if capped := lc.maxHold; capped.set || c.cfg.maxHold.set {
		if !capped.set {
			capped = c.cfg.maxHold
		}
		l.capHold(capped.d)
	}
	l.emit(Event{Kind: EventAcquired, Duration: l.acquiredAt.Sub(start)})
}
