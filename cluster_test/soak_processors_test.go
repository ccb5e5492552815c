package cluster_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/batchlock/batchlock/batchlock"
)

// The soak's batch processors: soakProcessors replicas, each a Processor
// on one of the soak's Clients, kept fed with baskets, each tick's baskets
// written under fenced writes and let go with Done. Now and then a replica
// stalls holding its tick, as a paused process does, while the others go
// on. When its Client is closed under it, a replica closes its Processor
// and adds what that handed back to a new one on the fresh Client, as a
// replica rebuilt after a deploy does.
const (
	soakProcessors = 3
	soakPending    = 12 // baskets a replica keeps added and not taken
)

// soakOrder is what a processor's basket stands for.
type soakOrder struct {
	keys   []string
	shared map[string]bool
}

func (o soakOrder) basket() batchlock.Basket {
	b := batchlock.Basket{Keys: o.keys}
	for k := range o.shared {
		b.Shared = append(b.Shared, k)
	}
	return b
}

// processor runs replica i until the run ends.
func (s *soak) processor(i int) {
	rng := rand.New(rand.NewPCG(s.seed, uint64(1000+i)))
	var handedBack []soakOrder
	for s.running() {
		s.mu.Lock()
		sc := s.clients[i%len(s.clients)]
		s.mu.Unlock()
		p, err := batchlock.NewProcessor[soakOrder](sc.c, 1+rng.IntN(32))
		if err != nil {
			s.problem("NewProcessor: %v", err)
			return
		}
		added := 0
		for _, o := range handedBack {
			if err := p.Add(o, o.basket()); err != nil {
				if !errors.Is(err, batchlock.ErrClosed) {
					s.problem("Add of a basket handed back: %v", err)
				}
				continue
			}
			added++
		}
		s.tick(rng, sc, p, added)
		ended, cancel := context.WithCancel(s.t.Context())
		cancel()
		left, err := p.Close(ended)
		if err != nil && !errors.Is(err, batchlock.ErrClosed) {
			s.problem("Processor.Close: %v", err)
		}
		s.count(s.ops, "Processor.Close")
		handedBack = left
	}
}

// tick feeds p, which has pending baskets added and not in a tick yet,
// and runs its ticks until its Client closes or the run ends.
func (s *soak) tick(rng *rand.Rand, sc *soakClient, p *batchlock.Processor[soakOrder], pending int) {
	for s.running() {
		for ; pending < soakPending; pending++ {
			basket := s.basket(rng)
			if rng.IntN(2) == 0 {
				basket = s.spaceBasket(rng)
			}
			keys, shared := s.split(rng, basket)
			o := soakOrder{keys: keys, shared: shared}
			if err := p.Add(o, o.basket()); err != nil {
				if !errors.Is(err, batchlock.ErrClosed) {
					s.problem("Add: %v", err)
				}
				return
			}
		}
		ctx, cancel := context.WithTimeout(s.t.Context(), 2*time.Second)
		called := time.Now()
		t, err := p.Next(ctx)
		cancel()
		s.count(s.ops, "Processor.Next")
		s.outcome("Processor.Next", err)
		if sc.c.Stats().Queued > 0 {
			s.count(s.outcomes, "Processor.Next with a basket queued")
		}
		switch {
		case errors.Is(err, batchlock.ErrClosed):
			return
		case err != nil:
			continue
		}
		pending -= len(t.Baskets) + len(t.Failed)
		held := make([]*holding, len(t.Baskets))
		tokens := make([]map[string]int64, len(t.Baskets))
		for i, b := range t.Baskets {
			held[i] = s.watch(b.Lock, b.Item.shared, sc.lease, false, called)
			tokens[i] = make(map[string]int64, len(b.Lock.Keys()))
			for _, k := range b.Lock.Keys() {
				tokens[i][k] = b.Lock.Token(k)
			}
			s.writeAll(held[i], tokens[i])
		}
		if rng.IntN(25) == 0 {
			// A replica stalls holding its tick (a GC pause, a slow
			// store): its leases are renewed meanwhile, and the other
			// replicas must wait for its keys, not take them.
			s.count(s.injected, "processor stalled holding its tick")
			time.Sleep(time.Duration(500+rng.IntN(2500)) * time.Millisecond)
		}
		for i := range t.Baskets {
			s.writeAll(held[i], tokens[i])
			s.record(held[i], tokens[i])
		}
		s.done(rng, t, held)
	}
}

// done lets go of tick t (see releaseContext); the history has the
// release when it went.
func (s *soak) done(rng *rand.Rand, t *batchlock.Tick[soakOrder], held []*holding) {
	ctx, cancel := s.releaseContext(rng)
	defer cancel()
	err := t.Done(ctx)
	s.count(s.ops, "Tick.Done")
	s.outcome("Tick.Done", err)
	if err != nil {
		return
	}
	s.released(time.Now(), held...)
	if slices.ContainsFunc(t.Baskets, func(b batchlock.Taken[soakOrder]) bool { return b.Lock.Token(b.Lock.Keys()[0]) != 0 }) {
		s.problem("a tick's lock still gives tokens after Done")
	}
}
