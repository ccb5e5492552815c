package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/hashtag"
	"github.com/batchlock/batchlock/internal/backoff"
	"github.com/batchlock/batchlock/localcluster"
	"github.com/batchlock/batchlock/orders"
)

// BatchConfig shapes the batch workload: processors take ticks of Tick
// orders (Mix's baskets of SKUs SKUs, package orders' order stream), lock
// the baskets that are free, read and write their stock in one pipeline
// each, and let go; a refused order goes first in the processor's next
// tick.
type BatchConfig struct {
	SKUs       int
	Mix        BatchMix
	Tick       int
	Processors []int // the numbers of processors at once, each a level of its own
	// Rate, when above 0, makes the workload an open loop: orders arrive
	// Rate a second in all, shared out evenly over the processors, and a
	// tick takes those that have arrived; at 0 every tick is full.
	Rate   float64
	Stock  int64
	Rounds int // turns each kind gets per number of processors, alternating
	Slice  time.Duration
	// LoopWorkers are the goroutines of the TryLock-loop processor, each
	// taking one basket at a time.
	LoopWorkers int
	// Stall has the first processor hold a tick for stallFor, a third
	// into each turn; only the Processor kinds run then.
	Stall bool
	// Moves runs the Processor in one space alone, in turns without and
	// with its slot moved to the next master every moveEvery; Failover, in
	// turns without and with its master failed over a third into the turn
	// (gracefully, and killed).
	Moves, Failover bool
}

// stallFor is how long a stalling processor holds its tick.
const stallFor = 3 * time.Second

// moveEvery is how often the moves load moves the space's slot.
const moveEvery = 500 * time.Millisecond

// BatchMix is the orders of a batch workload.
type BatchMix struct {
	Name      string
	MaxBasket int
	// Uniform draws basket sizes alike in 1..MaxBasket, rather than small
	// baskets most likely (the orders stream).
	Uniform bool
	// ZipfS and ZipfV, when set, draw SKUs by Zipf's law (orders.GenConfig).
	ZipfS, ZipfV float64
	// Flash is the share of orders with a line of the flash sale's SKU
	// besides their basket (orders.GenConfig.FlashShare).
	Flash float64
	// Rate is the open loop's arrivals per second that this mix runs at
	// when asked for an open loop without a rate: well below what one
	// processor sustains on this machine.
	Rate float64
}

// The batch workload's mixes: uniform is the one its targets are set on.
var (
	MixUniform = BatchMix{Name: "uniform", MaxBasket: 40, Uniform: true, Rate: 800}
	MixStream  = BatchMix{Name: "stream", MaxBasket: 40, Rate: 3000}
	MixZipf    = BatchMix{Name: "zipf", MaxBasket: 40, Uniform: true, ZipfS: 1.1, ZipfV: 10, Rate: 400}
	MixBig     = BatchMix{Name: "big", MaxBasket: 200, Uniform: true, Rate: 100}
	BatchMixes = []BatchMix{MixUniform, MixStream, MixZipf, MixBig}
)

// String says what the mix's baskets are, for the report.
func (m BatchMix) String() string {
	sizes := "small baskets most likely (the orders stream)"
	if m.Uniform {
		sizes = "sizes alike"
	}
	skus := "SKUs alike"
	if m.ZipfS != 0 {
		skus = fmt.Sprintf("SKUs by Zipf's law (s = %v, v = %v)", m.ZipfS, m.ZipfV)
	}
	if m.Flash != 0 {
		skus += fmt.Sprintf(", one SKU besides the basket in %.0f%% of the orders", 100*m.Flash)
	}
	return fmt.Sprintf("%s: baskets of 1–%d SKUs, %s, %s", m.Name, m.MaxBasket, sizes, skus)
}

// big says whether a basket of lines SKUs is one of the mix's big ones,
// more than half its largest.
func (m BatchMix) big(lines int) bool { return 2*lines > m.MaxBasket }

