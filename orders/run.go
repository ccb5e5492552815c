package orders

import (
	"context"
	"sync"
	"time"
)

// RunConfig says how to process a list of orders.
type RunConfig struct {
	Workers int // orders processed at once; at least 1
	// Attempts per order for errors that left stock untouched (a lock not
	// obtained, a read that failed during a failover). Default 5.
	Attempts int
	// OrderTimeout bounds one attempt at an order, lock wait included.
	// Default 30s.
	OrderTimeout time.Duration
	// Done, when set, is called after each order, from the worker that
	// processed it.
	Done func()
	// Admitted, when set, is called in a batched run (RunBatched) as each
	// tick with baskets is handed out, before its orders are processed.
	Admitted func()
	// Stop, when set, ends the run once closed: no order is taken up after
	// it, and the orders under way finish (their time is counted), which
	// ending ctx would cut short.
	Stop <-chan struct{}
	// OverdueAfter is how long an order of an open loop waits before it
	// counts in a batched run's Overdue: longer than any wait a run that
	// keeps up sees, shorter than a backlog takes to build. Default 1s.
	OverdueAfter time.Duration
}

// withDefaults is cfg with its defaults where it says nothing.
func (cfg RunConfig) withDefaults() RunConfig {
	cfg.Workers = max(cfg.Workers, 1)
	if cfg.Attempts < 1 {
		cfg.Attempts = 5
	}
	if cfg.OrderTimeout <= 0 {
		cfg.OrderTimeout = 30 * time.Second
	}
	if cfg.OverdueAfter <= 0 {
		cfg.OverdueAfter = time.Second
	}
	return cfg
}

// Result is what a run did.
type Result struct {
	Orders   int // orders taken up (fewer than given when the run was cancelled)
	Accepted int
	Rejected int // short of stock, nothing written
	Errors   int // failed after every attempt, nothing written
	Unknown  int // failed with some lines perhaps written
	Retries  int // attempts beyond the first
	// SoldBySKU sums the lines of accepted orders: what the business sold,
	// which the audit compares with Redis.
	SoldBySKU map[string]int64
	// LockWaits of every lock obtained, and LockWaitSizes the basket size
	// (lines) of each of those orders, in the same order.
	LockWaits     []time.Duration
	LockWaitSizes []int
	// FirstErrors keeps the first few errors that ended an order, and
	// FirstRetried the first few that made one be tried again, for the
	// report.
	FirstErrors  []string
	FirstRetried []string
	Elapsed      time.Duration
	// A batched run's (RunBatched): its ticks, the baskets each took, and
	// the baskets refused (an order refused by several ticks counts each).
	Ticks        int
	TakenPerTick []int
	Refusals     int
	// Backlog is the orders that had arrived but were not done when a
	// batched run ended (RunTicks says when an order arrives), Overdue
	// those of them that had waited RunConfig.OverdueAfter by then (in a
	// closed loop, where every order is there from the start, all of
	// them): the orders an open loop fell behind on, where Backlog also
	// counts those that arrived as it ended.
	Backlog int
	Overdue int
}

const keptErrors = 5

// Merge adds up the results of processors that ran at once: their orders,
// sales, waits and ticks; the run lasted as long as the longest.
func Merge(results ...Result) Result {
	out := Result{SoldBySKU: map[string]int64{}}
	for _, r := range results {
		out.Orders += r.Orders
		out.Accepted += r.Accepted
		out.Rejected += r.Rejected
		out.Errors += r.Errors
		out.Unknown += r.Unknown
		out.Retries += r.Retries
		for sku, n := range r.SoldBySKU {
			out.SoldBySKU[sku] += n
		}
		out.LockWaits = append(out.LockWaits, r.LockWaits...)
		out.LockWaitSizes = append(out.LockWaitSizes, r.LockWaitSizes...)
		out.FirstErrors = append(out.FirstErrors, r.FirstErrors...)[:min(len(out.FirstErrors)+len(r.FirstErrors), keptErrors)]
		out.FirstRetried = append(out.FirstRetried, r.FirstRetried...)[:min(len(out.FirstRetried)+len(r.FirstRetried), keptErrors)]
		out.Elapsed = max(out.Elapsed, r.Elapsed)
		out.Ticks += r.Ticks
		out.TakenPerTick = append(out.TakenPerTick, r.TakenPerTick...)
		out.Refusals += r.Refusals
		out.Backlog += r.Backlog
		out.Overdue += r.Overdue
	}
	return out
}

