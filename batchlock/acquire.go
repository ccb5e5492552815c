package batchlock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/batchlock/batchlock/internal/backoff"
)

// Lock takes every key for the caller, waiting while other owners hold some
// of them, until ctx is done. It returns a held Lock, or an error and no key
// held that was not held before the call.
//
// Groups of keys (one per slot) are taken in a global order that every client
// shares: the call keeps the groups it holds, waits for the first one it could
// not get (woken by the holder's release, or by its lease running out) and
// goes on from there, so no two callers can wait on each other (no deadlock)
// and a big batch is not starved by small ones. The groups it holds are kept
// alive while it waits; a WithTTL lease counts from the moment the whole batch
// is held.
func (c *Client) Lock(ctx context.Context, keys []string, opts ...LockOption) (*Lock, error) {
	return c.lock(ctx, keys, opts, true)
}

// TryLock makes one attempt to take every key. When another owner holds any
// of them it returns a *ConflictError (which Is ErrNotObtained) listing
// those keys, and no key held that was not held before the call.
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
	userKeys, groups, err := c.plan(keys)
	if err != nil {
		return nil, err
	}
	if c.isClosed() {
		return nil, ErrClosed
	}
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
	lease, renew := c.cfg.lease, true
	if lc.ttlSet {
		lease, renew = lc.ttl, false
	}
	l := newLock(c, owner, userKeys, groups, lease, renew)
	l.ack = c.cfg.ack
	if lc.ackSet {
		l.ack = lc.ack
	}

	start := time.Now()
	if err := c.take(ctx, l, wait); err != nil {
		c.emit(Event{Kind: EventFailed, Owner: owner, Keys: userKeys, Duration: time.Since(start), Err: err})
		return nil, err
	}
	l.acquiredAt = time.Now()
	c.watchdog.add(l)
	c.emit(Event{Kind: EventAcquired, Owner: owner, Keys: userKeys, Duration: l.acquiredAt.Sub(start)})
	return l, nil
}

// take acquires all of l's groups, or rolls back whatever it may have taken.
func (c *Client) take(ctx context.Context, l *Lock, wait bool) error {
	w := &waiting{}
	defer func() { w.sub.close() }()
	for {
		start := time.Now()
		groups := l.groups[w.held:]
		if w.focus {
			groups = groups[:1]
		}
		outcome := c.acquire(ctx, l, groups)
		if outcome.err != nil {
			c.rollback(ctx, l, w.held, outcome)
			return outcome.err
		}
		if outcome.refused < 0 && w.focus && w.held+1 < len(l.groups) {
			// The group waited for is ours: the rest goes in one attempt.
			if w.held == 0 {
				w.since = start
			}
			w.held++
			w.focus = false
			continue
		}
		if outcome.refused < 0 {
			// Everything is held. After a wait the groups' leases started
			// at different times: restart them all, so that the lease (and
			// a fixed TTL) counts from now.
			if w.waited {
				start = time.Now()
				if lost, err := c.extend(ctx, l, l.groups, l.lease); err != nil || len(lost) > 0 {
					c.rollback(ctx, l, len(l.groups), acquireOutcome{})
					return errors.Join(fmt.Errorf("%w: could not restart the lease", ErrNotObtained), err)
				}
			}
			l.confirm(start.Add(l.lease))
			return nil
		}

		conflict := &ConflictError{Keys: c.userKeys(outcome.conflicts)}
		c.emit(Event{Kind: EventConflict, Owner: l.owner, Keys: l.keys, Conflict: conflict.Keys})
		if !wait {
			c.rollback(ctx, l, w.held, outcome)
			return conflict
		}

		// Keep the groups before the first refused one; give back those
		// after it, so that the next attempt takes them in order again.
		failed := w.held + outcome.refused
		var after []group
		for _, i := range outcome.granted {
			if w.held+i > failed {
				after = append(after, l.groups[w.held+i])
			}
		}
		if _, err := c.release(ctx, l, after, nil); err != nil {
			c.rollback(ctx, l, w.held, outcome)
			return fmt.Errorf("%w: could not give back groups taken out of order: %w", ErrNotObtained, err)
		}
		if w.held == 0 && failed > 0 {
			w.since = start
		}
		w.held = failed
		w.waited = true
		// Until the refused group is granted, attempts ask for it alone:
		// asking for all the rest again and giving most of it back would
		// load the servers and wake other waiters for nothing.
		w.focus = true

		// Listen for the blockers' release before trying again, so that a
		// release between the try and the wait is not missed. Each round of
		// this costs a subscription and an attempt, so a waiter whose
		// blockers keep changing cannot spin faster than the servers answer.
		blockers := outcome.groupConflicts
		if !w.sub.covers(blockers) {
			w.sub.close()
			w.sub = c.waiters.subscribe(ctx, blockers)
			continue
		}
		if err := c.pause(ctx, l, w, outcome.wait); err != nil {
			c.rollback(ctx, l, w.held, acquireOutcome{})
			return fmt.Errorf("%w: waiting for %s: %w", ErrNotObtained, describeKeys(conflict.Keys), err)
		}
		w.attempt++
	}
}