// DefaultBatch: ticks of 256 orders over 2000 SKUs, the uniform mix, with
// 1, 2 and 4 processors, every tick full; every kind gets two 3-second
// turns at each.
var DefaultBatch = BatchConfig{SKUs: 2000, Mix: MixUniform, Tick: 256, Processors: []int{1, 2, 4}, Stock: 1_000_000,
	Rounds: 2, Slice: 3 * time.Second, LoopWorkers: 16}

// BatchLoad is one load of the batch workload: a mix, and the open loop's
// arrivals per second in all (0: a closed loop, every tick full); with
// Stall, three Processors, one of which stalls holding its tick, in one
// turn of 15 s per kind; with Moves, three Processors in one space, in two
// turns of 12 s without moves and two with; with Failover, in one turn of
// 15 s without a failover and one with each.
type BatchLoad struct {
	Mix                    BatchMix
	Rate                   float64
	Stall, Moves, Failover bool
}

// On is cfg under the load.
func (l BatchLoad) On(cfg BatchConfig) BatchConfig {
	cfg.Mix, cfg.Rate, cfg.Stall, cfg.Moves, cfg.Failover = l.Mix, l.Rate, l.Stall, l.Moves, l.Failover
	switch {
	case l.Stall, l.Failover:
		cfg.Processors, cfg.Rounds, cfg.Slice = []int{3}, 1, 15*time.Second
	case l.Moves:
		cfg.Processors, cfg.Rounds, cfg.Slice = []int{3}, 2, 12*time.Second
	}
	return cfg
}

// The loads the batch targets are set at: the uniform mix in a closed loop
// and arriving at 400, 800 and 1200 orders/s, baskets of 1–200 SKUs at 100
// orders/s.
var (
	LoadClosed      = BatchLoad{Mix: MixUniform}
	LoadUniform400  = BatchLoad{Mix: MixUniform, Rate: 400}
	LoadUniform800  = BatchLoad{Mix: MixUniform, Rate: 800}
	LoadUniformOpen = BatchLoad{Mix: MixUniform, Rate: 1200}
	LoadBigOpen     = BatchLoad{Mix: MixBig, Rate: 100}
	LoadStall       = BatchLoad{Mix: MixUniform, Rate: 600, Stall: true}
	LoadMoves       = BatchLoad{Mix: MixUniform, Rate: 600, Moves: true}
	LoadFailover    = BatchLoad{Mix: MixUniform, Rate: 600, Failover: true}
)

// FullBatchLoads are a full run's: the targets' loads, then every other
// mix in a closed loop and in an open one at its own rate.
var FullBatchLoads = []BatchLoad{LoadClosed, LoadUniform400, LoadUniform800, LoadUniformOpen, LoadBigOpen, LoadStall, LoadMoves, LoadFailover,
	{Mix: MixStream}, {Mix: MixStream, Rate: MixStream.Rate}, {Mix: MixZipf}, {Mix: MixZipf, Rate: MixZipf.Rate}, {Mix: MixBig}}

// BatchRun is what every kind did under one load.
type BatchRun struct {
	Config  BatchConfig
	Results []BatchResult
}

// Is says whether the run was under load l.
func (b BatchRun) Is(l BatchLoad) bool {
	return b.Config.Mix.Name == l.Mix.Name && b.Config.Rate == l.Rate && b.Config.Stall == l.Stall && b.Config.Moves == l.Moves &&
		b.Config.Failover == l.Failover
}

// result is the result of a kind with n processors: empty where it did
// not run.
func (b BatchRun) result(name string, n int) BatchResult {
	for _, res := range b.Results {
		if res.Library == name && res.Workers == n {
			return res
		}
	}
	return BatchResult{OrderResult: OrderResult{Library: name, Workers: n}}
}

