package batchlock

import (
	"context"
	"fmt"
	"time"
)

// capHold ends l d from now (WithMaxHold).
func (l *Lock) capHold(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.Err() == nil {
		l.maxHold = time.AfterFunc(d, func() { l.endAtMaxHold(d) })
	}
}

// endAtMaxHold ends l, held for d, its longest hold, and releases its keys
// as Unlock would, so that their waiters are handed them at once. A release
// that fails, or a Client that closed, leaves the keys to their lease.
func (l *Lock) endAtMaxHold(d time.Duration) {
	cause := fmt.Errorf("%w: %w: %v", ErrLockLost, ErrMaxHold, d)
	ctx, end, err := l.c.begin(context.Background())
	if err != nil {
		l.lose(cause)
		return
	}
	defer end()
	l.unlocking.Lock()
	defer l.unlocking.Unlock()
	if l.released || l.Err() != nil {
		return // released or ended meanwhile: Unlock releases it
	}
	l.lose(cause)
	rctx, cancel := context.WithTimeout(ctx, rollbackTimeout)
	defer cancel()
	if _, err := l.releaseRest(rctx); err == nil {
		l.released = true
	}
}