// waiting is the state of a Lock call that waits for some of its groups.
type waiting struct {
	held    int       // groups[:held] are held
	since   time.Time // the oldest lease among them started then
	waited  bool      // more than one attempt was made
	focus   bool      // the next attempt asks for groups[held] alone
	sub     *subscription
	attempt int
}

// pause waits for a release message, the blocker's lease, a backoff or ctx,
// whichever comes first. Meanwhile it renews the groups already held a third
// of a lease after their oldest lease started, however the wait is cut up.
func (c *Client) pause(ctx context.Context, l *Lock, w *waiting, blockerLease time.Duration) error {
	d := backoff.Jittered(w.attempt, time.Millisecond, c.cfg.pollMax)
	if w.sub.active() {
		// Woken by messages, polling is only the safety net for a lost one.
		d = c.cfg.pollMax
	}
	if blockerLease > 0 && blockerLease+time.Millisecond < d {
		d = blockerLease + time.Millisecond
	}
	deadline := time.Now().Add(d)
	for {
		next := deadline
		renewAt := w.since.Add(l.lease / 3)
		if w.held > 0 && renewAt.Before(next) {
			next = renewAt
		}
		t := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			t.Stop()
			return context.Cause(ctx)
		case <-c.waiters.closing:
			t.Stop()
			return ErrClosed
		case <-w.sub.wake():
			t.Stop()
			return nil
		case <-t.C:
		}
		if w.held > 0 && !time.Now().Before(renewAt) {
			start := time.Now()
			lost, err := c.extend(ctx, l, l.groups[:w.held], l.lease)
			if err != nil {
				return err
			}
			if len(lost) > 0 {
				return fmt.Errorf("%w: %q expired while waiting for the rest", ErrNotHeld, c.userKeys(lost)[0])
			}
			w.since = start
		}
		if !time.Now().Before(deadline) {
			return nil
		}
	}
}

// acquireOutcome is what one pipelined attempt at some groups found.
type acquireOutcome struct {
	refused        int      // index of the first refused group, -1 when none was
	granted        []int    // groups now held
	conflicts      []string // lock keys held by other owners, in all refused groups
	groupConflicts []string // those of the first refused group
	wait           time.Duration
	unknown        []int // groups whose outcome is unknown (an error)
	err            error
}

func (c *Client) acquire(ctx context.Context, l *Lock, groups []group) acquireOutcome {
	calls := make([]*call, len(groups))
	lease := strconv.FormatInt(l.lease.Milliseconds(), 10)
	for i, g := range groups {
		keys := make([]string, 0, len(g.keys)+2)
		keys = append(append(keys, g.fenceKey, g.cancelKey), g.keys...)
		calls[i] = &call{keys: keys, args: []any{l.owner, l.hold, lease}}
	}
	c.run(ctx, acquireScript, calls, l.ack)

	out := acquireOutcome{refused: -1}
	for i, cl := range calls {
		vals, err := cl.cmd.Slice()
		status := int64(-2)
		if err == nil && len(vals) > 0 {
			status, _ = vals[0].(int64)
		}
		switch {
		case err == nil && status == acquireGranted && len(vals) == len(groups[i].keys)+1:
			out.granted = append(out.granted, i)
			if l.ack.n > 0 && cl.acks < int64(l.ack.n) && out.err == nil {
				out.err = fmt.Errorf("%w: %w: %d of %d replicas acknowledged within %v", ErrNotObtained, ErrNoReplicas, max(cl.acks, 0), l.ack.n, l.ack.timeout)
			}
			l.mu.Lock()
			for j, v := range vals[1:] {
				l.tokens[groups[i].keys[j]], _ = v.(int64)
			}
			l.mu.Unlock()
		case err == nil && status == acquireRefused && len(vals) >= 3:
			c.refused(&out, i, vals)
		default:
			// An error, a cancelled hold (a rollback overtook this
			// acquire) or a reply of another shape: the group may or
			// may not be held.
			out.unknown = append(out.unknown, i)
			if err == nil {
				err = fmt.Errorf("unexpected reply %v", vals)
			}
			if out.err == nil {
				out.err = fmt.Errorf("batchlock: acquire: %w", err)
			}
		}
	}
	return out
}

