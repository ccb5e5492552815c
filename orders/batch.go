package orders

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/internal/backoff"
)

// Batched processes orders as a batch order processor run as replicas
// does, with a batchlock.Processor: orders come in as they arrive, each
// tick takes up to Size of them whose baskets are free (one TryEach, one
// call per master), reads and writes their stock in one pipeline each, and
// lets go with the tick's Done. A refused order waits in the Processor,
// first among those after it, until a key that refused it may be free.
type Batched struct {
	Locker *batchlock.Client
	Stock  *Stock
	Think  time.Duration // as in Locked, once per tick
	Size   int           // orders per tick; default 256
	// Space, when not empty, is the hash tag of every lock key: the locks
	// of every SKU and promotion in one slot, where replicas meet in one
	// script call (see batchlock.Processor). The stock keys stay where
	// they are.
	Space string
	// Counted takes each line's quantity of its SKU in units
	// (Basket.Units) instead of the SKU exclusively, as Counted does: the
	// Stock must write concurrently and its capacities be set
	// (SetCapacities with the same Space). An order whose lines were
	// written consumes its units with the tick (ConsumeEach); one asking
	// more than a SKU has left is rejected (Tick.Failed).
	Counted bool
	// Stall, when For is set, holds the first tick taken At after the
	// run's start For longer before its orders are fulfilled, as a paused
	// process holds its keys: the bench's stall.
	Stall Stall
}

// Stall is a pause of a processor holding its tick (Batched.Stall).
type Stall struct{ At, For time.Duration }

// lockKey is the lock key of a stock or promotion key.
func (b *Batched) lockKey(key string) string { return InSpace(b.Space, key) }

// InSpace is key in the slot of hash tag space (Batched.Space): key itself
// when space is empty.
func InSpace(space, key string) string {
	if space == "" {
		return key
	}
	return "{" + space + "}" + key
}

// basket is o's basket: its stock's lock keys in line order, its
// promotions' shared.
func (b *Batched) basket(o Order) batchlock.Basket {
	promos := b.Stock.PromoKeys(o)
	for i, k := range promos {
		promos[i] = b.lockKey(k)
	}
	if b.Counted {
		return batchlock.Basket{Shared: promos, Units: LineUnits(o, func(sku string) string { return b.lockKey(b.Stock.Key(sku)) })}
	}
	keys := b.Stock.Keys(o)
	for i, k := range keys {
		keys[i] = b.lockKey(k)
	}
	return batchlock.Basket{Keys: keys, Shared: promos}
}

