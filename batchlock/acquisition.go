package batchlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/internal/backoff"
	"github.com/batchlock/batchlock/internal/gates"
	"github.com/batchlock/batchlock/internal/handoff"
	"github.com/batchlock/batchlock/internal/lease"
	"github.com/batchlock/batchlock/internal/wire"
)

// Lock takes every key for the caller, waiting while other owners hold some
// of them, until ctx is done. It returns a held Lock, or an error and no key
// held that was not held before the call. Keys are taken in a global order
// (by slot, then key), and a waiting call keeps only keys before the one it
// waits for, so no two calls wait on each other; it waits in that key's
// queue, handed the key by its holder's release.
func (c *Client) Lock(ctx context.Context, keys []string, opts ...LockOption) (*Lock, error) {
	lc, err := lockConfigOf(opts)
	if err != nil {
		return nil, err
	}
	return c.lock(ctx, keys, lc, true)
}

// TryLock makes one attempt to take every key. When another owner holds any
// of them it returns a *ConflictError (which Is ErrNotObtained) listing
// those keys, and no key held that was not held before the call.
func (c *Client) TryLock(ctx context.Context, keys []string, opts ...LockOption) (*Lock, error) {
	lc, err := lockConfigOf(opts)
	if err != nil {
		return nil, err
	}
	if lc.waitSet {
		return nil, invalid("WithWait: TryLock never waits; Lock and Do do")
	}
	return c.lock(ctx, keys, lc, false)
}

