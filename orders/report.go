package orders

import (
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/batchlock/batchlock/batchlock"
)

// Counters counts lock events. Pass its Observe to batchlock.WithObserver.
type Counters struct {
	conflicts atomic.Int64
	lost      atomic.Int64

	mu        sync.Mutex
	lostFirst []string
}

// Observe counts e.
func (c *Counters) Observe(e batchlock.Event) {
	switch e.Kind {
	case batchlock.EventConflict:
		c.conflicts.Add(1)
	case batchlock.EventLost:
		c.lost.Add(1)
		c.mu.Lock()
		defer c.mu.Unlock()
		if len(c.lostFirst) < keptErrors {
			c.lostFirst = append(c.lostFirst, fmt.Sprintf("lock of %s on %d keys: %v", e.Owner, len(e.Keys), e.Err))
		}
	}
}

// LostReasons describes the first few locks lost.
func (c *Counters) LostReasons() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.lostFirst)
}

// Conflicts returns the number of lock attempts that found keys held by
// another owner.
func (c *Counters) Conflicts() int64 { return c.conflicts.Load() }

// Lost returns the number of locks lost while held.
func (c *Counters) Lost() int64 { return c.lost.Load() }

// Report is a run's figures and audit, for people (WriteText) and
// programs (JSON).
type Report struct {
	Mode         string   `json:"mode"` // "batchlock" or "no-lock"
	Workers      int      `json:"workers"`
	Orders       int      `json:"orders"`
	Accepted     int      `json:"accepted"`
	Rejected     int      `json:"rejected"`
	Errors       int      `json:"errors"`
	Unknown      int      `json:"unknown_outcome"`
	Retries      int      `json:"retries"`
	Elapsed      Duration `json:"elapsed_ms"`
	OrdersPerSec float64  `json:"orders_per_second"`
	// MeanCycle is workers / OrdersPerSec: the mean time from one order
	// of a worker to its next, the scale a lock wait compares with.
	MeanCycle Duration `json:"mean_order_cycle_ms"`
	// LockWait is nil when orders were not locked.
	LockWait     *Waits   `json:"lock_wait,omitempty"`
	Conflicts    int64    `json:"conflicts"`
	LocksLost    int64    `json:"locks_lost"`
	Audit        Audit    `json:"audit"`
	FirstErrors  []string `json:"first_errors,omitempty"`
	FirstRetried []string `json:"first_retried,omitempty"`
	FirstLost    []string `json:"first_lost,omitempty"`
	// Batch is set for a batched run (RunBatched).
	Batch *BatchFigures `json:"batch,omitempty"`
}

// BatchFigures are a batched run's ticks.
type BatchFigures struct {
	Ticks         int     `json:"ticks"`
	OrdersPerTick float64 `json:"orders_taken_per_tick"`
	Refusals      int     `json:"refusals"`
}

// Waits summarises lock waits.
type Waits struct {
	Count int      `json:"count"`
	P50   Duration `json:"p50_ms"`
	P99   Duration `json:"p99_ms"`
	Max   Duration `json:"max_ms"`
}

// Duration is a time.Duration that reads as milliseconds in JSON.
type Duration time.Duration

// MarshalJSON writes d in milliseconds, to the microsecond.
func (d Duration) MarshalJSON() ([]byte, error) {
	return fmt.Appendf(nil, "%.3f", float64(d)/float64(time.Millisecond)), nil
}

func (d Duration) String() string { return round(time.Duration(d)).String() }

// round keeps durations readable: three significant figures or so.
func round(d time.Duration) time.Duration {
	switch {
	case d >= time.Second:
		return d.Round(10 * time.Millisecond)
	case d >= time.Millisecond:
		return d.Round(10 * time.Microsecond)
	default:
		return d.Round(time.Microsecond)
	}
}

// NewReport puts a run's result, its lock counters (nil without locks)
// and its audit together.
func NewReport(mode string, workers int, res Result, counters *Counters, audit Audit) Report {
	r := Report{
		Mode:         mode,
		Workers:      workers,
		Orders:       res.Orders,
		Accepted:     res.Accepted,
		Rejected:     res.Rejected,
		Errors:       res.Errors,
		Unknown:      res.Unknown,
		Retries:      res.Retries,
		Elapsed:      Duration(res.Elapsed),
		Audit:        audit,
		FirstErrors:  res.FirstErrors,
		FirstRetried: res.FirstRetried,
	}
	if res.Elapsed > 0 {
		r.OrdersPerSec = float64(res.Orders) / res.Elapsed.Seconds()
	}
	if res.Orders > 0 && res.Ticks == 0 {
		r.MeanCycle = Duration(time.Duration(workers) * res.Elapsed / time.Duration(res.Orders))
	}
	if res.Ticks > 0 {
		taken := 0
		for _, n := range res.TakenPerTick {
			taken += n
		}
		r.Batch = &BatchFigures{Ticks: res.Ticks, OrdersPerTick: float64(taken) / float64(res.Ticks), Refusals: res.Refusals}
	}
	if counters != nil {
		r.Conflicts, r.LocksLost = counters.Conflicts(), counters.Lost()
		r.FirstLost = counters.LostReasons()
		r.LockWait = summarise(res.LockWaits)
	}
	return r
}

