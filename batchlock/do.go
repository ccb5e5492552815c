package batchlock

import (
	"context"

	"github.com/batchlock/batchlock/internal/lifetime"
)

// Do locks keys as Lock does, runs fn, and always unlocks (for at most 2s
// once ctx is done), also when fn panics. fn's context is a child of the
// lock's: it ends, with a cause wrapping ErrLockLost, once the lock is lost,
// and with ctx; it carries the lock (LockFromContext) and its owner
// (ContextWithOwner), so that locks taken inside fn are reentrant. Do returns
// Lock's error when fn did not run, else fn's error joined with the loss
// (unless fn's error wraps it, as fmt.Errorf("...: %w", context.Cause(ctx))
// does) and with any error of the unlock.
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

type ownerKey struct{}

// ContextWithOwner returns a context whose Lock, TryLock and Do calls use
// owner as their owner id unless WithOwner says otherwise. Do passes such a
// context to its function, so that a lock taken inside it on the same keys is
// reentrant rather than a deadlock with itself.
func ContextWithOwner(ctx context.Context, owner string) context.Context {
	return context.WithValue(ctx, ownerKey{}, owner)
}

// OwnerFromContext returns the owner id set on ctx with ContextWithOwner, so
// that code which takes locks through several Clients (Redlock) can give
// them all the same owner.
func OwnerFromContext(ctx context.Context) (string, bool) {
	owner, ok := ctx.Value(ownerKey{}).(string)
	return owner, ok
}

type lockKey struct{}

// LockFromContext returns the Lock that Do holds while its function runs, to
// read its fencing tokens inside the function.
func LockFromContext(ctx context.Context) (*Lock, bool) {
	l, ok := ctx.Value(lockKey{}).(*Lock)
	return l, ok
}