// lock is Lock (wait) or TryLock with lc, checked already.
func (c *Client) lock(ctx context.Context, keys []string, lc lockConfig, wait bool) (*Lock, error) {
	userKeys, groups, counted, err := c.plan(keys, lc.shared, lc.units)
	if err != nil {
		return nil, err
	}
	ctx, end, err := c.beginTaking(ctx)
	if err != nil {
		return nil, err
	}
	defer end()

	l := c.newLock(ctx, lc, userKeys, groups)
	l.units = counted
	// start is where the wait the events report begins: the call, or a
	// Processor basket's Add.
	start := cmp.Or(lc.since, time.Now())
	returned := false
	defer func() {
		if !returned {
			// A panic (an observer's): the call leaves nothing behind, not
			// a key, a place in a queue or a gate, and the lock it may have
			// taken is nobody's, then the panic goes on.
			c.abandon(ctx, []*Lock{l}, []releasing{{l: l, groups: l.groups, marks: l.marks}})
		}
	}()
	waitCtx, stopWaiting := ctx, context.CancelFunc(func() {})
	if lc.waitSet && wait {
		waitCtx, stopWaiting = context.WithTimeoutCause(ctx, lc.wait, errWaitOver)
	}
	a := &acquisition{c: c, l: l, wait: wait, ctx: ctx}
	// TryLock is refused at once, with every key another lock of the Client
	// holds.
	busy, err := l.enterGates(waitCtx, wait, a.waitingAtGate)
	if err == nil && len(busy) > 0 {
		conflict := &ConflictError{Keys: c.names.UserKeys(busy), Holders: c.gateHolders(busy)}
		l.emit(Event{Kind: EventConflict, Conflict: conflict.Keys})
		err = conflict
	}
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
		if err = c.keep(ctx, l); err != nil {
			c.rollback(ctx, l, l.groups)
		}
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

// errWaitOver is the cause that ends a wait bounded by WithWait.
var errWaitOver = errors.New("batchlock: waited for WithWait")

// acquisition is one Lock or TryLock call taking its lock, and all its
// state: it enters the gates, makes attempts in Redis (take, each one
// acquire call), and after a refusal keeps its keys in order
// (keepInOrder), waits for its turn (waitForTurn), renews what it holds
// meanwhile, and finishes with the lease checked (finishTaking).
type acquisition struct {
	c    *Client
	l    *Lock
	wait bool // Lock: wait for keys others hold; TryLock: refuse at once
	// ctx is the call's context, which a WithWait may outlast: a rollback
	// waits for its release while it lasts, so that the call returns with
	// nothing held, its wait over or not.
	ctx context.Context

	held  int      // groups[:held] are held
	valid validity // of the groups held
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
		if l.gatedCount() < len(l.keys) {
			var err error
			if end, err = a.regate(ctx, end); err != nil {
				return err
			}
		}
		takenUp := a.takeUp(ctx)
		start := time.Now()
		groups := l.groups[a.held:end]
		outcome := c.acquire(ctx, l, groups, a.mode())
		for _, m := range outcome.marks {
			if !slices.Contains(l.marks, m) {
				l.marks = append(l.marks, m)
			}
		}
		switch {
		case outcome.err != nil:
			taken := outcome.mayHold(groups)
			if a.waited || takenUp {
				// Our place in the queue of the group waited for, which
				// this attempt may have left as it was, or the key
				// granted to us that it took up.
				taken = append(taken, groups[0])
			}
			c.rollback(a.ctx, l, append(slices.Clip(l.groups[:a.held]), taken...))
			return outcome.err
		case outcome.refused < 0 && end < len(l.groups):
			// The group waited for is ours (or the keys before a gate
			// another lock of the Client holds): the rest goes in one
			// attempt.
			a.valid.took(start.Add(l.lease))
			a.held = end
			a.refusedAlone = false
			continue
		case outcome.refused < 0:
			a.valid.took(start.Add(l.lease))
			return a.finishTaking(ctx, start)
		}

		c.noteRefusal(start)
		conflict := &ConflictError{Keys: c.names.UserKeys(outcome.conflicts), Holders: c.userHolders(outcome.holders)}
		a.blockers, a.blockerHolders = conflict.Keys, conflict.Holders
		l.emit(Event{Kind: EventConflict, Conflict: conflict.Keys})
		a.placedAt, a.refusedToken = start, outcome.blockerToken
		if !wait {
			c.rollback(a.ctx, l, append(slices.Clip(l.groups[:a.held]), outcome.mayHold(groups)...))
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

// takeUp has the next attempt take up the group granted last, right before
// the groups it asks for, when its lease must be restarted before the lock
// is handed out (see finishTaking) and the same master serves the next
// group: in the attempt's call it costs nothing, where a restart would
// cost a call. It reports whether it did.
func (a *acquisition) takeUp(ctx context.Context) bool {
	c, l, v := a.c, a.l, &a.valid
	n := len(v.granted)
	if n == 0 || a.held == 0 || a.held == len(l.groups) || lease.Enough(time.Until(v.grantUntil), l.lease) {
		return false
	}
	g := l.groups[a.held-1]
	if !slices.Equal(v.granted[n-1].keys, g.keys) {
		return false
	}
	granted, err := c.runner.Master(ctx, g.fenceKey)
	if next, err2 := c.runner.Master(ctx, l.groups[a.held].fenceKey); err != nil || err2 != nil || next != granted {
		return false
	}
	v.granted = v.granted[:n-1]
	if len(v.granted) == 0 {
		v.grantUntil = time.Time{}
	}
	a.held--
	return true
}

// keepInOrder keeps, after a refusal, the groups before the first refused
// one and the keys of that one before the key refused, which holds our place
// in its queue; it gives back what other runs took or queued after it, so
// that the next attempt takes it in order again. The give-back is a rollback
// of those groups: when the call ends meanwhile, it goes on in the
// background, and so does the rollback of the rest.
func (a *acquisition) keepInOrder(ctx context.Context, outcome attemptOutcome, start time.Time) error {
	c, l := a.c, a.l
	failed := a.held + outcome.refused
	var after []group
	for _, i := range append(outcome.granted, outcome.queued...) {
		if a.held+i > failed {
			after = append(after, l.groups[a.held+i])
		}
	}
	if err := c.release(ctx, rollingBack, []releasing{{l: l, groups: after}})[0]; err != nil {
		// A give-back that failed is tried again by the rollback; one
		// whose call ended goes on in the background meanwhile.
		c.rollback(a.ctx, l, append(slices.Clip(l.groups[:failed+1]), after...))
		return fmt.Errorf("%w: could not give back groups taken out of order: %w", ErrNotObtained, inner(err))
	}
	if outcome.refused+outcome.partHeld > 0 {
		a.valid.took(start.Add(l.lease))
	}
	if outcome.partHeld > 0 {
		l.split(failed, outcome.partHeld)
		failed++
	}
	a.held = failed
	// While it waits, the call keeps the gates of its keys up to the one
	// it waits for, and no later one.
	l.leaveGatesAfter(l.keysBefore(failed) + 1)
	a.waited = true
	// Until the refused group is granted, attempts ask for it alone:
	// asking for all the rest again and giving most of it back would load
	// the servers for nothing.
	a.refusedAlone = true
	return nil
}

// finishTaking finishes taking l once every group is held, the last of
// them taken by the attempt that started at last. After a wait the groups'
// leases started at different times; they are restarted only when the wait
// left too little (lease.Kept: nine tenths of a WithTTL lease, half of a
// renewed one), since that costs a call per master; so are the keys granted
// while the call waited when what is left of their grant is not enough
// (lease.Enough: a lease longer than twice the grant). The lock is handed to
// the caller only with enough of its lease left; otherwise it is rolled
// back.
func (a *acquisition) finishTaking(ctx context.Context, last time.Time) error {
	c, l := a.c, a.l
	v := a.valid
	// More than one attempt took keys: the oldest lease began with the
	// first of them, and nothing renewed it while later attempts ran.
	several := a.waited || !v.until.IsZero() && v.until.Add(-l.lease).Before(last)
	restart := v.granted
	if several && !v.until.IsZero() && !lease.Kept(time.Until(v.until), l.lease, l.renew) {
		restart = l.groups
	} else if lease.Enough(time.Until(v.grantUntil), l.lease) {
		restart = nil
	}
	if len(restart) > 0 {
		sent := time.Now()
		if lost, err := c.extend(ctx, l, restart, l.lease); err != nil || len(lost) > 0 {
			c.rollback(a.ctx, l, l.groups)
			if err == nil {
				err = fmt.Errorf("%w: %q expired while waiting for the rest", ErrNotHeld, c.names.UserKeys(lost)[0])
			}
			return fmt.Errorf("%w: could not restart the lease: %w", ErrNotObtained, inner(err))
		}
		if len(restart) == len(l.groups) {
			v.renewed(sent.Add(l.lease))
		} else {
			v.grantRenewed(sent.Add(l.lease))
		}
	}
	l.handValidity(v)
	if err := l.leaseLeft("the keys"); err != nil {
		c.rollback(a.ctx, l, l.groups)
		return err
	}
	return nil
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

// Waiting: in the queue of a key in Redis, for its hand-off, or at a gate
// of this Client.

// waitForTurn waits, with a place in the queue of the group refused, until
// its blockers may be gone: it listens for their release before waiting,
// and reads them once listening, so that a release between the attempt and
// the wait is not missed. Each round of this costs a subscription and a
// read, so a waiter whose blockers keep changing cannot spin faster than the
// servers answer. A wait that ends with ctx rolls back every group, the one
// waited for too.
func (a *acquisition) waitForTurn(ctx context.Context, outcome attemptOutcome, conflict *ConflictError) error {
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
		c.rollback(a.ctx, l, l.groups[:a.held+1])
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
// one the key costs. The grant is counted on for grantTime from before the
// last attempt that found the call's place in the key's queue (the release
// granted it later), and renewed before half of that has passed. A WithTTL
// lock, which nothing renews, a WithReplicas lock, and a call that heard of
// the grant with less than half of it left take the key up with their next
// attempt instead, and so does a call whose grant carries a token no larger
// than the key had when it last refused the call: a late message of a
// grant that lapsed since.
func (a *acquisition) takeGranted(g handoff.Grant) {
	l := a.l
	waited, until := l.groups[a.held], a.placedAt.Add(grantTime)
	if !l.renew || l.ack.Replicas > 0 || g.Token <= a.refusedToken || len(waited.keys) != 1 || waited.keys[0] != g.Key ||
		time.Until(until) < grantTime/2 {
		return
	}
	l.setTokens(waited.keys, []int64{g.Token})
	a.valid.grant(waited, until)
	a.held++
}

// pause waits for a release message, the blocker's lease, a backoff or ctx,
// whichever comes first. Meanwhile it renews the groups already held a third
// of a lease after their oldest lease started, however the wait is cut up.
func (a *acquisition) pause(ctx context.Context, blockerLease time.Duration) error {
	c, l := a.c, a.l
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
		renewAt := a.valid.renewAt(l.lease)
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
		a.valid = validity{until: start.Add(l.lease)}
		return true, nil
	case ctx.Err() != nil:
		return false, context.Cause(ctx)
	case !time.Now().Before(a.valid.end()):
		return false, err
	}
	return false, nil
}

// recheckResult is what a waiter finds when it reads the keys that refused
// it, after its subscription to their releases is confirmed.
type recheckResult int

const (
	stillHeld  recheckResult = iota // every one is still held by other owners: wait for a message
	mayBeFree                       // one may be free, or a read failed: try again at once
	handedOver                      // every one has been granted to the waiter: take all the rest too
)

// recheck reads blockers, the keys of g that refused l's last attempt, to
// tell whether a release came between that attempt and the subscription,
// which no message will announce. A GET per key, on the master that serves
// g (never a replica, which may not have seen the release yet), in place of
// an attempt (a script call) that would find the same. It says stillHeld
// only when that is certain: every key is held by other owners (not l's)
// and l still has its place in the key's queue, so that the release will
// hand the key to it or tell it. For a key l asks shared that readers hold,
// which l may join or not as the queue says, and on any read that fails it
// says mayBeFree, and the waiter tries again as it would without the read;
// a key a writer holds keeps a reader waiting as it keeps a writer. Holds'
// and places' ends are judged by this host's clock: a master whose clock is
// behind makes it say mayBeFree (an attempt that is refused), one ahead
// stillHeld until the blocker's lease, which bounds every pause. A key
// granted to l is handedOver whether l asks it shared or not. With
// handedOver it returns the grant of the one blocker, when there is one
// (its token 0 otherwise).
func (a *acquisition) recheck(ctx context.Context, g group, blockers []string) (recheckResult, handoff.Grant) {
	c, l := a.c, a.l
	shared := false
	for _, k := range blockers {
		i := slices.Index(g.keys, k)
		if i < 0 {
			return mayBeFree, handoff.Grant{}
		}
		if g.counted(i) {
			// Units freed leave the key held: what it holds says
			// nothing of whether they fit now.
			return mayBeFree, handoff.Grant{}
		}
		shared = shared || g.shared(i)
	}
	master, err := c.deployment.masterOf(ctx, blockers[0])
	if err != nil {
		return mayBeFree, handoff.Grant{}
	}
	pipe := master.Pipeline()
	values := make([]*redis.StringCmd, len(blockers))
	for i, k := range blockers {
		values[i] = pipe.Get(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return mayBeFree, handoff.Grant{}
	}
	now, handed, token := time.Now(), 0, int64(0)
	for _, v := range values {
		value, err := v.Result()
		if err != nil {
			return mayBeFree, handoff.Grant{} // gone, or unread
		}
		s, ok := wire.ParseLock(value, now)
		switch {
		case !ok || s.Holds == 0:
			return mayBeFree, handoff.Grant{}
		case slices.Contains(wire.HoldsIn(value), l.hold):
			handed, token = handed+1, s.Token
		case shared && s.Shared || s.Owner == l.owner || slices.Contains(s.Holders, l.owner) || !wire.PlaceIn(value, l.hold, now):
			return mayBeFree, handoff.Grant{} // l may join it; or l lost its place
		}
	}
	switch {
	case handed == 0:
		return stillHeld, handoff.Grant{}
	case handed == 1 && len(values) == 1:
		return handedOver, handoff.Grant{Key: blockers[0], Token: token}
	case handed == len(values):
		return handedOver, handoff.Grant{}
	}
	return mayBeFree, handoff.Grant{}
}

// regate takes again the gates that l gave back after a refusal (see
// Lock.leaveGatesAfter), for the attempt at l.groups[a.held:end], in order
// and without waiting. It returns where the attempt must end: at the first
// key whose gate another lock of the Client holds (its group split there),
// so that the keys before it are taken in Redis first. When that key is the
// first of the attempt, the call waits at its gate, the keys it holds
// renewed meanwhile, and goes on from there. On an error it has rolled back
// what l held (the caller's gates go when the call fails).
func (a *acquisition) regate(ctx context.Context, end int) (int, error) {
	c, l := a.c, a.l
	gi, ki := l.locate(l.gatedCount())
	for gi < end {
		key, shared := l.groups[gi].keys[ki], l.groups[gi].shared(ki)
		v, w := c.gates.Ask(key, l.owner, shared, gi == a.held && ki == 0)
		switch {
		case v == gates.Pass:
			l.addGated(key, shared)
		case v == gates.Upgrade:
			c.rollback(a.ctx, l, a.reached())
			return 0, c.upgradeAtGate(key)
		case w == nil && ki > 0:
			l.split(gi, ki)
			return gi + 1, nil
		case w == nil:
			return gi, nil
		default:
			if err := a.waitAtGate(ctx, w); err != nil {
				c.rollback(a.ctx, l, l.groups[:a.held])
				return 0, err
			}
			l.addGated(key, shared)
		}
		if ki++; ki == len(l.groups[gi].keys) {
			gi, ki = gi+1, 0
		}
	}
	return end, nil
}

// waitAtGate waits for w, l's place at a gate, to be let in, while the
// groups l holds in Redis are renewed a third of a lease after their oldest
// lease started. It holds no place when it returns an error.
func (a *acquisition) waitAtGate(ctx context.Context, w *gates.Waiter) error {
	c, l := a.c, a.l
	w.Notify(a.waitingAtGate)
	retries := 0
	retryAt := time.Time{}
	for {
		// No call waits here before it holds a key in Redis (enterGates
		// waits for every gate first), but without one there is nothing
		// to renew.
		next := time.Now().Add(l.lease)
		if a.held > 0 {
			next = a.valid.renewAt(l.lease)
			if next.Before(retryAt) {
				next = retryAt
			}
		}
		t := time.NewTimer(time.Until(next))
		select {
		case <-w.Granted():
			t.Stop()
			if w.Verdict() == gates.Upgrade {
				return c.upgradeAtGate(w.Key())
			}
			return nil
		case <-ctx.Done():
			t.Stop()
			w.Abandon()
			return c.gateWaitEnded(ctx, w.Key())
		case <-t.C:
		}
		if a.held == 0 {
			continue
		}
		renewed, err := a.renewHeld(ctx)
		if err != nil {
			w.Abandon()
			return fmt.Errorf("%w: waiting for %q, held by another lock of this Client: %w", ErrNotObtained, c.names.UserKey(w.Key()), inner(err))
		}
		if renewed {
			retries, retryAt = 0, time.Time{}
			continue
		}
		retries++
		retryAt = time.Now().Add(backoff.Jittered(retries, 10*time.Millisecond, c.cfg.pollMax))
	}
}

// waitingAtGate counts and tells that l waits at the gate of key, which
// WithWait's error names once the wait runs out.
func (a *acquisition) waitingAtGate(key string) {
	c, l := a.c, a.l
	c.localWaits.Add(1)
	a.blockers = []string{c.names.UserKey(key)}
	a.blockerHolders = c.gateHolders([]string{key})
	l.emit(Event{Kind: EventConflict, Conflict: a.blockers})
}

// gateWaitEnded is the error of a wait at the gate of key that ctx ended.
func (c *Client) gateWaitEnded(ctx context.Context, key string) error {
	return fmt.Errorf("%w: waiting for %q, held by another lock of this Client: %w", ErrNotObtained, c.names.UserKey(key), inner(context.Cause(ctx)))
}

// upgradeAtGate is the error of an owner asking exclusively for key, which
// it holds shared.
func (c *Client) upgradeAtGate(key string) error {
	return upgradeRefused(c.names.UserKey(key))
}

// gateHolders returns, by key without the prefix, the owners holding the
// gates of lockKeys now, sorted.
func (c *Client) gateHolders(lockKeys []string) map[string][]string {
	out := make(map[string][]string, len(lockKeys))
	for _, key := range lockKeys {
		if owners := c.gates.Holders(key); len(owners) > 0 {
			out[c.names.UserKey(key)] = owners
		}
	}
	return out
}

// userHolders is holders (by lock key) by key without the prefix.
func (c *Client) userHolders(holders map[string][]string) map[string][]string {
	out := make(map[string][]string, len(holders))
	for key, owners := range holders {
		out[c.names.UserKey(key)] = owners
	}
	return out
}

// The contention rule. A batch's first attempt goes to every master at
// once: one round trip when nothing stands in the way. A refusal on one
// master makes the call give back what it took on the masters after it and
// take those again once the key is its own: two calls per master for
// nothing. So once a Client has been refused in Redis (by another process:
// its own locks meet at the gates first), its waiting calls ask one master
// at a time, in the global order, for contendedFor.

// noteRefusal records that a call of c was refused in Redis at at (a time
// read from this process's clock, with its monotonic reading), as an offset
// from the Client's start on the monotonic clock: a step of the wall clock
// does not make the Client contended for longer or shorter.
func (c *Client) noteRefusal(at time.Time) { c.lastRefusal.Store(int64(at.Sub(c.started)) + 1) }

// contended reports whether c was refused in Redis within contendedFor.
func (c *Client) contended() bool {
	last := c.lastRefusal.Load()
	return last != 0 && time.Since(c.started)-time.Duration(last-1) < contendedFor
}

// masterRunEnd is the end of the run of groups, from groups[from] on, that
// the master of groups[from] serves, as the map of slots has it; a group
// whose master is unknown runs alone.
func (c *Client) masterRunEnd(ctx context.Context, groups []group, from int) int {
	first, err := c.runner.Master(ctx, groups[from].fenceKey)
	if err != nil {
		return from + 1
	}
	end := from + 1
	for ; end < len(groups); end++ {
		if groups[end].slot == groups[end-1].slot {
			continue
		}
		if addr, err := c.runner.Master(ctx, groups[end].fenceKey); err != nil || addr != first {
			break
		}
	}
	return end
}