func summarise(waits []time.Duration) *Waits {
	if len(waits) == 0 {
		return &Waits{}
	}
	w := slices.Clone(waits)
	slices.Sort(w)
	return &Waits{
		Count: len(w),
		P50:   Duration(percentile(w, 50)),
		P99:   Duration(percentile(w, 99)),
		Max:   Duration(w[len(w)-1]),
	}
}

// percentile returns the nearest-rank p-th percentile of sorted values.
func percentile(sorted []time.Duration, p int) time.Duration {
	rank := (p*len(sorted) + 99) / 100 // ceil(p/100 * n)
	return sorted[max(rank, 1)-1]
}

// WriteText writes the report as a table.
func (r Report) WriteText(w io.Writer) error {
	var b strings.Builder
	row := func(name, format string, args ...any) {
		fmt.Fprintf(&b, "%-16s %s\n", name, fmt.Sprintf(format, args...))
	}
	if r.Batch != nil {
		row("mode", "%s, batches of %d orders a tick (TryEach)", r.Mode, r.Workers)
	} else {
		row("mode", "%s, %d workers", r.Mode, r.Workers)
	}
	row("orders", "%d in %v: %.1f orders/s", r.Orders, r.Elapsed, r.OrdersPerSec)
	row("accepted", "%d", r.Accepted)
	row("rejected", "%d (short of stock)", r.Rejected)
	row("errors", "%d (nothing written) after %d retries", r.Errors, r.Retries)
	if r.Unknown > 0 {
		row("unknown outcome", "%d (failed while writing: may be half-applied)", r.Unknown)
	}
	if b := r.Batch; b != nil {
		row("ticks", "%d: %.1f orders taken per tick, %d baskets refused (busy, tried again next tick)", b.Ticks, b.OrdersPerTick, b.Refusals)
	}
	if r.LockWait != nil {
		row("lock wait", "p50 %v, p99 %v, max %v (%d locks)", r.LockWait.P50, r.LockWait.P99, r.LockWait.Max, r.LockWait.Count)
		if r.MeanCycle > 0 {
			row("order cycle", "mean %v (workers / orders per second): the longest lock wait is %.1fx it",
				r.MeanCycle, float64(r.LockWait.Max)/float64(r.MeanCycle))
		}
		row("conflicts", "%d", r.Conflicts)
		row("locks lost", "%d", r.LocksLost)
	}
	a := r.Audit
	row("stock", "%d SKUs: %d units, %d sold, %d left", a.SKUs, a.Initial, a.Sold, a.Remaining)
	row("oversold", "%d units on %d SKUs", a.OversoldUnits, a.OversoldSKUs)
	if a.Passed() {
		row("audit", "PASSED")
	} else {
		row("audit", "FAILED: %s", a.summary())
	}
	for _, p := range a.Problems {
		fmt.Fprintf(&b, "  %s\n", p)
	}
	if n := a.problemCount() - len(a.Problems); n > 0 {
		fmt.Fprintf(&b, "  ... and %d more\n", n)
	}
	for _, e := range r.FirstErrors {
		fmt.Fprintf(&b, "  error: %s\n", e)
	}
	for _, e := range r.FirstRetried {
		fmt.Fprintf(&b, "  retried: %s\n", e)
	}
	for _, e := range r.FirstLost {
		fmt.Fprintf(&b, "  lost: %s\n", e)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// summary counts the SKUs with each kind of problem, in a stable order.
func (a Audit) summary() string {
	kinds := make([]string, 0, len(a.Counts))
	for k := range a.Counts {
		kinds = append(kinds, string(k))
	}
	sort.Strings(kinds)
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%d SKUs %s", a.Counts[ProblemKind(k)], k)
	}
	return strings.Join(parts, ", ")
}

func (a Audit) problemCount() int {
	n := 0
	for _, c := range a.Counts {
		n += c
	}
	return n
}