// Title names the run's load, for the report.
func (b BatchRun) Title() string {
	if b.Config.Stall {
		return fmt.Sprintf("%s mix, open loop: %.0f orders/s, one of %d processors stalling %v holding its tick, %v into a %v turn",
			b.Config.Mix.Name, b.Config.Rate, b.Config.Processors[0], stallFor, b.Config.Slice/3, b.Config.Slice)
	}
	if b.Config.Failover {
		return fmt.Sprintf("%s mix, open loop: %.0f orders/s, %d processors in one space, turns of %v without and with its master failed over %v into the turn",
			b.Config.Mix.Name, b.Config.Rate, b.Config.Processors[0], b.Config.Slice, b.Config.Slice/3)
	}
	if b.Config.Moves {
		return fmt.Sprintf("%s mix, open loop: %.0f orders/s, %d processors in one space, turns of %v without and with its slot moved to the next master every %v",
			b.Config.Mix.Name, b.Config.Rate, b.Config.Processors[0], b.Config.Slice, moveEvery)
	}
	if b.Config.Rate > 0 {
		return fmt.Sprintf("%s mix, open loop: %.0f orders/s", b.Config.Mix.Name, b.Config.Rate)
	}
	return b.Config.Mix.Name + " mix, closed loop"
}

// BatchKind is one kind of batch processor, with as many processors as the
// workload runs at once at most.
type BatchKind struct {
	Name string
	// Clients are batchlock's, one per processor; none for the floor.
	Clients []*batchlock.Client
	// New returns processor i, ticking on stock; or Batched, batchlock's
	// Processor (orders.RunBatched).
	New     func(i int, stock *orders.Stock) orders.Ticker
	Batched func(i int, stock *orders.Stock) *orders.Batched
	// Prepare, when set, readies the kind's stock once it is set up
	// (capacities from the stock), and Finish audits what the kind keeps
	// beside the stock before it is cleaned up.
	Prepare func(ctx context.Context, stock *orders.Stock) error
	Finish  func(ctx context.Context, stock *orders.Stock, a *orders.Audit) error
	// Disturbed is what happens to the slot of OneSlotSpace, or its
	// master, during each of the kind's turns.
	Disturbed disturbance
}

// disturbance is what happens to the space's slot, or its master, during
// a turn.
type disturbance int

const (
	undisturbed  disturbance = iota
	slotMoved                // to the next master every moveEvery
	failedOver               // its master fails over gracefully (CLUSTER FAILOVER) a third into the turn
	masterKilled             // its master is killed a third into the turn, restarted once its replica took over
)

// disturbedTwins are the Processor in one space, then the same kind again
// under each of ds: the moves and failover loads' kinds.
func disturbedTwins(kinds []BatchKind, ds ...disturbance) ([]BatchKind, error) {
	names := map[disturbance]string{slotMoved: NameTryEachOneSlotMoved, failedOver: NameTryEachOneSlotFailedOver, masterKilled: NameTryEachOneSlotKilled}
	for _, k := range kinds {
		if k.Name == NameTryEachOneSlot {
			out := []BatchKind{k}
			for _, d := range ds {
				twin := k
				twin.Name, twin.Disturbed = names[d], d
				out = append(out, twin)
			}
			return out, nil
		}
	}
	return nil, fmt.Errorf("the moves and failover loads need the kind %q", NameTryEachOneSlot)
}

// sent is what the kind's Clients sent so far.
func (k BatchKind) sent() ScriptsSent {
	var s ScriptsSent
	for _, c := range k.Clients {
		st := c.Stats()
		s = s.plus(ScriptsSent{Acquires: st.Acquires, Releases: st.Releases, Extends: st.Extends})
	}
	return s
}

