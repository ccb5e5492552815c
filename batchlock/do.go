package batchlock

import (
	"context"

	"github.com/batchlock/batchlock/internal/lifetime"
)

// Do locks keys as Lock does, runs fn, and always unlocks (for at most 2s
// once ctx is done), also when fn panics. fn's context ends with ctx, and
// with a cause wrapping ErrLockLost once the lock is lost; it carries the
// lock (LockFromContext) and its owner, so that locks taken inside fn are
// reentrant. Do returns Lock's error when fn did not run, else fn's error
// joined with the loss (unless fn's error wraps it) and with the unlock's.
// fn may Consume the lock: Do then has nothing left to unlock.
func (c *Client) Do(ctx context.Context, keys []string, fn func(ctx context.Context) error, opts ...LockOption) error {
	if err := checkContext(ctx); err != nil {
		return err
	}
	if fn == nil {
		return invalid("nil function")
	}
	return lifetime.Do(ctx,
		func(ctx context.Context) (*Lock, error) { return c.Lock(ctx, keys, opts...) },
		fn,
		func(ctx context.Context, l *Lock) context.Context {
			return context.WithValue(ContextWithOwner(ctx, l.Owner()), lockKey{}, l)
		},
		ErrLockLost, ErrNotHeld)
}

type lockKey struct{}

// LockFromContext returns the Lock that Do holds while its function runs, to
// read its fencing tokens inside the function.
func LockFromContext(ctx context.Context) (*Lock, bool) {
	l, ok := ctx.Value(lockKey{}).(*Lock)
	return l, ok
}
