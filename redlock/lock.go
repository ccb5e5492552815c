package redlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/internal/lease"
	"github.com/batchlock/batchlock/internal/lifetime"
)

// Lock is a batch of keys held on a majority of the deployments. Its methods
// are safe for concurrent use.
type Lock struct {
	c        *Client
	owner    string
	keys     []string
	locks    []*batchlock.Lock // by deployment; nil where not granted
	validity time.Duration

	life *lifetime.Lifetime

	mu       sync.Mutex
	held     int // granted locks that have not ended
	released bool
}

// newLock returns the lock of a call on ctx made of the granted locks (at
// least one), and starts watching them.
func newLock(ctx context.Context, c *Client, locks []*batchlock.Lock, validity time.Duration) *Lock {
	l := &Lock{c: c, locks: locks, validity: validity, life: lifetime.New(ctx)}
	for _, dl := range locks {
		if dl != nil {
			l.owner, l.keys = dl.Owner(), dl.Keys()
			l.held++
		}
	}
	for _, dl := range locks {
		if dl != nil {
			context.AfterFunc(dl.Context(), func() { l.ended(dl.Err()) })
		}
	}
	return l
}

// Keys returns the lock's keys, deduplicated and sorted, without the prefix.
func (l *Lock) Keys() []string { return append([]string(nil), l.keys...) }

// Owner returns the lock's owner id, the same on every deployment.
func (l *Lock) Owner() string { return l.owner }

// Context returns a context that ends the moment the lock ends: its cause
// wraps batchlock.ErrLockLost once so many deployments lost it (their lease
// ran out unrenewed, their node restarted empty...) that fewer than a
// majority still hold it, and is batchlock.ErrNotHeld once it was released.
// It carries the values of the context the lock was taken with, but not its
// cancellation.
func (l *Lock) Context() context.Context { return l.life.Context() }

// Done returns a channel that is closed when the lock is released or lost:
// Context().Done().
func (l *Lock) Done() <-chan struct{} { return l.life.Done() }

// Err returns nil while the lock is held, an error wrapping
// batchlock.ErrLockLost once it is lost, and batchlock.ErrNotHeld once it was
// released: the cause of Context.
func (l *Lock) Err() error { return l.life.Err() }

// Validity returns how long the lock was known to be held for when it was
// taken: the lease, less the time taking it took (counted from each
// deployment's request), less the drift allowance.
// A holder of a lock with a fixed lease (WithTTL) must be done by then;
// renewal or Extend lengthen it, but only Done tells when it ends.
func (l *Lock) Validity() time.Duration { return l.validity }

// Tokens returns the fencing tokens of key in this lock, one per deployment
// in the order given to New, 0 where the deployment did not grant the lock
// (or key is not one of its keys). Each deployment counts its own tokens;
// compare them with Stale, never by their largest or their sum.
func (l *Lock) Tokens(key string) []int64 {
	tokens := make([]int64, len(l.locks))
	for i, dl := range l.locks {
		if dl != nil {
			tokens[i] = dl.Token(key)
		}
	}
	return tokens
}

// Extend makes every key's lease run at least ttl from now on each
// deployment that holds the lock, asking them all at once with the
// deployment timeout. It succeeds when a majority confirmed it with validity
// left, as for taking the lock; deployments that found the keys no longer
// held lose their part of the lock (batchlock.ErrNotHeld among the errors).
func (l *Lock) Extend(ctx context.Context, ttl time.Duration) error {
	if err := lease.Check(ttl); err != nil {
		return invalid("%v", err)
	}
	if err := l.Err(); err != nil {
		return err
	}
	start := time.Now()
	actx, cancel := context.WithTimeout(ctx, l.c.cfg.timeout)
	defer cancel()
	_, errs := fanOut(actx, l.c,
		func(ctx context.Context, i int) (struct{}, error) {
			if l.locks[i] == nil {
				return struct{}{}, errNotGranted
			}
			return struct{}{}, l.locks[i].Extend(ctx, ttl)
		},
		func(struct{}, error) {})
	now := time.Now()

	var until []time.Time
	format, args := "", []any{}
	for i, err := range errs {
		if err == nil {
			until = append(until, l.locks[i].ValidUntil())
		} else {
			format += "; %w"
			args = append(args, fmt.Errorf("deployment %d: %w", i, err))
		}
	}
	if v, _ := validity(start, now, until, len(errs), l.c.cfg.drift); v > 0 {
		return nil
	}
	args = append([]any{len(until), len(errs), quorum(len(errs))}, args...)
	return fmt.Errorf("redlock: extend: confirmed by %d of %d deployments with validity left, %d needed"+format, args...)
}

var errNotGranted = errors.New("did not grant the lock")

// Unlock releases the lock on every deployment that granted it, at once,
// and waits for them within ctx. (Deployments that answered an attempt too
// late are released by the attempt.) It returns an error wrapping
// batchlock.ErrNotHeld when the lock was already released or had been lost,
// and an error when fewer than a majority confirmed the release: the keys
// left are freed when their lease runs out.
func (l *Lock) Unlock(ctx context.Context) error {
	l.mu.Lock()
	if l.released {
		l.mu.Unlock()
		return fmt.Errorf("redlock: unlock: %w: already released", batchlock.ErrNotHeld)
	}
	l.released = true
	l.mu.Unlock()
	lost := l.Err()
	if lost != nil { // and the loss released what was left
		return fmt.Errorf("redlock: unlock: %w: the lock had been lost", batchlock.ErrNotHeld)
	}
	errs := each(l.locks, func(_ int, dl *batchlock.Lock) error { return dl.Unlock(ctx) })
	l.life.End(batchlock.ErrNotHeld)
	confirmed := 0
	format, args := "", []any{}
	for i, err := range errs {
		switch {
		case l.locks[i] == nil:
		case err == nil || errors.Is(err, batchlock.ErrNotHeld):
			confirmed++
		default:
			format += "; %w"
			args = append(args, fmt.Errorf("deployment %d: %w", i, err))
		}
	}
	if confirmed >= quorum(len(l.locks)) {
		return nil
	}
	args = append([]any{confirmed, len(l.locks), quorum(len(l.locks))}, args...)
	return fmt.Errorf("redlock: unlock: confirmed by %d of %d deployments, %d needed; the rest are freed when their lease runs out"+format, args...)
}

// ended counts a deployment whose lock ended with err, and loses the lock
// when no majority holds it any more (unless Unlock is what ended it).
func (l *Lock) ended(err error) {
	l.mu.Lock()
	l.held--
	held, released := l.held, l.released
	l.mu.Unlock()
	if released || held >= quorum(len(l.locks)) {
		return
	}
	if !errors.Is(err, batchlock.ErrLockLost) {
		err = fmt.Errorf("%w: %w", batchlock.ErrLockLost, err)
	}
	err = fmt.Errorf("redlock: held by %d of %d deployments, %d needed: %w", held, len(l.locks), quorum(len(l.locks)), err)
	if l.life.End(err) {
		// What a minority still holds is of no use to anyone: free it now
		// rather than renew it until Unlock.
		releaseAll(context.Background(), l.locks)
	}
}