// BatchResult is what one kind achieved with one number of processors
// (Workers) over all its turns. Its LockWait runs from an order's arrival
// to its admission, Small and Big are those of the mix's small and big
// baskets apart.
type BatchResult struct {
	OrderResult
	Ticks      int // ticks of all its processors
	Refusals   int // baskets refused, each time
	Backlog    int // orders arrived and not done at the ends of the turns
	Overdue    int // of them, those that had waited orders.RunConfig.OverdueAfter
	Small, Big Summary
	Moves      []time.Duration // each move of its space's slot (slotMoved)
	// Failovers are how long each failover took, from the fault to the
	// replica serving the slot, and Stops, per turn with a failover, the
	// longest time no basket was admitted from the fault on.
	Failovers, Stops []time.Duration
	NodeTimeout      time.Duration // the cluster's cluster-node-timeout
}

// rolesChanged says that masters failed over during the turns: the
// masters' CPU and commands, read from the nodes that were masters when
// the run began, mean nothing then.
func (r BatchResult) rolesChanged() bool { return len(r.Failovers) > 0 }

// moves summarizes the moves of the space's slot.
func (r BatchResult) moves() string {
	if len(r.Moves) == 0 {
		return "no move"
	}
	s := Summarize(r.Moves)
	return fmt.Sprintf("%d moves, median %s ms, longest %s ms", s.Samples, Millis(s.Median), Millis(s.Max))
}

// backlog tells the orders overdue and those waiting at the ends of the
// turns.
func (r BatchResult) backlog() string {
	return fmt.Sprintf("%d overdue, %d waiting", r.Overdue, r.Backlog)
}

// refusalsPerOrder is the baskets refused, each time, per order processed.
func (r BatchResult) refusalsPerOrder() float64 {
	if r.Orders == 0 {
		return 0
	}
	return float64(r.Refusals) / float64(r.Orders)
}

// NewProcessorKind is batchlock's Processor: orders.Batched over each of
// clients, with ticks of tick orders (the runs' BatchConfig.Tick), its lock
// keys in the slot of hash tag space when not empty (one space).
func NewProcessorKind(clients []*batchlock.Client, tick int, space string) BatchKind {
	name := NameTryEachProcessor
	if space != "" {
		name = NameTryEachOneSlot
	}
	return BatchKind{Name: name, Clients: clients, Batched: func(i int, stock *orders.Stock) *orders.Batched {
		return &orders.Batched{Locker: clients[i], Stock: stock, Size: tick, Space: space}
	}}
}

// NewTryLockLoopKind is the processor a new user writes first: the same
// ticks, each basket locked by TryLock on one of workers goroutines, and
// unlocked the same way.
func NewTryLockLoopKind(clients []*batchlock.Client, workers int) BatchKind {
	return BatchKind{Name: NameTryLockLoopProcessor, Clients: clients, New: func(i int, stock *orders.Stock) orders.Ticker {
		return &tryLockLoop{c: clients[i], stock: stock, workers: workers}
	}}
}

// NewBatchFloorKind is the batch-floor processor, the reference: its
// processors admit baskets in this process, against the SKUs held by any of
// them (an earlier basket wins), then do the lock floor's Redis work for
// every admitted key of the tick: one call per master to take them, one to
// release them. floors are the processors' own, each on a cluster client of
// its own.
func NewBatchFloorKind(floors []*Floor) BatchKind {
	admitted := &admission{held: map[string]bool{}}
	return BatchKind{Name: NameBatchFloorProcessor, New: func(i int, stock *orders.Stock) orders.Ticker {
		return &batchFloor{floor: floors[i], admitted: admitted, stock: stock}
	}}
}

// admission is the SKUs held by the batch-floor processors, in process.
type admission struct {
	mu   sync.Mutex
	held map[string]bool
}

// admit takes, basket by basket, those whose keys no one holds, and
// returns their indices.
func (a *admission) admit(baskets [][]string) []int {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []int
next:
	for i, keys := range baskets {
		for _, k := range keys {
			if a.held[k] {
				continue next
			}
		}
		for _, k := range keys {
			a.held[k] = true
		}
		out = append(out, i)
	}
	return out
}

func (a *admission) leave(keys []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, k := range keys {
		delete(a.held, k)
	}
}

type batchFloor struct {
	floor    *Floor
	admitted *admission
	stock    *orders.Stock
}

