package batchlock

import (
	"context"
	"sync"
)

// Admission admits a batch processor's baskets tick by tick, each whole or
// not at all, and keeps the turn of those it cannot admit yet: an item
// refused in one tick goes first in the next, and one refused 3 ticks
// because another Client (another replica of the processor) holds its keys
// waits for them in their queues in Redis, as Lock does, and is handed out
// by the first tick after they are its own. So no replica's newer baskets
// overtake it for ever. At most 32 items of an Admission wait so at once;
// the others try again at each tick, oldest first. Use it from one
// goroutine; Close it when done.
type Admission[T any] struct {
	c    *Client
	keys func(T) []string
	opts []LockOption
	// lc is what opts say (their errors TryEach reports), isShared the
	// keys they take shared.
	lc       lockConfig
	isShared map[string]bool

	ctx  context.Context // of the waits; ends with Close
	stop context.CancelFunc
	wg   sync.WaitGroup

	mu      sync.Mutex
	pending []*admissionItem[T] // not handed out yet, oldest first
	waiting int                 // of them, waiting in Redis
}

// admissionItem is an item not handed out yet: trying at each tick, or
// waiting for its keys (until lock or failed).
type admissionItem[T any] struct {
	item    T
	refused int // ticks that found its keys held by another Client
	waiting bool
	lock    *Lock // taken by its wait, to hand out
}

// Admitted is an item an Admission admitted, and the Lock on its keys.
type Admitted[T any] struct {
	Item T
	Lock *Lock
}

// admissionWaits bounds the items of one Admission that wait in Redis, and
// admissionPatience is how many ticks an item is refused by another
// Client's keys before it waits for them: trying again costs one call per
// master for the whole tick, a wait calls of its own.
const (
	admissionWaits    = 4
	admissionPatience = 16
)

// NewAdmission returns an Admission whose items' baskets are keys(item),
// taken on c with opts, as TryEach takes them.
func NewAdmission[T any](c *Client, keys func(T) []string, opts ...LockOption) *Admission[T] {
	ctx, stop := context.WithCancel(context.Background())
	lc, _ := lockConfigOf(opts)
	isShared := make(map[string]bool, len(lc.shared))
	for _, k := range lc.shared {
		isShared[k] = true
	}
	lc.refusals = nil
	return &Admission[T]{c: c, keys: keys, opts: opts, lc: lc, isShared: isShared, ctx: ctx, stop: stop}
}

// Tick adds items to the pending ones and admits what it can, with one
// TryEach for all the pending items not waiting, oldest first: it returns
// the items admitted, those whose wait ended first. An error is the call's
// as a whole, as TryEach's (ErrClosed once the Admission is closed):
// nothing is handed out, and every item stays pending.
func (a *Admission[T]) Tick(ctx context.Context, items []T) ([]Admitted[T], error) {
	if a.ctx.Err() != nil {
		return nil, ErrClosed
	}
	a.mu.Lock()
	for _, it := range items {
		a.pending = append(a.pending, &admissionItem[T]{item: it})
	}
	var out []Admitted[T]
	var trying []*admissionItem[T]
	handed := map[*admissionItem[T]]bool{}
	for _, p := range a.pending {
		switch {
		case p.lock != nil:
			out = append(out, Admitted[T]{Item: p.item, Lock: p.lock})
			handed[p] = true
		case !p.waiting:
			trying = append(trying, p)
		}
	}
	a.mu.Unlock()

	var locks []*Lock
	var why []Refusal
	baskets := make([][]string, len(trying))
	if len(trying) > 0 {
		for i, p := range trying {
			baskets[i] = a.keys(p.item)
		}
		var err error
		if locks, err = a.c.TryEach(ctx, baskets, append(a.opts, WithRefusals(&why))...); err != nil {
			return nil, err // the items whose wait ended are handed out by the next tick
		}
	}
	inRedis := make(map[int]bool, len(why))
	for _, r := range why {
		inRedis[r.Basket] = r.inRedis
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, p := range trying {
		switch {
		case locks[i] != nil:
			out = append(out, Admitted[T]{Item: p.item, Lock: locks[i]})
			handed[p] = true
		case inRedis[i]:
			if p.refused++; p.refused >= admissionPatience && a.waiting < admissionWaits {
				a.wait(p, baskets[i])
			}
		}
	}
	kept := a.pending[:0]
	for _, p := range a.pending {
		if !handed[p] {
			kept = append(kept, p)
		}
	}
	clear(a.pending[len(kept):])
	a.pending = kept
	return out, nil
}

// wait has p wait for its keys, in their queues, in the background, until
// they are its own, the Admission closes or the wait fails (then p tries
// again at the next tick). Called with a.mu held.
func (a *Admission[T]) wait(p *admissionItem[T], keys []string) {
	p.waiting = true
	a.waiting++
	// The basket's own keys that are shared, and no other: a Lock takes
	// WithShared's keys whether its keys name them or not.
	lc := a.lc
	var exclusive []string
	lc.shared = nil
	for _, k := range keys {
		if a.isShared[k] {
			lc.shared = append(lc.shared, k)
		} else {
			exclusive = append(exclusive, k)
		}
	}
	lc.until = a.ctx
	a.wg.Go(func() {
		// Close ends the wait, not the call: its rollback lands before
		// the call returns, so that Close leaves nothing held.
		l, err := a.c.lockWith(context.Background(), exclusive, lc, true)
		a.mu.Lock()
		defer a.mu.Unlock()
		p.waiting = false
		a.waiting--
		if err == nil {
			p.lock = l
		}
	})
}

// Pending returns how many items are not admitted yet, waiting or not.
func (a *Admission[T]) Pending() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.pending)
}

// Close ends the waits, releases what they took and no tick handed out,
// and returns the items never admitted, oldest first. The Admission admits
// nothing after.
func (a *Admission[T]) Close() []T {
	a.stop()
	a.wg.Wait()
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []T
	var taken []*Lock
	for _, p := range a.pending {
		if p.lock != nil {
			taken = append(taken, p.lock)
		}
		out = append(out, p.item)
	}
	a.pending = nil
	if len(taken) > 0 {
		_ = a.c.UnlockEach(context.Background(), taken)
	}
	return out
}