// RunBatched processes orders with b until all are done, cfg.Stop is
// closed or ctx ends: an order is added to b's Processor when it arrives
// (ticks.Rate, as RunTicks says: in a closed loop, as the Processor has
// fewer than a tick's worth waiting; ticks.Size is not used, b.Size is),
// and a locked order's lock wait runs from its arrival to its lock.
// cfg.Workers and cfg.Attempts are not used (the Processor tries a tick
// that failed as a whole again itself); cfg.Done is called after each
// order, cfg.Admitted after each tick with baskets. The result's Backlog
// is the orders added and not done when the run ended (Overdue as Result
// says), its Refusals the baskets the Processor's ticks refused (read from
// b.Locker's Stats: no other Processor of b.Locker may run meanwhile).
func RunBatched(ctx context.Context, b *Batched, orders []Order, ticks Ticks, cfg RunConfig) Result {
	cfg = cfg.withDefaults()
	r := newRecorder()
	start := time.Now()
	size := tickSize(b.Size)
	before := b.Locker.Stats() // the Locker may have run Processors before
	p, err := batchlock.NewProcessor[int](b.Locker, size)
	if err != nil {
		for _, o := range orders {
			r.record(o, Outcome{}, err, nil)
		}
		return r.result(time.Since(start))
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	if cfg.Stop != nil {
		go func() {
			select {
			case <-cfg.Stop:
				cancel()
			case <-runCtx.Done():
			}
		}()
	}
	var refused atomic.Int64 // orders whose Add failed
	add := func(i int) {
		if err := p.Add(i, b.basket(orders[i])); err != nil {
			r.record(orders[i], Outcome{}, err, nil)
			refused.Add(1)
		}
	}
	arrivals := make(chan struct{})
	next := 0 // the next order to add in a closed loop
	if ticks.Rate > 0 {
		go func() {
			defer close(arrivals)
			for i := range orders {
				at := start.Add(time.Duration(float64(i) / ticks.Rate * float64(time.Second)))
				if backoff.Sleep(runCtx, time.Until(at)) != nil {
					return
				}
				add(i)
			}
		}()
	} else {
		close(arrivals)
	}
	stalled := b.Stall.For == 0
	for done := 0; done+int(refused.Load()) < len(orders); {
		// Closed loop: a tick's worth waiting, those added and not handed out.
		for ticks.Rate == 0 && next < len(orders) && next-done-int(refused.Load()) < size {
			add(next)
			next++
		}
		tick, err := p.Next(runCtx)
		if err != nil {
			break
		}
		if cfg.Admitted != nil && len(tick.Baskets) > 0 {
			cfg.Admitted()
		}
		if !stalled && time.Since(start) >= b.Stall.At {
			stalled = true
			_ = backoff.Sleep(runCtx, b.Stall.For)
		}
		r.tick(len(tick.Baskets))
		done += b.fulfil(ctx, tick, orders, cfg, r)
	}
	cancel()
	<-arrivals
	left, _ := p.Close(context.WithoutCancel(ctx))
	overdue := len(left)
	if ticks.Rate > 0 {
		end := time.Now()
		overdue = 0
		for _, i := range left {
			if end.Sub(start) >= time.Duration(float64(i)/ticks.Rate*float64(time.Second))+cfg.OverdueAfter {
				overdue++
			}
		}
	}
	r.backlog(len(left), overdue)
	st := b.Locker.Stats()
	r.refusals(int(st.RefusedByEarlier + st.RefusedByClient + st.RefusedInRedis -
		before.RefusedByEarlier - before.RefusedByClient - before.RefusedInRedis))
	return r.result(time.Since(start))
}

// fulfil fulfils the orders of tick, reading and writing their stock in
// one pipeline each, lets go of the tick, records each order in r, and
// returns how many it did.
func (b *Batched) fulfil(ctx context.Context, tick *batchlock.Tick[int], orders []Order, cfg RunConfig, r *recorder) int {
	batch := make([]Order, len(tick.Baskets))
	all := make([]int, len(batch))
	for n, t := range tick.Baskets {
		batch[n], all[n] = orders[t.Item], n
	}
	fctx, cancel := context.WithTimeout(ctx, cfg.OrderTimeout)
	out := b.Stock.FulfilTaken(fctx, batch, all, 0, func(n, line int) int64 {
		if b.Counted {
			return 0 // the holders of a SKU's units write it at once
		}
		return tick.Baskets[n].Lock.Token(b.lockKey(b.Stock.Key(batch[n].Lines[line].SKU)))
	}, b.Think)
	cancel()
	if b.Counted {
		b.consume(ctx, tick, out)
	}
	// The unlock's error changes nothing the orders did: their keys are
	// left to their lease.
	uctx, cancelUnlock := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	_ = tick.Done(uctx)
	cancelUnlock()
	for n, o := range batch {
		out[n].LockWait = tick.Baskets[n].Waited
		r.record(o, out[n].Outcome, out[n].Err, nil)
		if cfg.Done != nil {
			cfg.Done()
		}
	}
	for _, f := range tick.Failed {
		// Sold out: rejected, nothing written; any other error is the order's.
		var err error
		if !errors.Is(f.Err, batchlock.ErrOverCapacity) {
			err = f.Err
		}
		r.record(orders[f.Item], Outcome{}, err, nil)
		if cfg.Done != nil {
			cfg.Done()
		}
	}
	return len(batch) + len(tick.Failed)
}

// consumeTries bounds the ConsumeEach calls of a tick's sales, each of at
// most 2 s: a master busy past one call's timeout may well serve the next.
const consumeTries = 5

// consume sells the units of the orders of tick that out says were written
// (accepted), one ConsumeEach for all of them, made again for those it did
// not end while it fails (a consume sent again sells nothing twice); an
// order whose units were not sold is given the error.
func (b *Batched) consume(ctx context.Context, tick *batchlock.Tick[int], out []Fulfilled) {
	var left []*batchlock.Lock
	for n, t := range tick.Baskets {
		if out[n].Accepted && out[n].Err == nil {
			left = append(left, t.Lock)
		}
	}
	var err error
	for try := 0; try < consumeTries && len(left) > 0; try++ {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		err = b.Locker.ConsumeEach(cctx, left)
		cancel()
		left = slices.DeleteFunc(left, func(l *batchlock.Lock) bool { return l.Err() != nil })
	}
	for n, t := range tick.Baskets {
		switch {
		case !out[n].Accepted || out[n].Err != nil:
		case slices.Contains(left, t.Lock):
			out[n].Err = fmt.Errorf("consuming the tick's units, %d tries: %w", consumeTries, err)
		case errors.Is(t.Lock.Err(), batchlock.ErrLockLost):
			out[n].Err = fmt.Errorf("consuming the units of %d SKUs: %w", len(t.Lock.Keys()), t.Lock.Err())
		}
	}
}

// Ticker locks the baskets of a tick's orders that are free, fulfils those
// orders and lets go (Batched does it with TryEach): it returns per order
// what became of it, and the orders refused (indices into batch). An error
// is the tick's as a whole: nothing of it was locked.
type Ticker interface {
	Tick(ctx context.Context, batch []Order) ([]Fulfilled, []int, error)
}

// Ticks shapes a run of ticks.
type Ticks struct {
	Size int // orders per tick; default 256
	// Rate, when above 0, makes the run an open loop: orders arrive Rate a
	// second, the first at the start, and a tick takes those that have
	// arrived (after the refused ones), waiting for the next arrival when
	// there are none. At 0 every order is there from the start and every
	// tick is full: a closed loop.
	Rate float64
}

// RunTicks processes orders with t, a tick of ticks.Size orders at a time,
// the orders refused by a tick first in the next, until all are done,
// cfg.Stop is closed or ctx ends; cfg as RunBatched says. An order arrives
// when ticks.Rate says, or in a closed loop when it first goes into a tick;
// a locked order's lock wait runs from its arrival to its lock (the ticks it
// waited, then the LockWait its tick gave), and the result's
// Backlog is the orders that had arrived but were not done when the run
// ended. In an open loop a tick that took nothing waits for the next
// arrival before the next tick (once all arrived, for an arrival's time).
func RunTicks(ctx context.Context, t Ticker, orders []Order, ticks Ticks, cfg RunConfig) Result {
	size := tickSize(ticks.Size)
	cfg = cfg.withDefaults()
	r := newRecorder()
	start := time.Now()
	arrival := func(i int) time.Time { return start.Add(time.Duration(float64(i) / ticks.Rate * float64(time.Second))) }
	failedTicks := map[string]int{} // by order: ticks failed as a whole in a row
	var carry []Order               // refused by the last tick: first in the next
	next := 0
	// arrived is when each order not done yet arrived: an order's lock wait
	// runs from then to its lock.
	arrived := map[string]time.Time{}
	// done records o, whose last lock was asked for at asked.
	done := func(o Order, asked time.Time, out Outcome, err error) {
		if out.Locked {
			out.LockWait += asked.Sub(arrived[o.ID])
		}
		delete(arrived, o.ID)
		r.record(o, out, err, nil)
		if cfg.Done != nil {
			cfg.Done()
		}
	}
	for len(carry) > 0 || next < len(orders) {
		if ctx.Err() != nil || stopped(cfg.Stop) {
			break
		}
		batch := carry
		now := time.Now()
		for len(batch) < size && next < len(orders) {
			at := now
			if ticks.Rate > 0 {
				if at = arrival(next); at.After(now) {
					break
				}
			}
			batch = append(batch, orders[next])
			arrived[orders[next].ID] = at
			next++
		}
		if len(batch) == 0 {
			if !awaitArrival(ctx, cfg.Stop, arrival(next)) {
				break
			}
			continue
		}
		carry = nil
		asked := time.Now()
		tctx, cancel := context.WithTimeout(ctx, cfg.OrderTimeout)
		outcomes, refused, err := t.Tick(tctx, batch)
		cancel()
		if err != nil {
			r.retried(err)
			for _, o := range batch {
				if failedTicks[o.ID]++; failedTicks[o.ID] >= cfg.Attempts {
					done(o, asked, Outcome{}, err)
					continue
				}
				carry = append(carry, o)
			}
			if pause(ctx, min(failedTicks[batch[0].ID], 6)) != nil {
				break
			}
			continue
		}
		r.tick(len(batch) - len(refused))
		wasRefused := make([]bool, len(batch))
		for _, i := range refused {
			wasRefused[i] = true
		}
		for i, o := range batch {
			if wasRefused[i] {
				continue
			}
			delete(failedTicks, o.ID)
			done(o, asked, outcomes[i].Outcome, outcomes[i].Err)
		}
		for _, i := range refused {
			r.refusal()
			carry = append(carry, batch[i])
		}
		if ticks.Rate > 0 && len(refused) == len(batch) {
			at := arrival(next)
			if next == len(orders) {
				at = now.Add(time.Duration(float64(time.Second) / ticks.Rate)) // all arrived: a tick per arrival's time
			}
			if !awaitArrival(ctx, cfg.Stop, at) {
				break
			}
		}
	}
	backlog, overdue := len(carry), len(carry)
	if ticks.Rate > 0 {
		end := time.Now()
		late := func(at time.Time) bool { return end.Sub(at) >= cfg.OverdueAfter }
		overdue = 0
		for _, o := range carry {
			if late(arrived[o.ID]) {
				overdue++
			}
		}
		for ; next < len(orders) && !arrival(next).After(end); next++ {
			backlog++
			if late(arrival(next)) {
				overdue++
			}
		}
	}
	r.backlog(backlog, overdue)
	return r.result(time.Since(start))
}

// awaitArrival waits until at, and reports false if ctx ends or stop is
// closed first.
func awaitArrival(ctx context.Context, stop <-chan struct{}, at time.Time) bool {
	timer := time.NewTimer(time.Until(at))
	defer timer.Stop()
	select {
	case <-timer.C:
		return true
	case <-stop:
	case <-ctx.Done():
	}
	return false
}

// tickSize is the orders per tick of a Size setting: 256 unless above 0.
func tickSize(size int) int { return cmp.Or(max(size, 0), 256) }

func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}
