// Package lifetime is the lifetime of a lock as a context, and the Do built
// on it, shared by batchlock and redlock: a lock's context ends once, when
// the lock is released or lost, with a cause that says which.
package lifetime

import (
	"context"
	"sync"
	"time"
)

// Lifetime is a lock's life: alive until End, then ended with End's cause.
type Lifetime struct {
	ctx    context.Context
	cancel context.CancelCauseFunc

	mu sync.Mutex // makes End's check and cancel one step
}

// New starts a lifetime. It keeps parent's values (an owner, a trace) but
// not its cancellation: a lock outlives the call that took it.
func New(parent context.Context) *Lifetime {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(parent))
	return &Lifetime{ctx: ctx, cancel: cancel}
}

// Context returns a context that ends the moment the lock ends, with the
// error End was given as its cause. It carries the values of the context
// the lock was taken with, but not its cancellation. Work that must stop
// when the lock goes runs in it, or in a child of it, as Do's function does.
func (l *Lifetime) Context() context.Context { return l.ctx }

// Done returns a channel that is closed when the lock is released or lost:
// Context().Done().
func (l *Lifetime) Done() <-chan struct{} { return l.ctx.Done() }

// Err returns nil while the lock is held, then the error End was given: the
// cause of Context.
func (l *Lifetime) Err() error {
	if l.ctx.Err() == nil {
		return nil
	}
	return context.Cause(l.ctx)
}

// End ends the lifetime with err (not nil) and reports whether this call
// ended it: only the first End counts.
func (l *Lifetime) End(err error) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ctx.Err() != nil {
		return false
	}
	l.cancel(err)
	return true
}

// UnlockTimeout bounds an unlock made after the caller's context is done:
// Do's final one, or an Unlock called with a context that already ended.
const UnlockTimeout = 2 * time.Second

// Detached returns ctx without its cancellation, bounded by UnlockTimeout,
// for clean-up that must be done even when the caller's context is done.
func Detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), UnlockTimeout)
}
