package bench

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/orders"
)

// The sale workload: the batch workload's ticks on mixes where one SKU is
// in most orders, each order's lines taken in units of their SKUs (counted
// holds) beside the same Processor taking them exclusively, against the
// decrement floor.

var (
	//go:embed floor/decrement.lua
	decrementSource string
	//go:embed floor/hold.lua
	holdSource string

	decrement = redis.NewScript(decrementSource)
	holdFloor = redis.NewScript(holdSource)
)

// The sale workload's mixes: a flash sale, one SKU in 30% of the orders
// besides their baskets; and SKUs drawn by Zipf's law with v = 1, where
// the first SKU is in nearly every basket.
var (
	MixFlash    = BatchMix{Name: "flash", MaxBasket: 40, Uniform: true, Flash: 0.3, Rate: 400}
	MixZipfSale = BatchMix{Name: "zipf-sale", MaxBasket: 40, Uniform: true, ZipfS: 1.1, ZipfV: 1, Rate: 400}
	SaleLoads   = []BatchLoad{{Mix: MixFlash}, {Mix: MixZipfSale}}
)

// NewCountedProcessorKind is batchlock's Processor with each order's lines
// taken in units of their SKUs (orders.Batched.Counted), sold with each
// tick (ConsumeEach). clients as NewProcessorKind's.
func NewCountedProcessorKind(clients []*batchlock.Client, tick int, space string) BatchKind {
	k := NewProcessorKind(clients, tick, space)
	k.Name = NameCountedProcessor
	if space != "" {
		k.Name = NameCountedOneSlot
	}
	exclusive := k.Batched
	k.Batched = func(i int, stock *orders.Stock) *orders.Batched {
		b := exclusive(i, stock)
		b.Counted = true
		return b
	}
	k.Prepare, k.Finish = countedStock(clients[0], space)
	return k
}

// NewCountedLoopKind is the per-basket form of the counted Processor:
// each basket of a tick taken in units with Lock on one of workers
// goroutines, its stock written with the tick's, then sold with Consume
// (or let go with Unlock when not accepted) on the same goroutines.
func NewCountedLoopKind(clients []*batchlock.Client, workers int) BatchKind {
	k := BatchKind{Name: NameCountedLoop, Clients: clients, New: func(i int, stock *orders.Stock) orders.Ticker {
		return &countedLoop{c: clients[i], stock: stock, workers: workers}
	}}
	k.Prepare, k.Finish = countedStock(clients[0], "")
	return k
}

// countedStock are a counted kind's Prepare, which has its stock written
// by every holder of a SKU at once and sets the SKUs' capacities from it
// (in space), and Finish, which audits the capacities against the stock
// left.
func countedStock(c *batchlock.Client, space string) (prepare func(context.Context, *orders.Stock) error,
	finish func(context.Context, *orders.Stock, *orders.Audit) error) {
	return func(ctx context.Context, stock *orders.Stock) error {
			stock.WriteConcurrently()
			return stock.SetCapacities(ctx, c, space)
		}, func(ctx context.Context, stock *orders.Stock, a *orders.Audit) error {
			return stock.AuditCapacities(ctx, c, space, a)
		}
}

type countedLoop struct {
	c       *batchlock.Client
	stock   *orders.Stock
	workers int
}

func (p *countedLoop) Tick(ctx context.Context, batch []orders.Order) ([]orders.Fulfilled, []int, error) {
	// Sold out (ErrOverCapacity): rejected.
	locks, taken, wait, err := lockEach(p.workers, len(batch), batchlock.ErrOverCapacity, func(i int) (*batchlock.Lock, error) {
		return p.c.Lock(ctx, nil, batchlock.WithUnits(orders.LineUnits(batch[i], p.stock.Key)))
	})
	var out []orders.Fulfilled
	if err == nil {
		out = p.stock.FulfilTaken(ctx, batch, taken, wait, func(int, int) int64 { return 0 }, 0)
	}
	each(p.workers, len(taken), func(n int) {
		i := taken[n]
		switch {
		case out == nil || !out[i].Accepted || out[i].Err != nil:
			_ = locks[i].Unlock(context.WithoutCancel(ctx))
		default:
			out[i].Err = locks[i].Consume(context.WithoutCancel(ctx))
		}
	})
	if out == nil {
		return nil, nil, err
	}
	return out, nil, nil
}

