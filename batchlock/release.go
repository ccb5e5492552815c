package batchlock

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/batchlock/batchlock/hashtag"
	"github.com/batchlock/batchlock/internal/lease"
	"github.com/batchlock/batchlock/internal/routing"
	"github.com/batchlock/batchlock/internal/wire"
)

// Every hold ends through Client.release, for one of these reasons, which
// say how the release runs.
type releaseReason int

const (
	// unlocking: Unlock and UnlockEach. Each lock releases what it still
	// owes on the caller's context (one attempt of at most unlockTimeout
	// once that is done), and ends; a failure can be retried.
	unlocking releaseReason = iota
	// consuming: Consume, as unlocking, the units of counted keys turned
	// into a sale as they go.
	consuming
	// lettingGo: a lock that ended (lost, or ended by Close) releases what
	// it still owes, for at most rollbackTimeout whatever the context, so
	// that its keys go to their waiters now rather than at the end of
	// their lease.
	lettingGo
	// rollingBack: a call that failed, or gives back part of what it took,
	// releases the given groups and sets the given cancel marks (of its
	// calls of unknown outcome: such a call, still in flight, can then take
	// nothing). That goes on in the background for at most rollbackTimeout
	// (Close waits for it), and the caller waits for it while its context
	// lasts.
	rollingBack
)

// releasing is one lock's share of a release: the groups to drop its hold
// from, the cancel marks to set, and what earlier releases of the lock
// found.
type releasing struct {
	l       *Lock
	groups  []group
	marks   []string
	consume bool     // the units of its counted keys are consumed
	lost    []string // keys found held by another owner so far
	// unknown are the keys an earlier call may have released unseen: one
	// of them found held by another owner was handed on by that call.
	unknown []string
}

// release ends holds for why (see releaseReason) and returns an error per
// share. For unlocking and lettingGo only each share's lock counts: it
// releases what it owes (owed); the shares' locks are distinct. For
// rollingBack the one error is the first of the release, or ctx's cause
// when ctx ended first.
func (c *Client) release(ctx context.Context, why releaseReason, shares []releasing) []error {
	if why == rollingBack {
		return []error{c.rollBackDetached(ctx, shares)}
	}
	// Taken in one order whatever the caller's, so that two releases of
	// the same locks cannot wait for each other.
	locks := make([]*Lock, len(shares))
	for i, s := range shares {
		locks[i] = s.l
	}
	slices.SortFunc(locks, func(a, b *Lock) int { return strings.Compare(a.hold, b.hold) })
	for _, l := range locks {
		l.unlocking.Lock()
		defer l.unlocking.Unlock()
	}
	var cancel context.CancelFunc
	switch {
	case why == lettingGo:
		ctx, cancel = context.WithTimeout(ctx, rollbackTimeout)
		defer cancel()
	case ctx.Err() != nil:
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
		defer cancel()
	}
	errs := make([]error, len(shares))
	var owed []releasing
	var which []int
	ending := why == unlocking || why == consuming
	for i, s := range shares {
		if s.l.released {
			// An Unlock after a Consume has nothing left to do.
			if ending && (why == consuming || !s.l.consumed) {
				errs[i] = s.l.alreadyReleased()
			}
			continue
		}
		if ending {
			c.watchdog.remove(s.l)
		}
		o := s.l.owed()
		// A lock lost already sells nothing: its holder could not count on
		// its keys.
		o.consume = why == consuming && s.l.Err() == nil
		owed = append(owed, o)
		which = append(which, i)
	}
	for n, out := range c.releaseAll(ctx, owed) {
		l := shares[which[n]].l
		if ending {
			errs[which[n]] = l.unlocked(out, why)
			l.consumed = l.released && why == consuming
			continue
		}
		if _, err := l.settle(out); err != nil {
			errs[which[n]] = err
		} else {
			l.released = true
		}
	}
	return errs
}

