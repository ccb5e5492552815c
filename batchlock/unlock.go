package batchlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/batchlock/batchlock/internal/lifetime"
)

// UnlockEach releases every non-nil lock of locks as its Unlock would, one
// call per master for all of them, and returns their errors joined (each as
// Unlock would return it). A lock given twice is released once. A lock of
// another Client is ErrInvalid, before anything is sent. A lock whose
// release failed can be released again, by Unlock or UnlockEach.
func (c *Client) UnlockEach(ctx context.Context, locks []*Lock) error {
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
	// In one order whatever the caller's, so that two UnlockEach on the
	// same locks cannot wait for each other (see unlockAll).
	slices.SortFunc(own, func(a, b *Lock) int { return strings.Compare(a.hold, b.hold) })
	own = slices.Compact(own)
	return errors.Join(c.unlockAll(ctx, own)...)
}

// unlockAll releases locks, distinct and sorted by hold, as Unlock says,
// one call per master for all of them, and returns each one's error. It
// holds every lock's unlocking meanwhile, taken in that order.
func (c *Client) unlockAll(ctx context.Context, locks []*Lock) []error {
	for _, l := range locks {
		l.unlocking.Lock()
		defer l.unlocking.Unlock()
	}
	errs := make([]error, len(locks))
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		ctx, cancel = lifetime.Detached(ctx)
		defer cancel()
	}
	var owed []releasing
	var which []int
	for i, l := range locks {
		if l.released {
			errs[i] = l.alreadyReleased()
			continue
		}
		c.watchdog.remove(l)
		owed = append(owed, l.owed())
		which = append(which, i)
	}
	for n, out := range c.releaseAll(ctx, owed) {
		errs[which[n]] = locks[which[n]].unlocked(out)
	}
	return errs
}

// alreadyReleased is the error of an Unlock of a lock released before: by
// an Unlock, or on its own once it was lost.
func (l *Lock) alreadyReleased() error {
	if err := l.Err(); errors.Is(err, ErrLockLost) {
		return fmt.Errorf("%w: %w", ErrNotHeld, inner(err))
	}
	return fmt.Errorf("%w: already released", ErrNotHeld)
}

// unlocked ends l once its release went as out says, and returns Unlock's
// error. Called with l.unlocking held.
func (l *Lock) unlocked(out releaseOutcome) error {
	taken, err := l.settle(out)
	held := time.Since(l.acquiredAt)
	if err != nil {
		l.emit(Event{Kind: EventReleased, Duration: held, Err: err})
		return fmt.Errorf("batchlock: unlock: %w", inner(err))
	}
	l.released = true
	lost := l.Err()
	l.finish(ErrNotHeld)
	l.emit(Event{Kind: EventReleased, Duration: held})
	switch {
	case len(taken) > 0:
		return fmt.Errorf("%w: %d of %d keys are held by another owner, such as %q", ErrNotHeld, len(taken), len(l.keys), l.c.names.UserKeys(taken)[0])
	case lost != nil:
		return fmt.Errorf("%w: %w", ErrNotHeld, inner(lost))
	}
	return nil
}