// NewDecrementFloorKind is the decrement floor, the least that reserving
// counts across shards costs: each SKU's units in a count of its own
// (spread as lock keys are), and per tick one script call per master that,
// for each basket's part there, checks every count and decrements them
// all, or none when one is short; the parts of a basket refused on
// another master are given back with one more call per master. A basket
// refused is sold out: rejected, as the counted Processor rejects it.
// rdbs are the processors' cluster clients, one each.
// With workers above 0 it is the per-basket form: each basket of a tick
// sold alone (a call per master it touches, a give-back when refused) on
// one of workers goroutines.
func NewDecrementFloorKind(rdbs []*redis.ClusterClient, workers int) BatchKind {
	name := NameDecrementFloor
	if workers > 0 {
		name = NameDecrementFloorLoop
	}
	return countFloorKind(name, rdbs, workers, false)
}

// NewHoldFloorKind is the hold floor, the least that counted holds with
// leases and tokens cost: the decrement floor's calls, each key's units
// also kept as a hold (a key of its own with a lease, holding a token from
// its count's fencing counter), then, once the tick's stock is written,
// per master one more call that sells the holds of the baskets taken.
// What a lock does besides (owners, queues, reentrancy, units back from a
// hold whose lease ended) is left out.
// With workers above 0 it is the per-basket form, as the decrement floor's,
// each basket's holds sold alone too.
func NewHoldFloorKind(rdbs []*redis.ClusterClient, workers int) BatchKind {
	name := NameHoldFloor
	if workers > 0 {
		name = NameHoldFloorLoop
	}
	return countFloorKind(name, rdbs, workers, true)
}

// countFloorKind is the decrement floor (holds false) or the hold floor.
func countFloorKind(name string, rdbs []*redis.ClusterClient, workers int, holds bool) BatchKind {
	return BatchKind{Name: name,
		New: func(i int, stock *orders.Stock) orders.Ticker {
			return &decrementFloor{name: name, rdb: rdbs[i], stock: stock, workers: workers, holds: holds, processor: i}
		},
		Prepare: func(ctx context.Context, stock *orders.Stock) error {
			stock.WriteConcurrently()
			states, err := stock.States(ctx)
			if err != nil {
				return err
			}
			pipe := rdbs[0].Pipeline()
			for _, st := range states {
				pipe.Set(ctx, countKey(stock.Key(st.SKU)), st.Remaining, 0)
			}
			_, err = pipe.Exec(ctx)
			return err
		},
		Finish: func(ctx context.Context, stock *orders.Stock, a *orders.Audit) error {
			states, err := stock.States(ctx)
			if err != nil {
				return err
			}
			pipe := rdbs[0].Pipeline()
			counts := make([]*redis.StringCmd, len(states))
			for i, st := range states {
				counts[i] = pipe.GetDel(ctx, countKey(stock.Key(st.SKU)))
				if holds {
					pipe.Del(ctx, countKey(stock.Key(st.SKU))+"fence")
				}
			}
			_, _ = pipe.Exec(ctx)
			for i, st := range states {
				n, err := counts[i].Int64()
				if err != nil {
					return fmt.Errorf("%s: the count of %s: %w", name, st.SKU, err)
				}
				if n != st.Remaining {
					a.Add(orders.Capacity, st.SKU, "count %d, %d units remaining", n, st.Remaining)
				}
			}
			return nil
		},
	}
}

// countKey is the count floors' count of the SKU whose stock is in
// stockKey: a hashtag of its own, so that the hold floor's holds and
// fencing counter of it share its slot.
func countKey(stockKey string) string { return "{count:" + stockKey + "}" }

// holdLease is the hold floor's lease, the Client's default.
const holdLease = 30 * time.Second

type decrementFloor struct {
	name      string
	rdb       *redis.ClusterClient
	stock     *orders.Stock
	workers   int  // 0: the whole tick at once
	holds     bool // the hold floor
	processor int  // in the hold ids
	ticks     int  // in the hold ids
}

