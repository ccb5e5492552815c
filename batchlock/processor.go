package batchlock

import (
	"cmp"
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/batchlock/batchlock/internal/backoff"
)

// Processor is a batch processor's admission, one per replica: baskets
// come in with Add, in arrival order, and each Next locks the oldest that
// are free with one TryEach (one call per master for the tick). A refused
// basket goes before every younger one, and is offered again once a key
// that refused it may be free, never every tick; one refused in Redis 8
// times waits in its keys' queues instead, where no replica's tick passes
// it. Keys in one slot ("{warehouse-7}sku-42") make the replicas meet in
// one script call. Every basket has an owner of its own, so two never both
// hold a key exclusively. Safe for concurrent use; docs/design.md ("Batch
// admission") says how it works.
type Processor[T any] struct {
	c    *Client
	tick int

	mu      sync.Mutex
	pending []*pendingBasket[T] // arrival order
	// held counts, by key, the baskets of ticks handed out and not done,
	// and the queued ones, that hold it or wait for it.
	held  map[string]int
	ticks map[*Tick[T]]struct{}
	// busy counts the ticks handed out and the calls taking ticks; once
	// closed, settled is closed when it reaches zero.
	busy   int
	closed bool
	// holding is how long the Processor's ticks have lately held their
	// keys, from Next to Done (a moving average; zero before the first).
	holding time.Duration
	settled chan struct{}
	wake    chan struct{} // a basket may be ready: a Next that waits looks again

	// queued counts the baskets waiting in their keys' queues, each with
	// a Lock on a goroutine of queuing; won are those that got their keys,
	// for the next Next to hand out.
	queued  int
	won     []wonBasket[T]
	queuing sync.WaitGroup
	// closing ends when Close begins: it ends the queued baskets' Locks
	// and wakes every Next that waits.
	closing context.Context
	close   context.CancelFunc

	// unreleased are the locks of ticks whose Done failed (a master down,
	// frozen or failing over): one goroutine of releasing lets go of them
	// all, one call per master, as soon as their masters answer and until
	// their leases end; Close lets go of those left.
	unreleased []*Lock
	releasing  sync.WaitGroup
	letGoing   bool // that goroutine runs
}

// wonBasket is a queued basket that got its keys.
type wonBasket[T any] struct {
	pb *pendingBasket[T]
	l  *Lock
	at time.Time
}

// A basket refused in Redis queueAfter times waits in its keys' queues;
// maxQueued of a Processor at a time (see Processor).
const (
	queueAfter = 8
	maxQueued  = 1
)

// pendingBasket is a basket added and not yet taken.
type pendingBasket[T any] struct {
	item    T
	basket  eachBasket
	offered bool // a call of Next has it now
	// readyAt is when it is offered again at the latest; zero: now.
	readyAt time.Time
	// waitsFor are the keys held by the Processor's ticks whose release
	// readies it.
	waitsFor []string
	refusals int  // refused in Redis, since added or last queued
	queued   bool // waits in its keys' queues
}

// Basket is what Add asks for: keys taken exclusively, keys taken shared,
// and units of counted keys (see WithUnits), all or none (a key in Keys
// too is taken exclusively, one in Shared and Units in units).
type Basket struct {
	Keys   []string
	Shared []string
	Units  map[string]int64
}

// Tick is what Next took: baskets, each held by its Lock until Done; and
// the baskets found bad in Redis, dropped with their error.
type Tick[T any] struct {
	p       *Processor[T]
	Baskets []Taken[T]
	// Failed are baskets that no tick will take, each with its Err and no
	// Lock: one that asks for units of a key with no capacity set
	// (ErrInvalid), or for more than its capacity (ErrOverCapacity: sold
	// out).
	Failed []Taken[T]
	done   sync.Once
	at     time.Time // handed out
}

// Taken is one basket of a Tick: held by its Lock, or dropped with its Err.
type Taken[T any] struct {
	Item T
	Lock *Lock
	// Waited is how long the basket waited, from Add to its Lock.
	Waited time.Duration
	Err    error
}