func (f *batchFloor) Tick(ctx context.Context, batch []orders.Order) ([]orders.Fulfilled, []int, error) {
	baskets := make([][]string, len(batch))
	for i, o := range batch {
		baskets[i] = lockKeys(f.stock.Keys(o))
	}
	taken := f.admitted.admit(baskets)
	var keys []string
	for _, i := range taken {
		keys = append(keys, baskets[i]...)
	}
	defer f.admitted.leave(keys)
	if len(keys) == 0 {
		return make([]orders.Fulfilled, len(batch)), refusedOf(len(batch), taken), nil
	}
	asked := time.Now()
	h, err := f.floor.lock(ctx, keys)
	if err != nil {
		return nil, nil, err
	}
	out := f.stock.FulfilTaken(ctx, batch, taken, time.Since(asked), func(i, line int) int64 { return h.tokens[baskets[i][line]] }, 0)
	// The release's error changes nothing the orders did: their keys are
	// left to their lease, as orders.Batched leaves them.
	_ = h.Unlock(context.WithoutCancel(ctx))
	return out, refusedOf(len(batch), taken), nil
}

type tryLockLoop struct {
	c       *batchlock.Client
	stock   *orders.Stock
	workers int
}

func (p *tryLockLoop) Tick(ctx context.Context, batch []orders.Order) ([]orders.Fulfilled, []int, error) {
	locks, taken, wait, err := lockEach(p.workers, len(batch), batchlock.ErrNotObtained, func(i int) (*batchlock.Lock, error) {
		return p.c.TryLock(ctx, p.stock.Keys(batch[i]))
	})
	unlock := func() {
		each(p.workers, len(batch), func(i int) {
			if locks[i] != nil {
				_ = locks[i].Unlock(context.WithoutCancel(ctx))
			}
		})
	}
	if err != nil {
		unlock()
		return nil, nil, err
	}
	out := p.stock.FulfilTaken(ctx, batch, taken, wait, func(i, line int) int64 {
		return locks[i].Token(p.stock.Key(batch[i].Lines[line].SKU))
	}, 0)
	unlock()
	return out, refusedOf(len(batch), taken), nil
}

// lockEach locks n baskets with lock on workers goroutines, and returns
// their locks (nil where refused), the baskets taken, how long it took, and
// the errors joined but refused, which refuses a basket.
func lockEach(workers, n int, refused error, lock func(i int) (*batchlock.Lock, error)) (locks []*batchlock.Lock, taken []int, wait time.Duration, err error) {
	locks = make([]*batchlock.Lock, n)
	errs := make([]error, n)
	asked := time.Now()
	each(workers, n, func(i int) {
		l, err := lock(i)
		if err != nil && !errors.Is(err, refused) {
			errs[i] = err
		}
		locks[i] = l
	})
	wait = time.Since(asked)
	for i, l := range locks {
		if l != nil {
			taken = append(taken, i)
		}
	}
	return locks, taken, wait, errors.Join(errs...)
}

// each runs fn(0..n-1) on workers goroutines, and returns once all are done.
func each(workers, n int, fn func(i int)) {
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for i := range jobs {
				fn(i)
			}
		})
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
}

// refusedOf is the indices of n that taken (ascending) leaves out.
func refusedOf(n int, taken []int) []int {
	var out []int
	t := 0
	for i := range n {
		if t < len(taken) && taken[t] == i {
			t++
			continue
		}
		out = append(out, i)
	}
	return out
}