func (f *decrementFloor) Tick(ctx context.Context, batch []orders.Order) ([]orders.Fulfilled, []int, error) {
	units := make([]map[string]int64, len(batch)) // by basket: units by count key
	baskets := make([][]string, len(batch))       // by basket: its count keys
	all := make([]int, len(batch))
	for i, o := range batch {
		units[i] = orders.LineUnits(o, func(sku string) string { return countKey(f.stock.Key(sku)) })
		baskets[i] = slices.Sorted(maps.Keys(units[i]))
		all[i] = i
	}
	var holds []string // the hold floor's, by basket
	if f.holds {
		f.ticks++
		holds = make([]string, len(batch))
		for i := range holds {
			holds[i] = fmt.Sprintf("h:%d:%d:%d", f.processor, f.ticks, i)
		}
	}
	asked := time.Now()
	refused := make([]bool, len(batch))
	// masters: the parts of the baskets by master, per call (one call, or
	// one a basket), which the hold floor's sale sends again.
	var masters [][][]basketPart
	var err error
	if f.workers == 0 {
		masters = make([][][]basketPart, 1)
		masters[0], err = f.sell(ctx, baskets, units, holds, all, refused)
	} else {
		masters = make([][][]basketPart, len(batch))
		errs := make([]error, len(batch))
		each(f.workers, len(batch), func(i int) { masters[i], errs[i] = f.sell(ctx, baskets, units, holds, []int{i}, refused) })
		err = errors.Join(errs...)
	}
	if err != nil {
		return nil, nil, err // a bench run stops at its first error
	}
	var taken []int
	for i := range batch {
		if !refused[i] {
			taken = append(taken, i)
		}
	}
	out := f.stock.FulfilTaken(ctx, batch, taken, time.Since(asked), func(int, int) int64 { return 0 }, 0)
	if f.holds {
		errs := make([]error, len(masters))
		each(max(f.workers, 1), len(masters), func(n int) {
			errs[n] = f.sellHolds(ctx, masters[n], units, holds, func(b int) bool { return !refused[b] })
		})
		if err := errors.Join(errs...); err != nil {
			return nil, nil, err
		}
	}
	return out, nil, nil
}

