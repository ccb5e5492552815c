package orders

import (
	"cmp"
	"context"
	"time"

	"github.com/batchlock/batchlock/batchlock"
)

// Batched processes orders a tick at a time, as a batch order processor
// pulls them from its queue: each tick adds the orders that arrived to those
// not admitted yet, locks every basket it can with one batchlock.Admission
// tick (one TryEach, one call per master for the whole tick), reads and
// writes the stock of the orders admitted in one pipeline each, and lets go
// with one UnlockEach. An order whose basket is busy keeps its turn: first
// in the next tick, or, when another processor holds its SKUs, waiting in
// their queues until a tick hands it out.
type Batched struct {
	Locker *batchlock.Client
	Stock  *Stock
	Think  time.Duration // as in Locked, once per tick
	// Promos is the number of promotions orders may read, Promo(0) ..
	// Promo(Promos-1): they are locked shared.
	Promos int

	adm *batchlock.Admission[Order]
}

// RunBatched processes orders with b until all are done, cfg.Stop is
// closed or ctx ends, size orders a tick at most (default 256); cfg as
// RunTicks says. It closes b's admission at the end.
func RunBatched(ctx context.Context, b *Batched, orders []Order, size int, cfg RunConfig) Result {
	defer b.Close()
	return RunTicks(ctx, b, orders, size, cfg)
}

// Ticker processes orders a tick at a time: each tick adds the orders that
// arrived to those it has not finished, locks what it can, fulfils the
// orders it locked and lets go. It returns the orders it finished, with what
// became of each, and how many it keeps for a later tick. An error is the
// tick's as a whole: nothing of it was locked, and its orders are kept.
type Ticker interface {
	Tick(ctx context.Context, arrivals []Order) (finished []Finished, kept int, err error)
}

// Finished is an order a tick finished, and what became of it.
type Finished struct {
	Order Order
	Fulfilled
}

// RunTicks processes orders with t, the orders that arrived since the last
// tick in each, as many as keep a tick at size (default 256) with the
// orders t kept, until all are done, cfg.Stop is closed or ctx ends.
// cfg.Workers is not used: one goroutine runs the ticks; cfg.Attempts
// bounds the ticks in a row that fail as a whole (a master down) before
// the run stops; cfg.Done is called after each order.
func RunTicks(ctx context.Context, t Ticker, orders []Order, size int, cfg RunConfig) Result {
	size = cmp.Or(max(size, 0), 256)
	cfg = cfg.withDefaults()
	r := newRecorder()
	start := time.Now()
	kept, failed, next := 0, 0, 0
	for kept > 0 || next < len(orders) {
		if ctx.Err() != nil || stopped(cfg.Stop) {
			break
		}
		n := min(max(size-kept, 0), len(orders)-next)
		arrivals := orders[next : next+n]
		tctx, cancel := context.WithTimeout(ctx, cfg.OrderTimeout)
		finished, left, err := t.Tick(tctx, arrivals)
		cancel()
		if err != nil {
			r.retried(err)
			if failed++; failed >= cfg.Attempts || pause(ctx, min(failed, 6)) != nil {
				break
			}
			next += n // the ticker keeps them
			kept += n
			continue
		}
		failed = 0
		next += n
		kept = left
		r.tick(len(finished))
		for range left {
			r.refusal()
		}
		for _, f := range finished {
			r.record(f.Order, f.Outcome, f.Err, nil)
			if cfg.Done != nil {
				cfg.Done()
			}
		}
	}
	return r.result(time.Since(start))
}

// BatchTicker locks the baskets of a batch of orders that are free,
// fulfils those orders and lets go: it returns per order what became of
// it, and the orders refused (indices into batch). An error is the batch's
// as a whole: nothing of it was locked.
type BatchTicker interface {
	TickBatch(ctx context.Context, batch []Order) ([]Fulfilled, []int, error)
}

// Carried is the Ticker of a BatchTicker: the orders a batch refused, or
// that failed with it, go first in the next.
type Carried struct {
	T     BatchTicker
	carry []Order
}

// Tick runs the batch of the orders carried and arrivals.
func (c *Carried) Tick(ctx context.Context, arrivals []Order) ([]Finished, int, error) {
	batch := append(c.carry, arrivals...)
	out, refused, err := c.T.TickBatch(ctx, batch)
	if err != nil {
		c.carry = batch
		return nil, len(batch), err
	}
	c.carry = nil
	wasRefused := make([]bool, len(batch))
	for _, i := range refused {
		wasRefused[i] = true
		c.carry = append(c.carry, batch[i])
	}
	var finished []Finished
	for i, o := range batch {
		if !wasRefused[i] {
			finished = append(finished, Finished{Order: o, Fulfilled: out[i]})
		}
	}
	return finished, len(c.carry), nil
}

// Tick admits what it can of the orders kept and arrivals, fulfils the
// orders admitted and lets go (see Batched).
func (b *Batched) Tick(ctx context.Context, arrivals []Order) ([]Finished, int, error) {
	if b.adm == nil {
		b.adm = batchlock.NewAdmission(b.Locker, func(o Order) []string {
			return append(b.Stock.Keys(o), b.Stock.PromoKeys(o)...)
		}, batchlock.WithShared(b.Stock.PromoKeys(Order{Promos: Promos(b.Promos)})...))
	}
	asked := time.Now()
	admitted, err := b.adm.Tick(ctx, arrivals)
	wait := time.Since(asked)
	if err != nil {
		return nil, b.adm.Pending(), err
	}
	batch := make([]Order, len(admitted))
	taken := make([]int, len(admitted))
	locks := make([]*batchlock.Lock, len(admitted))
	for i, a := range admitted {
		batch[i], taken[i], locks[i] = a.Item, i, a.Lock
	}
	out := b.Stock.FulfilTaken(ctx, batch, taken, func(i, line int) int64 {
		return locks[i].Token(b.Stock.Key(batch[i].Lines[line].SKU))
	}, b.Think)
	finished := make([]Finished, len(admitted))
	for i := range admitted {
		out[i].LockWait = wait
		finished[i] = Finished{Order: batch[i], Fulfilled: out[i]}
	}
	// The unlock's error changes nothing the orders did: their keys are
	// left to their lease.
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	_ = b.Locker.UnlockEach(uctx, locks)
	return finished, b.adm.Pending(), nil
}

// Close ends b's admission: the orders it kept and its waits.
func (b *Batched) Close() {
	if b.adm != nil {
		b.adm.Close()
	}
}

func stopped(stop <-chan struct{}) bool {
	select {
	case <-stop:
		return true
	default:
		return false
	}
}