// defaultTick is a Processor's tick when NewProcessor is given 0.
const defaultTick = 256

// NewProcessor returns a Processor of c for baskets of items T, whose locks
// take c's defaults (New's options). A tick offers at most tick baskets,
// the oldest ready ones: 0 is 256, below 0 ErrInvalid. Close it before c:
// until then it counts in c's Stats.
func NewProcessor[T any](c *Client, tick int) (*Processor[T], error) {
	if c == nil {
		return nil, invalid("a nil Client")
	}
	if tick < 0 {
		return nil, invalid("tick of %d baskets: want 0 (the default) or more", tick)
	}
	tick = cmp.Or(tick, defaultTick)
	// A queued basket's Lock has an owner of its own (see Processor).
	closing, close := context.WithCancel(ContextWithOwner(context.Background(), ""))
	p := &Processor[T]{c: c, tick: tick, held: map[string]int{}, ticks: map[*Tick[T]]struct{}{},
		settled: make(chan struct{}), wake: make(chan struct{}, 1), closing: closing, close: close}
	c.processing.opened(p, func() (pending, queued int) {
		p.mu.Lock()
		defer p.mu.Unlock()
		return len(p.pending) + len(p.won), p.queued
	})
	return p, nil
}

// Add queues item's basket, after every basket added before it. A bad
// basket (no keys, an empty or reserved key, more than 65,536 keys)
// is ErrInvalid and queues nothing; after Close, Add is ErrClosed.
func (p *Processor[T]) Add(item T, b Basket) error {
	n := len(b.Keys) + len(b.Shared) + len(b.Units)
	if n == 0 {
		return invalid("a basket with no keys")
	}
	if n > maxEachKeys {
		return invalid("%d keys: at most %d in a basket", n, maxEachKeys)
	}
	isShared := make(map[string]bool, len(b.Shared))
	for i, k := range b.Shared {
		if err := p.c.checkKey(k, "shared key", i); err != nil {
			return err
		}
		isShared[k] = true
	}
	var units map[string]int64
	for _, k := range slices.Sorted(maps.Keys(b.Units)) {
		if err := p.c.checkKey(k, "counted key", len(units)); err != nil {
			return err
		}
		if b.Units[k] < 1 {
			return invalid("units of %q: %d must be > 0", k, b.Units[k])
		}
		if units == nil {
			units = make(map[string]int64, len(b.Units))
		}
		units[k] = b.Units[k]
		delete(isShared, k)
	}
	keys := make([]string, 0, n)
	for i, k := range b.Keys {
		if err := p.c.checkKey(k, "key", i); err != nil {
			return err
		}
		delete(isShared, k)
		delete(units, k)
		keys = append(keys, k)
	}
	for _, k := range b.Shared {
		if isShared[k] {
			keys = append(keys, k)
		}
	}
	for k := range units {
		keys = append(keys, k)
	}
	pb := &pendingBasket[T]{item: item, basket: eachBasket{keys: keys, isShared: isShared, units: units, named: &sortedKeys{}, arrived: time.Now()}}
	if err := pb.basket.plan(p.c); err != nil {
		return err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	p.pending = append(p.pending, pb)
	p.signal()
	return nil
}

// Next waits until some basket can be taken, and returns a tick of those
// it took, oldest first, each held until the tick's Done. A call that fails
// as a whole (a master down) is tried again, its baskets kept, until ctx
// ends (ctx's error) or the Processor or its Client closes (ErrClosed; the
// Processor's Close then hands back every basket not handed out).
func (p *Processor[T]) Next(ctx context.Context) (*Tick[T], error) {
	if err := checkContext(ctx); err != nil {
		return nil, err
	}
	// Each basket's owner is its own (see Processor).
	ctx = ContextWithOwner(ctx, "")
	failures := 0
	for {
		won, offer, until, err := p.offer()
		if err != nil {
			return nil, err
		}
		if won != nil {
			return won, nil
		}
		if len(offer) == 0 {
			if err := p.await(ctx, until); err != nil {
				return nil, err
			}
			continue
		}
		tick, err := p.take(ctx, offer)
		switch {
		case err == nil && len(tick.Baskets)+len(tick.Failed) > 0:
			return tick, nil
		case err == nil:
			failures = 0
		case errors.Is(err, ErrClosed) || ctx.Err() != nil:
			return nil, err
		default:
			failures++
			if err := p.await(ctx, time.Now().Add(backoff.Jittered(failures, 10*time.Millisecond, p.c.cfg.pollMax))); err != nil {
				return nil, err
			}
		}
	}
}

// offer hands out a tick of the queued baskets that got their keys, if
// there are some; else it picks the baskets of a tick, the oldest ready
// ones, marked offered and counted busy; with none, until is when one is
// ready at the latest (zero: when a tick lets go or a basket comes).
func (p *Processor[T]) offer() (won *Tick[T], offer []*pendingBasket[T], until time.Time, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.c.closing.Err() != nil {
		// A closed Client ended every won basket's Lock: Close hands
		// them back.
		return nil, nil, time.Time{}, ErrClosed
	}
	for _, w := range p.won {
		if w.l.Err() != nil {
			// Ended while it waited to be handed out (its lease, a
			// failover): offered again, as if never queued.
			p.letGo(w.l.sortedKeys())
			i, _ := slices.BinarySearchFunc(p.pending, w.pb.basket.arrived, func(pb *pendingBasket[T], at time.Time) int { return pb.basket.arrived.Compare(at) })
			p.pending = slices.Insert(p.pending, i, w.pb)
			continue
		}
		if won == nil {
			won = &Tick[T]{p: p, at: time.Now()}
		}
		won.Baskets = append(won.Baskets, Taken[T]{Item: w.pb.item, Lock: w.l, Waited: w.at.Sub(w.pb.basket.arrived)})
	}
	p.won = nil
	if won != nil {
		p.ticks[won] = struct{}{}
		p.c.processing.ticks.Add(1)
		p.busy++
		return won, nil, time.Time{}, nil
	}
	now := time.Now()
	for _, pb := range p.pending {
		switch {
		case pb.offered || pb.queued || len(pb.waitsFor) > 0:
		case !pb.readyAt.After(now):
			if len(offer) < p.tick {
				pb.offered = true
				offer = append(offer, pb)
			}
		case until.IsZero() || pb.readyAt.Before(until):
			until = pb.readyAt
		}
	}
	if len(offer) > 0 {
		p.busy++
	}
	return nil, offer, until, nil
}

// await waits until until (zero: no time), a basket may be ready, ctx ends
// or the Processor or its Client closes.
func (p *Processor[T]) await(ctx context.Context, until time.Time) error {
	var timeout <-chan time.Time
	if !until.IsZero() {
		t := time.NewTimer(time.Until(until))
		defer t.Stop()
		timeout = t.C
	}
	select {
	case <-p.wake:
		return nil
	case <-timeout:
		return nil
	case <-ctx.Done():
		return ended(ctx)
	case <-p.c.closing.Done():
		return ErrClosed
	case <-p.closing.Done():
		return ErrClosed
	}
}

// signal wakes a Next that waits. Called with p.mu held.
func (p *Processor[T]) signal() {
	select {
	case p.wake <- struct{}{}:
	default:
	}
}

// take tries offer with one TryEach, and returns a tick of the baskets
// taken; the others wait as their refusal says. Once the Processor closed,
// what it took is let go and it returns ErrClosed.
func (p *Processor[T]) take(ctx context.Context, offer []*pendingBasket[T]) (*Tick[T], error) {
	baskets := make([]eachBasket, len(offer))
	for i, pb := range offer {
		baskets[i] = pb.basket
	}
	locks, why, err := p.c.tryEach(ctx, lockConfig{}, baskets, true)
	now := time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	defer p.signal() // what this call offered is offered no longer
	for _, pb := range offer {
		pb.offered = false
	}
	if err != nil {
		p.settle()
		return nil, err
	}
	tick := &Tick[T]{p: p, at: now}
	// keepingUp: the backlog left after this tick is half a tick at most,
	// so that a refused basket retried soon costs no other basket its
	// place (see wait).
	backlog := len(p.pending)
	for _, l := range locks {
		if l != nil {
			backlog--
		}
	}
	keepingUp := backlog <= p.tick/2
	taken := map[*pendingBasket[T]]bool{}
	// first is, by key, the first basket of the tick that Redis refused
	// with it: the one that refused the later ones in the process.
	first := map[string]*pendingBasket[T]{}
	next := 0 // the next of why
	for i, pb := range offer {
		if l := locks[i]; l != nil {
			taken[pb] = true
			tick.Baskets = append(tick.Baskets, Taken[T]{Item: pb.item, Lock: l, Waited: now.Sub(pb.basket.arrived)})
			p.hold(l.sortedKeys())
			continue
		}
		for next < len(why) && why[next].basket < i {
			next++
		}
		r := refusal{basket: i, cause: refusedHeld} // every refusal is told: not reached
		if next < len(why) && why[next].basket == i {
			r = why[next]
		}
		if r.cause == refusedBad {
			taken[pb] = true
			tick.Failed = append(tick.Failed, Taken[T]{Item: pb.item, Err: r.err})
			continue
		}
		p.wait(pb, r, first, now, keepingUp)
		if r.cause == refusedHeld {
			for _, k := range pb.basket.keys {
				if first[k] == nil {
					first[k] = pb
				}
			}
		}
	}
	if p.closed {
		// Close hands these baskets back: they are still pending. An
		// unlock on a context that ended still makes its one attempt.
		p.mu.Unlock()
		_ = p.c.UnlockEach(ctx, tick.locks())
		p.mu.Lock()
		p.forget(tick)
		p.settle()
		return nil, ErrClosed
	}
	p.pending = slices.DeleteFunc(p.pending, func(pb *pendingBasket[T]) bool { return taken[pb] })
	if len(tick.Baskets) == 0 {
		p.settle()
		return tick, nil
	}
	p.ticks[tick] = struct{}{}
	p.c.processing.ticks.Add(1)
	return tick, nil
}

// wait has pb, refused as r says, wait until a key that refused it may be
// free; first are the baskets of its tick refused in Redis before it, by
// key; keepingUp, the Processor's backlog is half a tick at most. Called
// with p.mu held.
func (p *Processor[T]) wait(pb *pendingBasket[T], r refusal, first map[string]*pendingBasket[T], now time.Time, keepingUp bool) {
	pb.waitsFor, pb.readyAt = nil, time.Time{}
	p.c.processing.refused[r.cause].Add(1)
	if r.cause == refusedHeld {
		if pb.refusals++; pb.refusals >= queueAfter && p.queued < maxQueued && !p.closed {
			p.queue(pb)
			return
		}
		// Another replica's tick holds its keys about as long as this
		// Processor's do, so that a basket retried after that mostly gets
		// them; but a Processor behind has a tick's worth of other baskets
		// to offer, and its refused ones, retried so often, mostly meet
		// the other replicas' next ticks: for them the backoff doubles on
		// (docs/speed.md).
		ceiling := p.c.cfg.pollMax
		if p.holding > 0 && keepingUp {
			ceiling = min(ceiling, max(2*p.holding, time.Millisecond))
		}
		wait := backoff.Jittered(pb.refusals, time.Millisecond, ceiling)
		if r.wait > 0 && r.wait+time.Millisecond < wait {
			wait = r.wait + time.Millisecond
		}
		pb.readyAt = now.Add(wait)
		return
	}
	// Refused in the process: by an earlier basket of the tick, or another
	// lock of the Client. The Processor's own ticks ready it as they let
	// go; behind an earlier basket that Redis refused it waits as long, and
	// another lock's release is polled for.
	for _, k := range r.keys {
		if p.held[k] > 0 {
			pb.waitsFor = append(pb.waitsFor, k)
		} else if e := first[k]; e != nil && pb.readyAt.IsZero() {
			pb.readyAt = e.readyAt
		}
	}
	switch {
	case len(pb.waitsFor) > 0:
		pb.readyAt = time.Time{}
	case pb.readyAt.IsZero() && r.cause == refusedGate:
		pb.readyAt = now.Add(backoff.Jittered(1, time.Millisecond, p.c.cfg.pollMax))
	}
}

// queue has pb wait in its keys' queues with a Lock of its own, and, once
// that holds its keys, makes it won; a Lock that fails (the Processor or
// its Client closed, a master down) leaves it to be offered again. Called
// with p.mu held.
func (p *Processor[T]) queue(pb *pendingBasket[T]) {
	pb.queued = true
	p.queued++
	// Its keys are the Processor's while it waits, as a tick's: a basket
	// that the Lock's gates refuse waits for it.
	p.hold(pb.basket.keys)
	exclusive, shared := pb.basket.split()
	p.queuing.Go(func() {
		l, err := p.c.lock(p.closing, exclusive, lockConfig{shared: shared, units: pb.basket.units, since: pb.basket.arrived}, true)
		p.mu.Lock()
		defer p.mu.Unlock()
		pb.queued = false
		p.queued--
		pb.refusals = 0
		if err == nil {
			p.pending = slices.DeleteFunc(p.pending, func(other *pendingBasket[T]) bool { return other == pb })
			p.won = append(p.won, wonBasket[T]{pb: pb, l: l, at: time.Now()})
			p.hold(l.sortedKeys())
		}
		p.letGo(pb.basket.keys)
	})
}

// heldFor counts d in how long the ticks hold their keys. Called with p.mu
// held.
func (p *Processor[T]) heldFor(d time.Duration) {
	if p.holding == 0 {
		p.holding = d
		return
	}
	p.holding += (d - p.holding) / 8
}

// settle counts a tick or a call ended. Called with p.mu held.
func (p *Processor[T]) settle() {
	if p.busy--; p.busy == 0 && p.closed {
		close(p.settled)
	}
}

// forget forgets the keys of tick, let go. Called with p.mu held.
func (p *Processor[T]) forget(tick *Tick[T]) {
	for _, b := range tick.Baskets {
		p.letGo(b.Lock.sortedKeys())
	}
}

// hold counts keys as held by the Processor. Called with p.mu held.
func (p *Processor[T]) hold(keys []string) {
	for _, k := range keys {
		p.held[k]++
	}
}

// letGo counts keys held once less, and readies the baskets that waited
// for them. Called with p.mu held.
func (p *Processor[T]) letGo(keys []string) {
	for _, k := range keys {
		if p.held[k]--; p.held[k] <= 0 {
			delete(p.held, k)
		}
	}
	for _, pb := range p.pending {
		if len(pb.waitsFor) > 0 && !slices.ContainsFunc(pb.waitsFor, func(k string) bool { return p.held[k] > 0 }) {
			pb.waitsFor = nil
		}
	}
	p.signal()
}

// Done lets go of every basket of the tick, one call per master for all of
// them (UnlockEach), and readies the baskets that waited for their keys. It
// returns UnlockEach's error; the Processor then lets go of what that left
// once its masters answer, until the leases end. Later calls do nothing.
func (t *Tick[T]) Done(ctx context.Context) error {
	var err error
	t.done.Do(func() {
		err = t.p.c.UnlockEach(ctx, t.locks())
		var left []*Lock
		if err != nil {
			left = slices.DeleteFunc(t.locks(), (*Lock).releasedAll)
		}
		p := t.p
		p.mu.Lock()
		defer p.mu.Unlock()
		p.releaseLater(left)
		if _, ok := p.ticks[t]; ok {
			delete(p.ticks, t)
			p.forget(t)
			p.settle()
			p.heldFor(time.Since(t.at))
		}
	})
	return err
}

// releaseLater adds locks, which a failed Done left holding, to those the
// goroutine of releasing lets go of, and starts it if it is not running.
// Once the Processor is closed a failed Done's keys go at the end of their
// lease. Called with p.mu held.
func (p *Processor[T]) releaseLater(locks []*Lock) {
	if len(locks) == 0 || p.closed {
		return
	}
	p.unreleased = append(p.unreleased, locks...)
	if p.letGoing {
		return
	}
	p.letGoing = true
	p.releasing.Go(p.letGoOfUnreleased)
}

// letGoOfUnreleased lets go of the unreleased locks, again and again,
// backing off, until each went through or its lease ended, or the
// Processor or its Client closes (Close lets go of the rest).
func (p *Processor[T]) letGoOfUnreleased() {
	for attempt := 0; ; attempt++ {
		if backoff.Sleep(p.closing, backoff.Jittered(attempt, 10*time.Millisecond, p.c.cfg.pollMax)) != nil || p.c.closing.Err() != nil {
			p.mu.Lock()
			p.letGoing = false
			p.mu.Unlock()
			return
		}
		p.mu.Lock()
		now := time.Now()
		// Past its lease a key is free again: nothing to let go.
		p.unreleased = slices.DeleteFunc(p.unreleased, func(l *Lock) bool { return !l.ValidUntil().After(now) })
		locks := slices.Clone(p.unreleased)
		if len(locks) == 0 {
			p.letGoing = false
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
		ctx, cancel := context.WithTimeout(p.closing, unlockTimeout)
		_ = p.c.UnlockEach(ctx, locks)
		cancel()
		released := slices.DeleteFunc(locks, func(l *Lock) bool { return !l.releasedAll() })
		p.mu.Lock()
		p.unreleased = slices.DeleteFunc(p.unreleased, func(l *Lock) bool { return slices.Contains(released, l) })
		p.mu.Unlock()
	}
}

// locks are the tick's baskets' locks.
func (t *Tick[T]) locks() []*Lock {
	locks := make([]*Lock, len(t.Baskets))
	for i, b := range t.Baskets {
		locks[i] = b.Lock
	}
	return locks
}

// Close stops the Processor: Next and Add return ErrClosed from now on. It
// ends the queued baskets' waits, waits for the ticks handed out to be done
// while ctx lets it, then lets go of those still held (told as released,
// not lost), and returns the items of the baskets not handed out, in
// arrival order, for another replica. A queued basket's place goes as a
// Lock's whose context ends: within 5 s. A second Close returns nothing.
func (p *Processor[T]) Close(ctx context.Context) ([]T, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, nil
	}
	p.closed = true
	if p.busy == 0 {
		close(p.settled)
	}
	p.mu.Unlock()
	// A queued basket's Lock returns at once, having given back what it
	// took; one that got its keys first is won, let go below, as are the
	// locks of failed Dones not let go yet.
	p.close()
	p.queuing.Wait()
	p.releasing.Wait()
	p.mu.Lock()
	back := p.pending
	won := p.unreleased
	for _, w := range p.won {
		back = append(back, w.pb)
		won = append(won, w.l)
	}
	slices.SortStableFunc(back, func(a, b *pendingBasket[T]) int { return a.basket.arrived.Compare(b.basket.arrived) })
	left := make([]T, len(back))
	for i, pb := range back {
		left[i] = pb.item
	}
	p.pending, p.won, p.unreleased = nil, nil, nil
	p.mu.Unlock()
	p.c.processing.closed(p)
	// What fails here goes at the end of its lease; Close reports the
	// ticks' Dones alone.
	_ = p.c.UnlockEach(ctx, won)

	select {
	case <-p.settled:
		return left, nil
	case <-ctx.Done():
	}
	p.mu.Lock()
	ticks := make([]*Tick[T], 0, len(p.ticks))
	for t := range p.ticks {
		ticks = append(ticks, t)
	}
	p.mu.Unlock()
	// ctx ended: each Done makes its one attempt still.
	var errs []error
	for _, t := range ticks {
		errs = append(errs, t.Done(ctx))
	}
	return left, errors.Join(errs...)
}
