package bench

import (
	"context"
	"sync"
)

// Ceiling is ordered locking at no cost: one sync.Mutex per key in this
// process, taken in sorted order and released at once. What it gives under
// contention is the most any lock that takes keys in a global order can
// give, and the exclusion of the contention workload's reference, the
// fenced-floor processor (Layered). It locks nothing in Redis, so it serves
// only processors that run in this one process.
type Ceiling struct {
	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

// NewCeiling returns a ceiling with no key locked.
func NewCeiling() *Ceiling { return &Ceiling{locks: make(map[string]*sync.Mutex)} }

func (c *Ceiling) Name() string       { return NameCeiling }
func (c *Ceiling) Commands() []string { return nil }

// Lock takes the keys' mutexes in order (keys come sorted); it cannot be
// cancelled, as a sync.Mutex cannot, and needs not be: every holder of the
// workload lets go.
func (c *Ceiling) Lock(_ context.Context, keys []string) (Held, error) {
	held := make(ceilingHeld, len(keys))
	for i, k := range keys {
		c.mu.Lock()
		m := c.locks[k]
		if m == nil {
			m = new(sync.Mutex)
			c.locks[k] = m
		}
		c.mu.Unlock()
		m.Lock()
		held[i] = m
	}
	return held, nil
}

type ceilingHeld []*sync.Mutex

func (h ceilingHeld) Unlock(context.Context) error {
	for _, m := range h {
		m.Unlock()
	}
	return nil
}
