package redlock

import (
	"context"
	"errors"

	"github.com/batchlock/batchlock/batchlock"
)

// Do locks keys as Lock does, runs fn, and always unlocks afterwards, also
// when fn panics. fn's context is cancelled, with an error wrapping
// batchlock.ErrLockLost as its cause, the moment the lock is lost; it also
// carries the lock's owner (batchlock.ContextWithOwner), so that locks taken
// inside fn with that context on the same keys are reentrant on every
// deployment.
//
// Do returns the error of Lock when the keys could not be taken (fn did not
// run), and otherwise fn's error joined with the loss of the lock and with
// any error of the unlock.
func (c *Client) Do(ctx context.Context, keys []string, fn func(ctx context.Context) error, opts ...batchlock.LockOption) error {
	if fn == nil {
		return invalid("nil function")
	}
	l, err := c.Lock(ctx, keys, opts...)
	if err != nil {
		return err
	}
	fnCtx, cancel := context.WithCancelCause(batchlock.ContextWithOwner(ctx, l.Owner()))
	defer cancel(nil)
	l.whenDone(func(err error) {
		if errors.Is(err, batchlock.ErrLockLost) {
			cancel(err)
		}
	})

	returned := false
	defer func() {
		if !returned { // fn panicked or called runtime.Goexit
			_ = unlockDetached(ctx, l)
		}
	}()
	fnErr := fn(fnCtx)
	returned = true

	unlockErr := unlockDetached(ctx, l)
	lost := l.Err()
	if !errors.Is(lost, batchlock.ErrLockLost) {
		lost = nil
	} else if errors.Is(unlockErr, batchlock.ErrNotHeld) {
		unlockErr = nil // the loss already says it
	}
	return errors.Join(fnErr, lost, unlockErr)
}

// unlockDetached unlocks l even when ctx is done.
func unlockDetached(ctx context.Context, l *Lock) error {
	ctx, cancel := detached(ctx)
	defer cancel()
	return l.Unlock(ctx)
}
