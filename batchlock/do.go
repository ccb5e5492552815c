package batchlock

import (
	"context"
	"errors"
)

// Do locks keys as Lock does, runs fn, and always unlocks afterwards, also
// when fn panics (the panic goes on after the unlock). fn's context is
// cancelled, with an error wrapping ErrLockLost as its cause, the moment the
// lock is lost; it also carries the lock's owner (ContextWithOwner), so that
// locks taken inside fn with that context on the same keys are reentrant, and
// the Lock itself (LockFromContext), for its fencing tokens.
//
// Do returns the error of Lock when the keys could not be taken (fn did not
// run), and otherwise fn's error joined with the loss of the lock and with
// any error of the unlock.
func (c *Client) Do(ctx context.Context, keys []string, fn func(ctx context.Context) error, opts ...LockOption) error {
	if fn == nil {
		return invalid("nil function")
	}
	l, err := c.Lock(ctx, keys, opts...)
	if err != nil {
		return err
	}
	fnCtx, cancel := context.WithCancelCause(context.WithValue(ContextWithOwner(ctx, l.Owner()), lockKey{}, l))
	defer cancel(nil)
	l.whenDone(func(err error) {
		if errors.Is(err, ErrLockLost) {
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
	if !errors.Is(lost, ErrLockLost) {
		lost = nil
	} else if errors.Is(unlockErr, ErrNotHeld) {
		unlockErr = nil // the loss already says it
	}
	return errors.Join(fnErr, lost, unlockErr)
}

type lockKey struct{}

// LockFromContext returns the Lock that Do holds while its function runs, to
// read its fencing tokens inside the function.
func LockFromContext(ctx context.Context) (*Lock, bool) {
	l, ok := ctx.Value(lockKey{}).(*Lock)
	return l, ok
}

// unlockDetached unlocks l even when ctx is done, for at most 2s.
func unlockDetached(ctx context.Context, l *Lock) error {
	ctx, cancel := detached(ctx)
	defer cancel()
	return l.Unlock(ctx)
}
