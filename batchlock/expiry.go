package batchlock

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/batchlock/batchlock/internal/lease"
	"github.com/batchlock/batchlock/internal/wire"
)

// confirm records that the lease runs at least until t.
func (l *Lock) confirm(t time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if t.After(l.validUntil) {
		l.validUntil = t
	}
	if l.expiry != nil {
		l.expiry.Reset(l.untilExpiry())
	}
}

// arm starts the timer that reports the lock lost when its lease was not
// confirmed in time.
func (l *Lock) arm() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.expiry = time.AfterFunc(l.untilExpiry(), l.expire)
}

// untilExpiry is the time left before the lock must count as lost. A renewed
// lock counts as lost a sixth of its lease early (half a renewal period), so
// that its holder hears of it before another client can take the keys; a
// fixed lease ends when it ends, measured from before the acquire was sent.
func (l *Lock) untilExpiry() time.Duration {
	d := time.Duration(math.MaxInt64)
	if !l.validUntil.IsZero() {
		d = time.Until(l.validUntil)
		if l.renew {
			d -= lease.LossMargin(l.lease)
		}
	}
	if !l.grantUntil.IsZero() {
		d = min(d, time.Until(l.grantUntil)-lease.LossMargin(wire.GrantTime))
	}
	return d
}

func (l *Lock) expire() {
	l.mu.Lock()
	if d := l.untilExpiry(); d > 0 {
		l.expiry.Reset(d)
		l.mu.Unlock()
		return
	}
	l.mu.Unlock()
	if !l.renew {
		l.letGo(fmt.Errorf("%w: its lease (WithTTL) ran out", ErrLockLost))
		return
	}
	l.letGo(fmt.Errorf("%w: lease ran out before it could be renewed", ErrLockLost))
}

// lose marks the lock lost with err (which wraps ErrLockLost), unless it
// already ended, and reports whether it did.
func (l *Lock) lose(err error) bool {
	if !l.finish(err) {
		return false
	}
	l.c.watchdog.remove(l)
	l.emit(Event{Kind: EventLost, Err: err})
	return true
}

// letGo marks the lock lost with err, unless it already ended, and releases
// in the background what it still holds, as Unlock would, so that its other
// keys go to their waiters now rather than at the end of their lease: once
// lost, the lock is no use to its holder. The release is bounded by
// rollbackTimeout, not by Close, which waits for it; one that fails leaves
// the keys to their lease, or to an Unlock, which sends what did not go
// through. Once Close began, it releases the lock instead: the lock was
// among those it found held (see Client.stopHolding).
func (l *Lock) letGo(err error) {
	counted := l.c.calls.Enter(1)
	if !l.lose(err) || !counted {
		if counted {
			l.c.calls.Leave()
		}
		return
	}
	go func() {
		defer l.c.calls.Leave()
		_ = l.releaseLost(context.Background())
	}()
}

// releaseLost releases what the lock, which ended, still holds, unless an
// Unlock did, for at most rollbackTimeout.
func (l *Lock) releaseLost(ctx context.Context) error {
	l.unlocking.Lock()
	defer l.unlocking.Unlock()
	if l.released {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, rollbackTimeout)
	defer cancel()
	if _, err := l.releaseRest(ctx); err != nil {
		return err
	}
	l.released = true
	return nil
}

// finish ends the lock with err; only the first end counts.
func (l *Lock) finish(err error) bool {
	if !l.life.End(err) {
		return false
	}
	l.c.unhold(l)
	l.leaveGates()
	l.mu.Lock()
	if l.expiry != nil {
		l.expiry.Stop()
	}
	if l.maxHold != nil {
		l.maxHold.Stop()
	}
	l.mu.Unlock()
	return true
}
