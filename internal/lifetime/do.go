package lifetime

import (
	"context"
	"errors"
)

// Lock is what Do needs of a lock.
type Lock interface {
	// Context ends when the lock is released or lost; its cause wraps
	// lost when the lock was lost.
	Context() context.Context
	Unlock(ctx context.Context) error
	Err() error
}

// Do takes a lock with lock, runs fn, and always unlocks afterwards (within
// UnlockTimeout, whatever ctx), also when fn panics or calls runtime.Goexit.
// fn runs in a child of the lock's context, which ends with the loss of the
// lock as its cause, and also ends with ctx; with is given that context and
// the lock, to add values. lost and notHeld are the errors of the lock's
// package: an unlock that fails with notHeld after a loss is not reported
// twice.
//
// Do returns lock's error when the lock could not be taken (fn did not
// run), and otherwise fn's error joined with the loss of the lock and with
// any error of the unlock.
func Do[L Lock](ctx context.Context, lock func(context.Context) (L, error), fn func(context.Context) error,
	with func(context.Context, L) context.Context, lost, notHeld error) error {
	l, err := lock(ctx)
	if err != nil {
		return err
	}
	fnCtx, cancel := context.WithCancelCause(with(l.Context(), l))
	defer cancel(nil)
	stop := context.AfterFunc(ctx, func() { cancel(context.Cause(ctx)) })
	defer stop()

	unlock := func() error {
		uctx, cancel := Detached(ctx)
		defer cancel()
		return l.Unlock(uctx)
	}
	returned := false
	defer func() {
		if !returned { // fn panicked or called runtime.Goexit
			_ = unlock()
		}
	}()
	fnErr := fn(fnCtx)
	returned = true

	unlockErr := unlock()
	lostErr := l.Err()
	if errors.Is(lostErr, lost) {
		if errors.Is(unlockErr, notHeld) {
			unlockErr = nil // the loss says it
		}
		if errors.Is(fnErr, lost) {
			lostErr = nil // fn's error says the loss already
		}
	} else {
		lostErr = nil
	}
	return errors.Join(fnErr, lostErr, unlockErr)
}
