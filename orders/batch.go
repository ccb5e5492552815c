package orders

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/batchlock/batchlock/batchlock"
)

// Batched processes orders a tick at a time, as a batch order processor
// pulls them from its queue: each tick takes up to Size orders (those
// refused by the last tick first), locks every basket that is free with one
// TryEach (one call per master for the whole tick), reads and writes the
// stock of the orders taken in one pipeline each, and lets go with one
// UnlockEach. An order whose basket is busy waits for the next tick. A
// Batched runs one tick at a time.
type Batched struct {
	Locker *batchlock.Client
	Stock  *Stock
	Think  time.Duration // as in Locked, once per tick
	Size   int           // orders per tick; default 256
}

// RunBatched processes orders with b until all are done, cfg.Stop is
// closed or ctx ends. cfg.Workers is not used: one goroutine runs the
// ticks; cfg.Attempts bounds the ticks in a row that fail as a whole for an
// order (a master down), cfg.Done is called after each order.
func RunBatched(ctx context.Context, b *Batched, orders []Order, cfg RunConfig) Result {
	return RunTicks(ctx, b, orders, Ticks{Size: b.Size}, cfg)
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
	backlog := len(carry)
	if ticks.Rate > 0 {
		for end := time.Now(); next < len(orders) && !arrival(next).After(end); next++ {
			backlog++
		}
	}
	r.backlog(backlog)
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

// Tick locks the baskets of batch that are free, fulfils their orders and
// lets go: it returns per order what became of it, and the orders refused
// (indices into batch). An error is the tick's as a whole: nothing was
// locked.
func (b *Batched) Tick(ctx context.Context, batch []Order) ([]Fulfilled, []int, error) {
	baskets := make([][]string, len(batch))
	var promos []string
	for i, o := range batch {
		p := b.Stock.PromoKeys(o)
		baskets[i] = append(b.Stock.Keys(o), p...)
		promos = append(promos, p...)
	}
	slices.Sort(promos)
	asked := time.Now()
	locks, err := b.Locker.TryEach(ctx, baskets, batchlock.WithShared(slices.Compact(promos)...))
	wait := time.Since(asked)
	if err != nil {
		return nil, nil, err
	}
	var refused, taken []int
	for i, l := range locks {
		if l == nil {
			refused = append(refused, i)
		} else {
			taken = append(taken, i)
		}
	}
	out := b.Stock.FulfilTaken(ctx, batch, taken, wait, func(i, line int) int64 {
		return locks[i].Token(baskets[i][line]) // the stock keys come first, in line order
	}, b.Think)
	// The unlock's error changes nothing the orders did: their keys are
	// left to their lease.
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_ = b.Locker.UnlockEach(uctx, locks)
	return out, refused, nil
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