// Run processes orders with p on cfg.Workers goroutines until all are done
// or ctx ends, and returns once every worker has stopped.
func Run(ctx context.Context, p Processor, orders []Order, cfg RunConfig) Result {
	cfg = cfg.withDefaults()
	r := newRecorder()
	start := time.Now()
	jobs := make(chan Order)
	var wg sync.WaitGroup
	for range cfg.Workers {
		wg.Go(func() {
			for o := range jobs {
				out, retried, err := processOne(ctx, p, o, cfg)
				r.record(o, out, err, retried)
				if cfg.Done != nil {
					cfg.Done()
				}
			}
		})
	}
feed:
	for _, o := range orders {
		select {
		case jobs <- o:
		case <-ctx.Done():
			break feed
		case <-cfg.Stop:
			break feed
		}
	}
	close(jobs)
	wg.Wait()
	return r.result(time.Since(start))
}

// recorder adds up the outcomes of a run's orders.
type recorder struct {
	mu  sync.Mutex
	res Result
}

func newRecorder() *recorder {
	return &recorder{res: Result{SoldBySKU: make(map[string]int64)}}
}

// record adds what became of o: its last outcome and error, and the errors
// of the attempts that were followed by another.
func (r *recorder) record(o Order, out Outcome, err error, retried []error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	res := &r.res
	res.Orders++
	res.Retries += len(retried)
	for _, e := range retried {
		if len(res.FirstRetried) < keptErrors {
			res.FirstRetried = append(res.FirstRetried, "order "+o.ID+": "+e.Error())
		}
	}
	if out.Locked {
		res.LockWaits = append(res.LockWaits, out.LockWait)
		res.LockWaitSizes = append(res.LockWaitSizes, len(o.Lines))
	}
	switch {
	case err != nil && out.Written:
		res.Unknown++
	case err != nil:
		res.Errors++
	case out.Accepted:
		res.Accepted++
		for _, l := range o.Lines {
			res.SoldBySKU[l.SKU] += l.Qty
		}
	default:
		res.Rejected++
	}
	if err != nil && len(res.FirstErrors) < keptErrors {
		res.FirstErrors = append(res.FirstErrors, "order "+o.ID+": "+err.Error())
	}
}

// tick counts a tick of a batched run that took taken orders' baskets.
func (r *recorder) tick(taken int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.res.Ticks++
	r.res.TakenPerTick = append(r.res.TakenPerTick, taken)
}

// backlog sets the orders left waiting when a batched run ended, of which
// overdue had waited too long.
func (r *recorder) backlog(n, overdue int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.res.Backlog, r.res.Overdue = n, overdue
}

// refusal counts a basket refused by a tick.
func (r *recorder) refusal() { r.refusals(1) }

// refusals counts n baskets refused by ticks.
func (r *recorder) refusals(n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.res.Refusals += n
}

// retried counts a tick that failed as a whole and will be tried again.
func (r *recorder) retried(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.res.Retries++
	if len(r.res.FirstRetried) < keptErrors {
		r.res.FirstRetried = append(r.res.FirstRetried, "tick: "+err.Error())
	}
}

func (r *recorder) result(elapsed time.Duration) Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.res.Elapsed = elapsed
	return r.res
}

// processOne tries o until it succeeds, fails after writing, runs out of
// attempts or ctx ends. It returns the last outcome, the errors of the
// attempts that were followed by another, and the last error.
func processOne(ctx context.Context, p Processor, o Order, cfg RunConfig) (Outcome, []error, error) {
	var retried []error
	for attempt := 0; ; attempt++ {
		octx, cancel := context.WithTimeout(ctx, cfg.OrderTimeout)
		out, err := p.Process(octx, o)
		cancel()
		if err == nil || out.Written || attempt+1 >= cfg.Attempts || ctx.Err() != nil {
			return out, retried, err
		}
		if pause(ctx, attempt) != nil {
			return out, retried, err
		}
		retried = append(retried, err)
	}
}