// sell sells the baskets at which (indices into baskets), one call per
// master, and gives back the parts of those refused on another master;
// it marks the refused in refused, which calls on other baskets share.
// The hold floor takes them as holds (holds: by basket, its hold id).
// It returns the baskets' parts by master.
func (f *decrementFloor) sell(ctx context.Context, baskets [][]string, units []map[string]int64, holds []string, which []int,
	refused []bool) ([][]basketPart, error) {
	masters, err := partsByMaster(ctx, f.rdb, baskets, which)
	if err != nil {
		return nil, err
	}
	script, op, back := decrement, "", "back"
	if f.holds {
		script, op = holdFloor, "take"
	}
	calls := make([]*floorCall, len(masters))
	for m := range masters {
		calls[m] = f.call(masters[m], units, holds, func(int) bool { return true }, op)
	}
	sendCalls(ctx, f.rdb, script, calls)
	short := map[int]bool{}                       // anywhere
	refusedOn := make([]map[int]bool, len(calls)) // by master
	var errs []error
	for m, c := range calls {
		list, err := c.Reply.Int64Slice()
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: slot %d: %w", f.name, c.Slot, err))
			continue
		}
		refusedOn[m] = map[int]bool{}
		for _, b := range list {
			short[int(b)], refusedOn[m][int(b)] = true, true
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	if len(short) == 0 {
		return masters, nil
	}
	var giveBacks []*floorCall
	for m := range masters {
		if c := f.call(masters[m], units, holds, func(b int) bool { return short[b] && !refusedOn[m][b] }, back); c != nil {
			giveBacks = append(giveBacks, c)
		}
	}
	sendCalls(ctx, f.rdb, script, giveBacks)
	for _, c := range giveBacks {
		if err := c.Reply.Err(); err != nil {
			return nil, fmt.Errorf("%s: giving back on slot %d: %w", f.name, c.Slot, err)
		}
	}
	for b := range short {
		refused[b] = true
	}
	return masters, nil
}

// sellHolds turns the hold floor's holds of the baskets that sold says
// were taken, of the parts by master of one take, into a sale: one call
// per master.
func (f *decrementFloor) sellHolds(ctx context.Context, masters [][]basketPart, units []map[string]int64, holds []string, sold func(b int) bool) error {
	var calls []*floorCall
	for _, parts := range masters {
		if c := f.call(parts, units, holds, sold, "sell"); c != nil {
			calls = append(calls, c)
		}
	}
	sendCalls(ctx, f.rdb, holdFloor, calls)
	for _, c := range calls {
		gone, err := c.Reply.Int64Slice()
		if err == nil && len(gone) > 0 {
			err = fmt.Errorf("the holds of %d baskets gone", len(gone))
		}
		if err != nil {
			return fmt.Errorf("%s: selling on slot %d: %w", f.name, c.Slot, err)
		}
	}
	return nil
}

// call is the call on one master, of its parts of the baskets for which
// sold says so: op and the lease first for the hold floor ("back" alone
// gives back the decrement floor's parts: their units negated); nil when
// there are none.
func (f *decrementFloor) call(parts []basketPart, units []map[string]int64, holds []string, sold func(b int) bool, op string) *floorCall {
	var args []any
	sign := int64(1)
	if op == "back" && !f.holds {
		sign = -1
	}
	for _, part := range parts {
		if !sold(part.basket) {
			continue
		}
		n := 0
		for _, g := range part.groups {
			n += len(g.Keys)
		}
		if f.holds && args == nil {
			args = append(args, op, holdLease.Milliseconds())
		}
		args = append(args, part.basket)
		if f.holds {
			args = append(args, holds[part.basket])
		}
		args = append(args, n)
		for _, g := range part.groups {
			for _, k := range g.Keys {
				args = append(args, k, sign*units[part.basket][k])
			}
		}
	}
	if args == nil {
		return nil
	}
	return masterCall(parts[0].groups, args)
}

// partsByMaster splits the baskets at admitted (indices into baskets) by
// master, and each basket's keys there by slot.
func partsByMaster(ctx context.Context, rdb *redis.ClusterClient, baskets [][]string, admitted []int) ([][]basketPart, error) {
	var masters [][]basketPart
	index := newMasterIndex(rdb)
	for _, b := range admitted {
		parts := map[int]int{} // by master: the basket's part's index there
		for _, g := range bySlot(baskets[b]) {
			m, err := index.of(ctx, g)
			if err != nil {
				return nil, err
			}
			if m == len(masters) {
				masters = append(masters, nil)
			}
			p, ok := parts[m]
			if !ok {
				p = len(masters[m])
				parts[m] = p
				masters[m] = append(masters[m], basketPart{basket: b})
			}
			masters[m][p].groups = append(masters[m][p].groups, g)
		}
	}
	return masters, nil
}

// The sale workload's targets: the counted Processor's orders/s and
// masters' CPU per order beside the decrement floor's, and its orders/s
// beside the exclusive Processor's.
const (
	saleShare     = 0.8
	saleCPU       = 1.25
	saleExclusive = 10.0
)

// sales is the sale workload's section.
func (r Report) sales(p func(string, ...any)) {
	if len(r.Sales) == 0 {
		return
	}
	p("\n## Counted holds: a flash sale\n\n")
	p("The batch workload's ticks of %d orders (of %d SKUs, one unit a line) on mixes where one SKU is in most orders. ", r.Batch.Tick, r.Batch.SKUs)
	p("The **decrement floor** is the least that reserving counts across shards costs: each SKU's units in a count of its own, spread as lock keys are, and per tick one script call per master that checks and decrements, all or none, each basket's counts there, then one call per master giving back the parts of the baskets refused on another master; the sale is the decrement. ")
	p("batchlock's **Processor in units** takes each order's lines in units of their SKUs (`Basket.Units`: counted holds), writes the stock of the orders taken with every holder of a SKU at once, and sells the tick's units with one `ConsumeEach`; the **exclusive Processor** is the batch workload's, each SKU locked by one order at a time. ")
	p("The **per-basket** forms take each basket alone on %d goroutines a processor: the decrement floor's calls for one basket, and batchlock's `Lock` in units, then `Consume`. ", r.Batch.LoopWorkers)
	p("The **hold floor** is the least that counted holds with leases and tokens cost: the decrement floor's calls, each key's units also kept as a hold (a key of its own in the count's slot, expiring with a lease, holding a token from the count's fencing counter), and once the tick's stock is written, per master one more call selling the tick's holds (deleting them); what a lock does besides (owners, queues, reentrancy, units back from a hold whose lease ended) is left out. ")
	p("Each kind's stock is audited at the end; the counted kinds' capacities (or counts) must equal the stock left. ")
	p("With %s processors at once, each kind gets %d turns of %v under each load, alternating.\n", joinInts(r.Batch.Processors), r.Batch.Rounds, r.Batch.Slice)
	for _, run := range r.Sales {
		run.section(p, NameDecrementFloor, NameDecrementFloorLoop, NameHoldFloor, NameHoldFloorLoop, NameTryEachProcessor)
	}
}

// saleTargets checks the sale workload against its goals, under each load
// and number of processors DefaultBatch runs.
func (r Report) saleTargets() []Target {
	var ts []Target
	for _, l := range SaleLoads {
		var run BatchRun
		for _, x := range r.Sales {
			if x.Is(l) {
				run = x
			}
		}
		for _, n := range DefaultBatch.Processors {
			res := run.result(NameCountedProcessor, n)
			t := Target{Goal: fmt.Sprintf("sale, %s mix, %d processor(s): in units at least %.1fx the decrement floor's orders/s, masters' CPU per order at most %.2fx its",
				l.Mix.Name, n, saleShare, saleCPU), Found: "not measured"}
			if c, ok := compareOrders(res.OrderResult, run.result(NameDecrementFloor, n).OrderResult); ok {
				t.Reached = c.share >= saleShare && c.cpu <= saleCPU
				t.Found = c.sale() + holdFloorOf(run.result(NameHoldFloor, n), c.ref)
			}
			ts = append(ts, t)
			t = Target{Goal: fmt.Sprintf("sale, %s mix, %d processor(s): in units at least %.0fx the exclusive Processor's orders/s", l.Mix.Name, n, saleExclusive),
				Found: "not measured"}
			if ex := run.result(NameTryEachProcessor, n); res.Orders > 0 && ex.Orders > 0 {
				x := res.PerSecond() / ex.PerSecond()
				t.Reached = x >= saleExclusive
				t.Found = fmt.Sprintf("%.0f orders/s against %.0f: %.1fx", res.PerSecond(), ex.PerSecond(), x)
			}
			ts = append(ts, t)
			res = run.result(NameCountedLoop, n)
			t = Target{Goal: fmt.Sprintf("sale, %s mix, %d processor(s) of %d workers: Lock in units per basket at least %.1fx the decrement floor's per-basket orders/s",
				l.Mix.Name, n, DefaultBatch.LoopWorkers, saleShare), Found: "not measured"}
			if c, ok := compareOrders(res.OrderResult, run.result(NameDecrementFloorLoop, n).OrderResult); ok {
				t.Reached = c.share >= saleShare
				t.Found = c.sale() + holdFloorOf(run.result(NameHoldFloorLoop, n), c.ref)
			}
			ts = append(ts, t)
		}
	}
	return ts
}

// sale gives the orders/s and the masters' CPU per order of both, and the
// ratios.
func (c ordersComparison) sale() string {
	return fmt.Sprintf("%.0f orders/s against %.0f: %.2fx; masters' CPU per order %d µs against %d µs: %.2fx",
		c.res.PerSecond(), c.ref.PerSecond(), c.share, c.res.CPUPerOrder().Microseconds(), c.ref.CPUPerOrder().Microseconds(), c.cpu)
}

// holdFloorOf says where the hold floor's result hf stands against ref, a
// decrement floor's, for a target set against ref: the least a counted
// hold costs, which no lock with leases goes below; empty when not
// measured.
func holdFloorOf(hf BatchResult, ref OrderResult) string {
	c, ok := compareOrders(hf.OrderResult, ref)
	if !ok {
		return ""
	}
	return fmt.Sprintf(" (the hold floor on the same run: %.0f orders/s, %.2fx; %d µs, %.2fx)", hf.PerSecond(), c.share, hf.CPUPerOrder().Microseconds(), c.cpu)
}

// SaleMarkdown is the sale workload's section and targets alone.
func (r Report) SaleMarkdown() string { return sectionMarkdown(r.sales, r.saleTargets()) }