// rollBackDetached is release for rollingBack: the releases run on after
// ctx ends (for at most rollbackTimeout), and it returns when they are
// done or ctx is.
func (c *Client) rollBackDetached(ctx context.Context, shares []releasing) error {
	if !slices.ContainsFunc(shares, func(s releasing) bool { return len(s.groups)+len(s.marks) > 0 }) {
		return nil
	}
	done := make(chan error, 1)
	c.calls.Join()
	go func() {
		defer c.calls.Leave()
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), rollbackTimeout)
		defer cancel()
		var err error
		for _, o := range c.releaseAll(rctx, shares) {
			err = cmp.Or(err, o.err)
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// rollback rolls back groups of l, which its call may hold, and the cancel
// marks of its calls of unknown outcome (see rollingBack).
func (c *Client) rollback(ctx context.Context, l *Lock, groups []group) {
	_ = c.release(ctx, rollingBack, []releasing{{l: l, groups: groups, marks: l.marks}})
}

// abandon ends locks that a call that panicked may have taken (or began to
// take), and rolls back shares, what of them it sent to Redis.
func (c *Client) abandon(ctx context.Context, locks []*Lock, shares []releasing) {
	for _, l := range locks {
		l.end(endAbandoned, fmt.Errorf("%w: the call that took it panicked", ErrNotHeld))
	}
	_ = c.release(ctx, rollingBack, shares)
}

// UnlockEach releases every non-nil lock of locks as its Unlock would, one
// call per master for all of them, and returns their errors joined. A lock
// given twice is released once; a lock of another Client is ErrInvalid,
// before anything is sent.
func (c *Client) UnlockEach(ctx context.Context, locks []*Lock) error {
	return c.endEach(ctx, unlocking, locks)
}

// ConsumeEach consumes every non-nil lock of locks as its Consume would,
// one call per master for all of them, as UnlockEach says: a batch's sales.
func (c *Client) ConsumeEach(ctx context.Context, locks []*Lock) error {
	return c.endEach(ctx, consuming, locks)
}

// endEach is UnlockEach, or ConsumeEach with why consuming.
func (c *Client) endEach(ctx context.Context, why releaseReason, locks []*Lock) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	var own []*Lock
	for i, l := range locks {
		if l == nil {
			continue
		}
		if l.c != c {
			return invalid("lock %d was taken through another Client", i)
		}
		own = append(own, l)
	}
	slices.SortFunc(own, func(a, b *Lock) int { return strings.Compare(a.hold, b.hold) })
	return errors.Join(c.endAll(ctx, why, slices.Compact(own))...)
}

// endAll releases distinct locks as Unlock (why unlocking) or Consume (why
// consuming) says, one call per master for all of them, and returns each
// one's error.
func (c *Client) endAll(ctx context.Context, why releaseReason, locks []*Lock) []error {
	shares := make([]releasing, len(locks))
	for i, l := range locks {
		shares[i].l = l
	}
	return c.release(ctx, why, shares)
}

// alreadyReleased is the error of an Unlock of a lock released before: by
// an Unlock, or on its own once it was lost.
func (l *Lock) alreadyReleased() error {
	if err := l.Err(); errors.Is(err, ErrLockLost) {
		return fmt.Errorf("%w: %w", ErrNotHeld, inner(err))
	}
	return fmt.Errorf("%w: already released", ErrNotHeld)
}

// unlocked ends l once its release (why unlocking or consuming) went as
// out says, and returns Unlock's or Consume's error. Called with
// l.unlocking held.
func (l *Lock) unlocked(out releaseOutcome, why releaseReason) error {
	taken, err := l.settle(out)
	held := time.Since(l.acquiredAt)
	if err != nil {
		l.emit(Event{Kind: EventReleased, Duration: held, Err: err})
		return fmt.Errorf("batchlock: unlock: %w", inner(err))
	}
	l.released = true
	lost := l.Err()
	l.end(endReleased, ErrNotHeld)
	l.emit(Event{Kind: EventReleased, Duration: held})
	switch {
	case out.unacked != nil && why == consuming:
		return fmt.Errorf("%w; the units are sold on the master, where a failover to a replica without the sale undoes it", out.unacked)
	case len(taken) > 0 && why == consuming:
		return fmt.Errorf("%w: %d of %d keys no longer held, their units not sold, such as %q", ErrNotHeld, len(taken), len(l.keys), l.c.names.UserKeys(taken)[0])
	case len(taken) > 0:
		return fmt.Errorf("%w: %d of %d keys are held by another owner, such as %q", ErrNotHeld, len(taken), len(l.keys), l.c.names.UserKeys(taken)[0])
	case lost != nil:
		return fmt.Errorf("%w: %w", ErrNotHeld, inner(lost))
	}
	return nil
}

