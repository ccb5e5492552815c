package redlock

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/internal/backoff"
	"github.com/batchlock/batchlock/internal/lease"
	"github.com/batchlock/batchlock/internal/owner"
)

// Lock takes every key on a majority of the deployments, trying again after
// a random, growing pause (at most 250ms) until it succeeds or ctx is done.
// Each attempt is a TryLock. It returns a held Lock, or an error wrapping
// batchlock.ErrNotObtained and the context's error; either way, no key is
// left held that was not held before the call, except on deployments that
// did not answer, where batchlock's own rollback frees them when they do.
func (c *Client) Lock(ctx context.Context, keys []string, opts ...batchlock.LockOption) (*Lock, error) {
	return c.lock(ctx, keys, opts, true)
}

// TryLock makes one attempt: it asks every deployment at once for all keys
// (batchlock's TryLock, with the deployment timeout) and holds the lock when
// a majority granted it with some validity left. Otherwise it releases what
// was granted and returns an error wrapping batchlock.ErrNotObtained: a
// *batchlock.ConflictError listing every key found held by another owner on
// any deployment, when there were any.
//
// The options are batchlock's (WithTTL, WithOwner, WithReplicas,
// WithShared). Every
// deployment gets the same owner: WithOwner's, else the context's
// (batchlock.ContextWithOwner), else a fresh random one.
func (c *Client) TryLock(ctx context.Context, keys []string, opts ...batchlock.LockOption) (*Lock, error) {
	return c.lock(ctx, keys, opts, false)
}

func (c *Client) lock(ctx context.Context, keys []string, opts []batchlock.LockOption, wait bool) (*Lock, error) {
	if err := context.Cause(ctx); err != nil {
		return nil, fmt.Errorf("redlock: %w", err)
	}
	id, chosen := owner.FromContext(ctx)
	chosen = chosen && id != ""
	for attempt := 0; ; attempt++ {
		// Every deployment gets the same owner. Unless the caller chose
		// one, each attempt takes a fresh one: a later attempt must not join
		// the holds an earlier one may have left on a slow deployment, and
		// keep them alive. Given first, so that the caller's WithOwner, if
		// any, wins.
		if !chosen {
			id = rand.Text()
		}
		l, err := c.attempt(ctx, keys, append([]batchlock.LockOption{batchlock.WithOwner(id)}, opts...))
		if err == nil || !wait || final(err) {
			return l, err
		}
		if cause := backoff.Sleep(ctx, backoff.Jittered(attempt, retryBase, retryMax)); cause != nil {
			return nil, fmt.Errorf("%w; gave up waiting: %w", err, cause)
		}
	}
}

// attempt asks every deployment once, and keeps the lock only with a
// majority and validity left.
func (c *Client) attempt(ctx context.Context, keys []string, opts []batchlock.LockOption) (*Lock, error) {
	start := time.Now()
	actx, cancel := context.WithTimeout(ctx, c.cfg.timeout)
	defer cancel() // stops requests still running on slow deployments
	locks, errs := fanOut(actx, c,
		func(ctx context.Context, i int) (*batchlock.Lock, error) {
			return c.clients[i].TryLock(ctx, keys, opts...)
		},
		func(l *batchlock.Lock, err error) {
			if err == nil { // granted too late to count
				releaseAll(ctx, []*batchlock.Lock{l})
			}
		})
	now := time.Now()

	var until []time.Time
	var fatal error
	for i, l := range locks {
		switch {
		case l != nil:
			until = append(until, l.ValidUntil())
		case fatal == nil && final(errs[i]):
			// Bad input fails alike everywhere, before anything is sent,
			// and so does an owner asking exclusively for a key it holds
			// shared: there is no point in another attempt.
			fatal = fmt.Errorf("redlock: %w", errs[i])
		}
	}
	v, longest := validity(start, now, until, len(locks), c.cfg.drift)
	if lease.Enough(v, longest) && fatal == nil {
		return newLock(ctx, c, locks, v), nil
	}
	releaseAll(ctx, locks)
	if fatal != nil {
		return nil, fatal
	}
	if len(until) >= quorum(len(locks)) {
		return nil, fmt.Errorf("redlock: granted by %d of %d deployments, but the lease ran out while taking it (%v of %v left): %w",
			len(until), len(locks), max(v, 0).Round(time.Millisecond), longest.Round(time.Millisecond), batchlock.ErrNotObtained)
	}
	return nil, notObtained(len(until), errs)
}

// final reports an error that another attempt would meet again: bad input,
// an upgrade, a closed Client. A key with no capacity set on one deployment
// is not: the others may grant the lock.
func final(err error) bool {
	return errors.Is(err, batchlock.ErrInvalid) && !errors.Is(err, batchlock.ErrNotObtained) ||
		errors.Is(err, owner.ErrUpgrade) || errors.Is(err, batchlock.ErrClosed)
}

// notObtained explains a refusal by a majority: the keys held by others on
// any deployment, and the other deployments' errors.
func notObtained(granted int, errs []error) error {
	var held []string
	format := "redlock: granted by %d of %d deployments, %d needed: %w"
	args := []any{granted, len(errs), quorum(len(errs)), batchlock.ErrNotObtained}
	for i, err := range errs {
		var conflict *batchlock.ConflictError
		switch {
		case err == nil:
		case errors.As(err, &conflict):
			held = append(held, conflict.Keys...)
		default:
			format += "; %w"
			args = append(args, fmt.Errorf("deployment %d: %w", i, err))
		}
	}
	if len(held) > 0 {
		slices.Sort(held)
		args[3] = &batchlock.ConflictError{Keys: slices.Compact(held)}
	}
	return fmt.Errorf(format, args...)
}
