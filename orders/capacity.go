package orders

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/batchlock/batchlock/batchlock"
)

// Counted keys' capacities, kept equal to the stock they stand for,
// wherever the stock of record lives (Stock here, a database elsewhere).

// LineUnits are the units of o's lines by the lock key that key names for
// each line's SKU: what an order holds in units (batchlock.WithUnits).
func LineUnits(o Order, key func(sku string) string) map[string]int64 {
	units := make(map[string]int64, len(o.Lines))
	for _, l := range o.Lines {
		units[key(l.SKU)] += l.Qty
	}
	return units
}

// capacityCalls bounds the SetCapacity calls SetCapacities has in flight:
// thousands of SKUs one after the other wait for a round trip each.
const capacityCalls = 16

// SetCapacities makes each lock key's capacity in locker its units
// (units[i] of keys[i]), several calls at once, and returns the errors of
// the keys left as they were, joined.
func SetCapacities(ctx context.Context, locker *batchlock.Client, keys []string, units []int64) error {
	errs := make([]error, len(keys))
	slots := make(chan struct{}, capacityCalls)
	var wg sync.WaitGroup
	for i, k := range keys {
		slots <- struct{}{}
		wg.Go(func() {
			defer func() { <-slots }()
			if err := locker.SetCapacity(ctx, k, units[i]); err != nil {
				errs[i] = fmt.Errorf("orders: capacity of %s: %w", k, err)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// CheckCapacities adds to a each SKU (skus[i], its lock key keys[i]) whose
// capacity in locker differs from its units in the stock of record
// (units[i]).
func CheckCapacities(ctx context.Context, locker *batchlock.Client, skus, keys []string, units []int64, a *Audit) error {
	held, err := locker.Inspect(ctx, keys...)
	if err != nil {
		return fmt.Errorf("orders: capacities: %w", err)
	}
	for i, h := range held {
		if h.Capacity != units[i] {
			a.Add(Capacity, skus[i], "capacity %d, %d units in stock", h.Capacity, units[i])
		}
	}
	return nil
}

// SetCapacities makes each SKU's capacity its units, for Counted and a
// counted Batched, whose lock keys are in space (InSpace).
func (s *Stock) SetCapacities(ctx context.Context, locker *batchlock.Client, space string) error {
	_, keys, units, err := s.capacities(ctx, space)
	if err != nil {
		return err
	}
	return SetCapacities(ctx, locker, keys, units)
}

// AuditCapacities adds to a the SKUs whose capacity in locker, their lock
// keys in space (SetCapacities), differs from their remaining units.
func (s *Stock) AuditCapacities(ctx context.Context, locker *batchlock.Client, space string, a *Audit) error {
	skus, keys, units, err := s.capacities(ctx, space)
	if err != nil {
		return err
	}
	return CheckCapacities(ctx, locker, skus, keys, units, a)
}

// capacities are every SKU, its lock key in space and its remaining units.
func (s *Stock) capacities(ctx context.Context, space string) (skus, keys []string, units []int64, err error) {
	states, err := s.States(ctx)
	if err != nil {
		return nil, nil, nil, err
	}
	for _, st := range states {
		skus, keys, units = append(skus, st.SKU), append(keys, InSpace(space, s.Key(st.SKU))), append(units, st.Remaining)
	}
	return skus, keys, units, nil
}
