package batchlock

import (
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

// endAtMaxHold ends l, held for d, its longest hold, and lets its keys go
// (see letGo). An Unlock under way when the cap comes wins: the lock is then
// released, not lost.
func (l *Lock) endAtMaxHold(d time.Duration) {
	l.unlocking.Lock()
	ended := l.released || l.Err() != nil
	l.unlocking.Unlock()
	if !ended {
		l.letGo(fmt.Errorf("%w: %w: %v", ErrLockLost, inner(ErrMaxHold), d))
	}
}
