package redlock

import (
	"context"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/internal/lifetime"
)

// Do locks keys as Lock does, runs fn, and always unlocks afterwards (for at
// most 2s once ctx is done), also when fn panics. fn runs in a child of the
// lock's Context: it is cancelled, with an error wrapping
// batchlock.ErrLockLost as its cause, the moment the lock is lost, and also
// when ctx ends. It carries the lock's owner (batchlock.ContextWithOwner), so
// that locks taken inside fn with that context on the same keys are
// reentrant on every deployment.
//
// Do returns the error of Lock when the keys could not be taken (fn did not
// run), and otherwise fn's error joined with the loss of the lock and with
// any error of the unlock.
func (c *Client) Do(ctx context.Context, keys []string, fn func(ctx context.Context) error, opts ...batchlock.LockOption) error {
	if fn == nil {
		return invalid("nil function")
	}
	return lifetime.Do(ctx,
		func(ctx context.Context) (*Lock, error) { return c.Lock(ctx, keys, opts...) },
		fn,
		func(ctx context.Context, l *Lock) context.Context { return batchlock.ContextWithOwner(ctx, l.Owner()) },
		batchlock.ErrLockLost, batchlock.ErrNotHeld)
}