// releasedAll says that a release of all l held went through.
func (l *Lock) releasedAll() bool {
	l.unlocking.Lock()
	defer l.unlocking.Unlock()
	return l.released
}

// owed is what l's release still owes: what its earlier releases left, all
// of l at first. Called with l.unlocking held.
func (l *Lock) owed() releasing {
	if l.rest == nil {
		return releasing{l: l, groups: l.groups, marks: l.marks}
	}
	return *l.rest
}

// settle records what a release of owed() did, and returns the keys found
// held by another owner, by it and the earlier ones, or its error. Called
// with l.unlocking held.
func (l *Lock) settle(out releaseOutcome) ([]string, error) {
	rest := l.owed()
	lost := slices.Clip(rest.lost)
	for _, k := range out.lost {
		if !slices.Contains(rest.unknown, k) {
			lost = append(lost, k)
		}
	}
	if out.err != nil {
		// A retry sends only what did not go through: a key released
		// since taken by another owner is no loss of this lock.
		left := rest.without(out.left)
		left.lost, left.unknown = lost, append(slices.Clip(rest.unknown), out.unknown...)
		l.rest = &left
		return nil, out.err
	}
	l.rest = nil
	return lost, nil
}

// without is r less everything but the keys and marks left.
func (r releasing) without(left []string) releasing {
	keep := make(map[string]bool, len(left))
	for _, k := range left {
		keep[k] = true
	}
	out := releasing{l: r.l}
	for _, m := range r.marks {
		if keep[m] {
			out.marks = append(out.marks, m)
		}
	}
	for _, g := range r.groups {
		kept := g
		kept.keys, kept.modes = nil, nil
		for i, k := range g.keys {
			if keep[k] {
				kept.keys = append(kept.keys, k)
				if g.modes != nil {
					kept.modes = append(kept.modes, g.modes[i])
				}
			}
		}
		if len(kept.keys) > 0 {
			out.groups = append(out.groups, kept)
		}
	}
	return out
}

// releaseOutcome is what a release did for one share: the lock keys another
// owner holds, the lock keys and marks whose release did not go through,
// those a call may have released without its reply being read, and the
// first error among them.
type releaseOutcome struct {
	lost, left, unknown []string
	err                 error
	// unacked, for a Consume of a lock taken WithReplicas, is why a call
	// that sold its units was not acknowledged by enough replicas.
	unacked error
}