// RunBatches runs the batch workload for every number of processors and
// every kind in turns (the order rotating every round), each kind on stock
// of its own, then audits every kind's stock against the orders it
// accepted. Results come by number of processors, then kind.
func RunBatches(ctx context.Context, cl *localcluster.Cluster, rdb redis.UniversalClient, kinds []BatchKind, cfg BatchConfig) ([]BatchResult, error) {
	masters, err := cl.Masters(ctx)
	if err != nil {
		return nil, err
	}
	switch {
	case cfg.Stall:
		kinds = slices.DeleteFunc(slices.Clone(kinds), func(k BatchKind) bool { return k.Batched == nil })
	case cfg.Moves:
		if kinds, err = disturbedTwins(kinds, slotMoved); err != nil {
			return nil, err
		}
	case cfg.Failover:
		if kinds, err = disturbedTwins(kinds, failedOver, masterKilled); err != nil {
			return nil, err
		}
	}
	stocks := make([]*orders.Stock, len(kinds))
	sold := make([]map[string]int64, len(kinds))
	for k, kind := range kinds {
		stocks[k] = orders.NewStock(rdb, "bench:"+kind.Name+":", orders.Catalogue(cfg.SKUs), cfg.Stock)
		if err := stocks[k].Setup(ctx); err != nil {
			return nil, err
		}
		if kind.Prepare != nil {
			if err := kind.Prepare(ctx, stocks[k]); err != nil {
				return nil, fmt.Errorf("%s: %w", kind.Name, err)
			}
		}
		sold[k] = map[string]int64{}
	}
	var out []BatchResult
	for level, n := range cfg.Processors {
		results := make([]BatchResult, len(kinds))
		for k, kind := range kinds {
			results[k].Library, results[k].Workers, results[k].SendsScripts = kind.Name, n, true
			if kind.Clients != nil {
				results[k].Sent = &ScriptsSent{}
			}
		}
		waits := make([]batchWaits, len(kinds))
		for round := range cfg.Rounds {
			lists, err := batchOrders(cfg, n, level*cfg.Rounds+round)
			if err != nil {
				return nil, err
			}
			for j := range kinds {
				k := (j + round) % len(kinds)
				if err := runBatchTurn(ctx, cl, masters, kinds[k], stocks[k], lists, cfg, &results[k], &waits[k], sold[k]); err != nil {
					return nil, err
				}
			}
		}
		for k := range results {
			results[k].LockWait, results[k].Small, results[k].Big = Summarize(waits[k].all), Summarize(waits[k].small), Summarize(waits[k].big)
		}
		out = append(out, results...)
	}
	for k, kind := range kinds {
		audit, err := stocks[k].Audit(ctx, sold[k])
		if err != nil {
			return nil, err
		}
		if kind.Finish != nil {
			if err := kind.Finish(ctx, stocks[k], &audit); err != nil {
				return nil, err
			}
		}
		if !audit.OnlyOversell() {
			return nil, fmt.Errorf("%s: the audit found %v", kind.Name, audit.Problems)
		}
		for j := range out {
			if out[j].Library == kind.Name {
				out[j].Oversold = audit.OversoldUnits
			}
		}
		if err := stocks[k].Cleanup(ctx); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// batchOrders are the orders of one round, a list per processor: enough
// for any turn, which ends by time, with ids unique across rounds (a write
// is applied once per order id).
func batchOrders(cfg BatchConfig, processors, seed int) ([][]orders.Order, error) {
	lists := make([][]orders.Order, processors)
	for p := range lists {
		list, err := orders.Generate(orders.GenConfig{SKUs: cfg.SKUs, Orders: 60_000, MaxBasket: cfg.Mix.MaxBasket, MaxQty: 1,
			UniformBaskets: cfg.Mix.Uniform, ZipfS: cfg.Mix.ZipfS, ZipfV: cfg.Mix.ZipfV, FlashShare: cfg.Mix.Flash, Seed: uint64(seed*processors + p)})
		if err != nil {
			return nil, err
		}
		for i := range list {
			list[i].ID = fmt.Sprintf("b%d-s%d-p%d-%s", processors, seed, p, list[i].ID)
		}
		lists[p] = list
	}
	return lists, nil
}

// batchWaits are a kind's waits from arrival to admission, all and by
// basket size.
type batchWaits struct{ all, small, big []time.Duration }

// runBatchTurn runs kind's processors, one per list, for one turn, and adds
// what it did and cost to r, its waits to waits and what its orders sold
// to sold.
func runBatchTurn(ctx context.Context, cl *localcluster.Cluster, masters []localcluster.Node, kind BatchKind, stock *orders.Stock,
	lists [][]orders.Order, cfg BatchConfig, r *BatchResult, waits *batchWaits, sold map[string]int64) error {
	results := make([]orders.Result, len(lists))
	var res orders.Result // the processors' results, merged
	var writes int64
	var disturbErr error
	cost, err := measureCost(ctx, cl, masters, func() int64 { return writes }, kind.sent, func() {
		stop := make(chan struct{})
		var stopped atomic.Int64 // when stop was closed, in Unix ns
		t := time.AfterFunc(cfg.Slice, func() { stopped.Store(time.Now().UnixNano()); close(stop) })
		defer t.Stop()
		var wg sync.WaitGroup
		ticks := orders.Ticks{Size: cfg.Tick, Rate: cfg.Rate / float64(len(lists))}
		run := orders.RunConfig{Attempts: 1, OrderTimeout: orderTimeout, Stop: stop}
		var gaps admissionGaps
		switch kind.Disturbed {
		case slotMoved:
			wg.Go(func() {
				var moves []time.Duration
				moves, disturbErr = moveSlot(ctx, cl, hashtag.Slot(OneSlotTag), stop)
				r.Moves = append(r.Moves, moves...)
			})
		case failedOver, masterKilled:
			run.Admitted = gaps.admitted
			wg.Go(func() { disturbErr = failOver(ctx, cl, kind.Disturbed, cfg.Slice/3, stop, &gaps, r) })
		}
		for p, list := range lists {
			if kind.Batched != nil {
				b := kind.Batched(p, stock)
				if cfg.Stall && p == 0 {
					b.Stall = orders.Stall{At: cfg.Slice / 3, For: stallFor}
				}
				wg.Go(func() { results[p] = orders.RunBatched(ctx, b, list, ticks, run) })
				continue
			}
			proc := kind.New(p, stock)
			wg.Go(func() { results[p] = orders.RunTicks(ctx, proc, list, ticks, run) })
		}
		wg.Wait()
		if kind.Disturbed == failedOver || kind.Disturbed == masterKilled {
			end := time.Now() // the turn ended by ctx
			if ns := stopped.Load(); ns != 0 {
				end = time.Unix(0, ns)
			}
			r.Stops = append(r.Stops, gaps.longest(end))
		}
		res = orders.Merge(results...)
		for _, units := range res.SoldBySKU {
			writes += units // one unit a line, one script call a line
		}
	})
	if err = errors.Join(err, disturbErr); err != nil {
		return err
	}
	if res.Unknown > 0 {
		return fmt.Errorf("%s: %d orders failed half-written: %v", kind.Name, res.Unknown, res.FirstErrors)
	}
	r.Orders += int64(res.Accepted + res.Rejected)
	r.GaveUp += int64(res.Errors)
	r.Elapsed += res.Elapsed // the processors ran side by side, the turn as long as the longest
	r.Ticks += res.Ticks
	r.Refusals += res.Refusals
	r.Backlog += res.Backlog
	r.Overdue += res.Overdue
	waits.all = append(waits.all, res.LockWaits...)
	for i, w := range res.LockWaits {
		if cfg.Mix.big(res.LockWaitSizes[i]) {
			waits.big = append(waits.big, w)
		} else {
			waits.small = append(waits.small, w)
		}
	}
	for sku, n := range res.SoldBySKU {
		sold[sku] += n
	}
	r.MastersCPU += cost.cpu
	r.LockScripts += sumOf(cost.commands, scriptCommands).Calls - cost.writes
	r.Commands = addStats(r.Commands, cost.commands, 1)
	if r.Sent != nil {
		*r.Sent = r.Sent.plus(cost.sent)
	}
	return nil
}

// moveSlot moves slot to the next master, as CLUSTER NODES lists them,
// every moveEvery until stop is closed, and returns how long each move
// took (its keys moved with MIGRATE, then the slot given to the target).
func moveSlot(ctx context.Context, cl *localcluster.Cluster, slot int, stop <-chan struct{}) ([]time.Duration, error) {
	t := time.NewTicker(moveEvery)
	defer t.Stop()
	var took []time.Duration
	for {
		select {
		case <-stop:
			return took, nil
		case <-ctx.Done():
			return took, ctx.Err()
		case <-t.C:
		}
		masters, err := cl.Masters(ctx)
		if err != nil {
			return took, err
		}
		from := slices.IndexFunc(masters, func(m localcluster.Node) bool { return m.ServesSlot(slot) })
		to := masters[(from+1)%len(masters)]
		began := time.Now()
		if err := cl.MigrateSlot(ctx, slot, to.Addr); err != nil {
			return took, fmt.Errorf("moving slot %d to %s: %w", slot, to.Addr, err)
		}
		took = append(took, time.Since(began))
	}
}

// admissionGaps watches, from a fault on, the longest time no tick with
// baskets was handed out.
type admissionGaps struct {
	mu    sync.Mutex
	fault time.Time
	last  time.Time // the fault's moment, or the last admission since
	most  time.Duration
}

// admitted is orders.RunConfig.Admitted: a tick was handed out.
func (g *admissionGaps) admitted() {
	g.mu.Lock()
	defer g.mu.Unlock()
	now := time.Now()
	if !g.fault.IsZero() {
		g.most = max(g.most, now.Sub(g.last))
	}
	g.last = now
}

// faulted marks the fault's moment.
func (g *admissionGaps) faulted() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.fault = time.Now()
	g.last = g.fault
}

// longest is the longest gap from the fault on, to the turn's end
// included.
func (g *admissionGaps) longest(end time.Time) time.Duration {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fault.IsZero() {
		return 0
	}
	return max(g.most, end.Sub(g.last))
}

// failOver fails over the master of the space's slot after at, unless stop
// is closed first: gracefully (CLUSTER FAILOVER), or killed and, once its
// replica serves the slot, restarted; it adds how long the failover took
// and the cluster's node timeout to r once the cluster is ready again.
func failOver(ctx context.Context, cl *localcluster.Cluster, d disturbance, at time.Duration, stop <-chan struct{}, gaps *admissionGaps, r *BatchResult) error {
	select {
	case <-time.After(at):
	case <-stop:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
	slot := hashtag.Slot(OneSlotTag)
	m, err := cl.MasterOfSlot(ctx, slot)
	if err != nil {
		return err
	}
	reply, err := cl.Do(ctx, m.Addr, "CONFIG", "GET", "cluster-node-timeout")
	if err != nil {
		return err
	}
	if kv, ok := reply.([]any); ok && len(kv) == 2 {
		ms, _ := strconv.Atoi(fmt.Sprint(kv[1]))
		r.NodeTimeout = time.Duration(ms) * time.Millisecond
	}
	gaps.faulted()
	began := time.Now()
	if d == failedOver {
		_, err := cl.Failover(ctx, m.Addr, localcluster.Graceful())
		r.Failovers = append(r.Failovers, time.Since(began))
		return err
	}
	if err := cl.Kill(ctx, m.Addr); err != nil {
		return err
	}
	for {
		now, err := cl.MasterOfSlot(ctx, slot)
		if err == nil && now.Addr != m.Addr {
			break
		}
		if err := backoff.Sleep(ctx, 10*time.Millisecond); err != nil {
			return err
		}
	}
	r.Failovers = append(r.Failovers, time.Since(began))
	// Without persistence a master restarted before its replica took
	// over would come back empty; now it comes back as a replica.
	if err := cl.Restart(ctx, m.Addr); err != nil {
		return err
	}
	return cl.WaitReady(ctx)
}
