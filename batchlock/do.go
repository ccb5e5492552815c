package batchlock

import (
	"context"

	"github.com/batchlock/batchlock/internal/lifetime"
)

// Do locks keys as Lock does, runs fn, and always unlocks afterwards (for at
// most 2s once ctx is done), also when fn panics (the panic goes on after the
// unlock). fn runs in a child of the lock's Context: it is cancelled, with an
// error wrapping ErrLockLost as its cause, once the lock is lost (see the
// package documentation for how soon), and also when ctx ends. It carries the lock's owner (ContextWithOwner), so that
// locks taken inside fn with that context on the same keys are reentrant, and
// the Lock itself (LockFromContext), for its fencing tokens.
//
// When its context ends, fn should stop and return an error that wraps the
// context's cause (context.Cause(ctx)), as fmt.Errorf("...: %w",
// context.Cause(ctx)) does: then a loss is said once, by fn's error.
//
// Do returns the error of Lock when the keys could not be taken (fn did not
// run), and otherwise fn's error joined with the loss of the lock (unless
// fn's error wraps it already) and with any error of the unlock.
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