// releaseAll releases shares: the keys and marks each master serves, for
// all of them, go in one call per master (at most routing.MaxCallKeys keys
// each).
func (c *Client) releaseAll(ctx context.Context, rs []releasing) []releaseOutcome {
	var parts []routing.Part
	var lockOf []int  // the share of parts[i]
	var isMark []bool // parts[i] is a cancel mark
	for i, r := range rs {
		for _, m := range r.marks {
			parts = append(parts, routing.Part{Slot: hashtag.Slot(m), Route: m, Keys: 1})
			lockOf, isMark = append(lockOf, i), append(isMark, true)
		}
		for _, g := range r.groups {
			for _, k := range g.keys {
				parts = append(parts, routing.Part{Slot: g.slot, Route: k, Keys: 1})
				lockOf, isMark = append(lockOf, i), append(isMark, false)
			}
		}
	}
	out := make([]releaseOutcome, len(rs))
	if len(parts) == 0 {
		return out
	}
	// A sale of a lock taken WithReplicas counts once its replicas have it,
	// as its take did: the calls wait for the most any such lock asks.
	var ack routing.Ack
	for _, r := range rs {
		if r.consume && r.l.ack.Replicas > 0 {
			ack.Replicas, ack.Timeout = max(ack.Replicas, r.l.ack.Replicas), max(ack.Timeout, r.l.ack.Timeout)
		}
	}
	var taken []int // parts found held by another owner
	results := c.route(ctx, routing.Batch{
		Step:   "release",
		Sent:   &c.sent.releases,
		Script: wire.ReleaseScript,
		Parts:  parts,
		Follow: true,
		Ack:    ack,
		Args: func(at []int) []any {
			args := make([]any, 0, len(at)+5*len(rs))
			for _, seg := range segmentsBy(lockOf, at) {
				l := rs[lockOf[seg[0]]].l
				m := 0
				for m < len(seg) && isMark[seg[m]] {
					m++
				}
				var consumed []string
				if rs[lockOf[seg[0]]].consume {
					for _, i := range seg[m:] {
						if l.units[parts[i].Route] > 0 {
							consumed = append(consumed, parts[i].Route)
						}
					}
				}
				args = wire.AppendRelease(args, l.owner, l.hold, lease.Millis(l.lease), m, len(seg)-m, len(consumed))
				for _, i := range seg {
					args = append(args, parts[i].Route)
				}
				for _, k := range consumed {
					args = append(args, k, l.c.capacityKey(k))
				}
			}
			return args
		},
		Read: func(cl *routing.Call, at []int) ([]int, error) {
			segs := segmentsBy(lockOf, at)
			lists, err := wire.DecodeKeyLists(cl.Reply.Val(), len(segs))
			if err != nil {
				return nil, cl.Describe(ctx, err)
			}
			for _, seg := range segs {
				r := rs[lockOf[seg[0]]]
				if r.consume && !r.l.ack.Acknowledged(cl) {
					out[lockOf[seg[0]]].unacked = unacknowledged(cl, r.l.ack)
				}
			}
			if lists == nil {
				return nil, nil // every key released
			}
			var away []int
			for n, seg := range segs {
				taken = append(taken, partsNamed(parts, seg, lists[n].Lost)...)
				away = append(away, partsNamed(parts, seg, lists[n].Elsewhere)...)
			}
			return away, nil
		},
	})
	// A key sent again after a run whose reply was lost may have been
	// handed on by that run, and taken by its waiter since: not a loss.
	for _, i := range taken {
		if !results[i].Unknown {
			o := &out[lockOf[i]]
			o.lost = append(o.lost, parts[i].Route)
		}
	}
	for i, r := range results {
		o := &out[lockOf[i]]
		if r.Unknown {
			o.unknown = append(o.unknown, parts[i].Route)
		}
		if r.Err != nil {
			o.left = append(o.left, parts[i].Route)
			o.err = cmp.Or(o.err, r.Err)
		}
	}
	return out
}

// segmentsBy cuts the parts of a call (indices, ascending) into runs of
// one owner each, as ownerOf (by part) says: a multi-lock script's
// arguments, lock by lock.
func segmentsBy(ownerOf []int, at []int) [][]int {
	var out [][]int
	for n, i := range at {
		if n == 0 || ownerOf[i] != ownerOf[at[n-1]] {
			out = append(out, nil)
		}
		out[len(out)-1] = append(out[len(out)-1], i)
	}
	return out
}

// partsNamed returns the indices, among at, of the parts whose route key is
// named.
func partsNamed(parts []routing.Part, at []int, named []string) []int {
	if len(named) == 0 {
		return nil
	}
	want := make(map[string]bool, len(named))
	for _, k := range named {
		want[k] = true
	}
	var out []int
	for _, i := range at {
		if want[parts[i].Route] {
			out = append(out, i)
		}
	}
	return out
}