func (c *Client) refused(out *acquireOutcome, i int, vals []any) {
	wait, _ := vals[1].(int64)
	keys := make([]string, 0, len(vals)-2)
	for _, v := range vals[2:] {
		if s, ok := v.(string); ok {
			keys = append(keys, s)
		}
	}
	out.conflicts = append(out.conflicts, keys...)
	if out.refused < 0 {
		out.refused = i
		out.groupConflicts = keys
		out.wait = time.Duration(wait) * time.Millisecond
	}
}

// rollback releases every hold the call may have taken: groups[:held], and
// the groups of the last attempt (which started at held) that were granted
// or whose outcome is unknown. Releases are idempotent; a group of unknown
// outcome is also marked cancelled, so that its acquire, should it still be
// in flight (a frozen master), cannot take it later.
func (c *Client) rollback(ctx context.Context, l *Lock, held int, last acquireOutcome) {
	ctx, cancel := detached(ctx)
	defer cancel()
	groups := append([]group(nil), l.groups[:held]...)
	for _, i := range last.granted {
		groups = append(groups, l.groups[held+i])
	}
	unknown := make(map[int]bool, len(last.unknown))
	for _, i := range last.unknown {
		unknown[len(groups)] = true
		groups = append(groups, l.groups[held+i])
	}
	_, _ = c.release(ctx, l, groups, unknown)
}

// release drops l's hold from groups, and returns the lock keys that another
// owner holds. unknown marks (by index in groups) the groups whose hold must also
// be recorded as cancelled.
func (c *Client) release(ctx context.Context, l *Lock, groups []group, unknown map[int]bool) ([]string, error) {
	if len(groups) == 0 {
		return nil, nil
	}
	remember := strconv.FormatInt(l.lease.Milliseconds(), 10)
	calls := make([]*call, len(groups))
	for i, g := range groups {
		cancelled := "0"
		if unknown[i] {
			cancelled = "1"
		}
		keys := make([]string, 0, len(g.keys)+1)
		keys = append(append(keys, g.cancelKey), g.keys...)
		calls[i] = &call{keys: keys, args: []any{l.owner, l.hold, cancelled, remember}}
	}
	c.run(ctx, releaseScript, calls, replicaAck{})
	return collectKeys(calls, "release")
}

// extend makes the lease of groups run at least ttl from now, and returns the
// lock keys that no longer carry l's hold.
func (c *Client) extend(ctx context.Context, l *Lock, groups []group, ttl time.Duration) ([]string, error) {
	ms := strconv.FormatInt(ttl.Milliseconds(), 10)
	calls := make([]*call, len(groups))
	for i, g := range groups {
		calls[i] = &call{keys: g.keys, args: []any{l.hold, ms}}
	}
	c.run(ctx, extendScript, calls, replicaAck{})
	return collectKeys(calls, "extend")
}

// collectKeys gathers the lists of keys the calls replied, and the first error.
func collectKeys(calls []*call, what string) ([]string, error) {
	var keys []string
	var firstErr error
	for _, cl := range calls {
		vals, err := cl.cmd.StringSlice()
		if err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("batchlock: %s: %w", what, err)
			}
			continue
		}
		keys = append(keys, vals...)
	}
	return keys, firstErr
}

// userKeys strips the prefix from lock keys.
func (c *Client) userKeys(lockKeys []string) []string {
	out := make([]string, len(lockKeys))
	for i, k := range lockKeys {
		out[i] = k[len(c.cfg.prefix):]
	}
	return out
}
