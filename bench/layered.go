package bench

import (
	"context"
	"errors"
	"slices"
)

// Layered takes a batch with one Locker, then with another, and lets go in
// the reverse order. The fenced-floor processor is the ceiling's mutexes
// layered over the fenced floor's script calls: exclusion at no cost, plus
// the least Redis work a lock with fencing tokens must do per basket.
type Layered struct {
	name         string
	outer, inner Locker
}

// NewLayered returns the Locker that takes outer's lock, then inner's.
func NewLayered(name string, outer, inner Locker) *Layered {
	return &Layered{name: name, outer: outer, inner: inner}
}

func (l *Layered) Name() string { return l.name }

func (l *Layered) Commands() []string { return slices.Concat(l.outer.Commands(), l.inner.Commands()) }

// Lock takes outer's lock, then inner's; when inner's fails, outer's is
// given back, so that a failed Lock holds nothing.
func (l *Layered) Lock(ctx context.Context, keys []string) (Held, error) {
	outer, err := l.outer.Lock(ctx, keys)
	if err != nil {
		return nil, err
	}
	inner, err := l.inner.Lock(ctx, keys)
	if err != nil {
		return nil, errors.Join(err, outer.Unlock(context.WithoutCancel(ctx)))
	}
	return layeredHeld{outer: outer, inner: inner}, nil
}

type layeredHeld struct{ outer, inner Held }

// Unlock lets go of inner's lock, then of outer's even when inner's unlock
// failed: outer's mutexes would otherwise block every later order.
func (h layeredHeld) Unlock(ctx context.Context) error {
	err := h.inner.Unlock(ctx)
	return errors.Join(err, h.outer.Unlock(ctx))
}
