package cluster_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/batchlock/batchlock/batchlock"
)

// The soak's batch processors: replicas of one processor, each with a
// Client of its own for the whole run, each ticking a batchlock.Admission
// over random baskets through every fault. Their sections go to the judges
// as every other lock's; a basket refused because the other replica holds
// its keys waits for them, and is handed out by a later tick.

// soakProcessors is how many replicas run.
const soakProcessors = 2

// startProcessors starts the replicas; stop ends them (their admissions
// and Clients closed).
func (s *soak) startProcessors() (stop func()) {
	var wg sync.WaitGroup
	done := make(chan struct{})
	for p := range soakProcessors {
		lease := soakLeases[p%len(soakLeases)]
		c, err := batchlock.New(s.rdbs[p%len(s.rdbs)], batchlock.WithPrefix(s.prefix), batchlock.WithLease(lease),
			batchlock.WithObserver(s.observe), batchlock.WithOwnerPrefix(eachOwners))
		if err != nil {
			s.problem("processor Client: %v", err)
			continue
		}
		wg.Go(func() {
			s.process(rand.New(rand.NewPCG(s.seed, uint64(1000+p))), c, lease, done)
			if err := c.Close(); err != nil {
				s.problem("closing a processor Client: %v", err)
			}
		})
	}
	return func() {
		close(done)
		wg.Wait()
	}
}

// process ticks an admission until done: a few new baskets a tick (a
// promotion read shared now and then), a short section of fenced writes
// for each basket admitted, then one UnlockEach.
func (s *soak) process(rng *rand.Rand, c *batchlock.Client, lease time.Duration, done <-chan struct{}) {
	promos := map[string]bool{}
	for i := range soakPromos {
		promos[fmt.Sprintf("promo:%d", i)] = true
	}
	a := batchlock.NewAdmission(c, func(keys []string) []string { return keys }, withShared(promos))
	defer a.Close()
	for {
		select {
		case <-done:
			return
		case <-time.After(time.Duration(1+rng.IntN(10)) * time.Millisecond): // the processor's tick
		}
		var arrivals [][]string
		for range rng.IntN(4) {
			keys := s.basket(rng)
			if rng.IntN(3) == 0 {
				keys = append(keys, fmt.Sprintf("promo:%d", rng.IntN(soakPromos)))
			}
			arrivals = append(arrivals, keys)
		}
		ctx, cancel := context.WithTimeout(s.t.Context(), 3*time.Second)
		called := time.Now()
		admitted, err := a.Tick(ctx, arrivals)
		cancel()
		s.count(s.ops, "Admission tick")
		s.outcome("Admission tick", err)
		if err != nil && errors.Is(err, batchlock.ErrClosed) {
			return
		}
		var taken []*holding
		locks := make([]*batchlock.Lock, len(admitted))
		for i, ad := range admitted {
			l := ad.Lock
			locks[i] = l
			s.count(s.outcomes, "Admission basket admitted")
			shared := map[string]bool{}
			for _, k := range l.Keys() {
				shared[k] = promos[k]
			}
			h := s.watch(l, shared, lease, false, called)
			taken = append(taken, h)
			tokens := make(map[string]int64, len(l.Keys()))
			for _, k := range l.Keys() {
				tokens[k] = l.Token(k)
			}
			s.writeAll(h, tokens)
			s.record(h, tokens)
		}
		if len(locks) > 0 {
			s.unlock(rng, "Admission UnlockEach", func(ctx context.Context) error { return c.UnlockEach(ctx, locks) }, taken...)
		}
	}
}
