package bench

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/localcluster"
	"github.com/batchlock/batchlock/orders"
)

// OrderConfig shapes the contention workload, the order workload of package
// orders: workers process orders whose baskets hold 1 to MaxBasket distinct
// SKUs, one unit each, against stock kept in Redis.
type OrderConfig struct {
	SKUs      int // distinct SKUs, spread over every master
	MaxBasket int
	Workers   []int // the numbers of workers, each a contention level of its own
	Stock     int64 // initial units of every SKU
	Rounds    int   // turns each library gets per number of workers, alternating
	Slice     time.Duration
	// UniformBaskets draws basket sizes alike in 1..MaxBasket (orders'
	// UniformBaskets), rather than small baskets most likely.
	UniformBaskets bool
	// Promos is the number of hot promotions of the shared-keys
	// comparison, one of which PromoShare of its orders read, run with
	// each of PromoWorkers workers.
	Promos       int
	PromoShare   float64
	PromoWorkers []int
}

// DefaultOrders: baskets of up to 40 of 2000 SKUs, with 1, 4, 16 and 32
// workers; every library gets two 3-second turns at each. The shared-keys
// comparison adds 3 hot promotions to half of the orders, with 16 and 32
// workers.
var DefaultOrders = OrderConfig{SKUs: 2000, MaxBasket: 40, Workers: []int{1, 4, 16, 32}, Stock: 1_000_000, Rounds: 2, Slice: 3 * time.Second,
	Promos: 3, PromoShare: 0.5, PromoWorkers: []int{16, 32}}

// OrderResult is what one library achieved with one number of workers over
// all its turns.
type OrderResult struct {
	Library string
	Workers int
	Orders  int64 // processed: accepted or rejected for want of stock
	GaveUp  int64 // lock not obtained within the library's own retry limits
	// LockWait is the time from asking for a basket's lock to holding it.
	LockWait Summary
	Elapsed  time.Duration
	// MastersCPU is the masters' process CPU (INFO cpu) over the library's
	// turns: its lock's work and the orders' own stock reads and writes.
	MastersCPU time.Duration
	// SendsScripts says that the processor's lock sends script calls
	// itself; LockScripts then counts them: the script calls (EVALSHA and
	// EVAL, INFO commandstats) the masters served over the turns, less the
	// orders' own stock writes (a script call per line written).
	SendsScripts bool
	LockScripts  int64
	// Commands is the masters' INFO commandstats over the turns: where,
	// within MastersCPU, the commands' own time went.
	Commands map[string]CommandStat
	// Sent is batchlock's own count of the script calls its Clients sent
	// over the turns, by kind (Client.Stats); nil for other processors.
	Sent *ScriptsSent
	// Oversold counts units sold beyond a SKU's stock, or written by two
	// holders at once, as the orders audit finds them. Must be 0.
	Oversold int64
}

// PerSecond is the throughput of processed orders.
func (r OrderResult) PerSecond() float64 { return float64(r.Orders) / r.Elapsed.Seconds() }

// CPUPerOrder is the masters' CPU per order processed.
func (r OrderResult) CPUPerOrder() time.Duration {
	if r.Orders == 0 {
		return 0
	}
	return r.MastersCPU / time.Duration(r.Orders)
}

// connectionCommands are the commands of setting up connections and of
// pub/sub, as INFO commandstats names them: what a waiter's subscription
// costs the masters beyond its script calls.
var connectionCommands = []string{"hello", "client|setinfo", "client|setname", "ssubscribe", "sunsubscribe", "subscribe", "unsubscribe", "ping"}

// CPUSplit is where the masters' CPU per order went: the script calls'
// own time (the lock's and the stock writes'), connections and pub/sub,
// every other command, and the rest of the process CPU, outside any command
// (reading and writing sockets, accepting connections, replication).
type CPUSplit struct {
	Scripts, Connections, Other, Outside time.Duration
	ScriptCalls, ConnectionCalls         float64
}

// CPUSplitPerOrder splits CPUPerOrder by Commands.
func (r OrderResult) CPUSplitPerOrder() CPUSplit {
	if r.Orders == 0 {
		return CPUSplit{}
	}
	per := func(usec int64) time.Duration {
		return time.Duration(usec) * time.Microsecond / time.Duration(r.Orders)
	}
	scripts, conns := sumOf(r.Commands, scriptCommands), sumOf(r.Commands, connectionCommands)
	var all int64
	for _, s := range r.Commands {
		all += s.Usec
	}
	return CPUSplit{
		Scripts: per(scripts.Usec), Connections: per(conns.Usec), Other: per(all - scripts.Usec - conns.Usec),
		Outside:     r.CPUPerOrder() - per(all),
		ScriptCalls: r.perOrder(scripts.Calls), ConnectionCalls: r.perOrder(conns.Calls),
	}
}

// LockScriptsPerOrder is the lock's script calls per order processed.
func (r OrderResult) LockScriptsPerOrder() float64 { return r.perOrder(r.LockScripts) }

// SentPerOrder is Sent per order processed, by kind.
func (r OrderResult) SentPerOrder() (acquires, releases, extends float64) {
	if r.Sent == nil {
		return 0, 0, 0
	}
	return r.perOrder(int64(r.Sent.Acquires)), r.perOrder(int64(r.Sent.Releases)), r.perOrder(int64(r.Sent.Extends))
}

func (r OrderResult) perOrder(n int64) float64 {
	if r.Orders == 0 {
		return 0
	}
	return float64(n) / float64(r.Orders)
}

// peerProcessor processes an order under a lock of a Locker: the basket's
// lock keys (named apart from the stock keys, which a single-key library
// would otherwise overwrite) and its promotions', then orders' own read,
// check and write.
type peerProcessor struct {
	name  string
	l     Locker
	stock *orders.Stock
	// shared takes the promotions shared (l is a SharedLocker); otherwise
	// they are locked exclusively with the stock.
	shared bool
	// sold is what the processor's accepted orders sold, over every level,
	// for the audit.
	sold map[string]int64
	// writes counts the stock writes its orders sent: script calls of
	// their own, not the lock's.
	writes atomic.Int64
}

// clientSpread is a Locker that spreads its locks over several Clients.
type clientSpread interface{ Clients() int }

// runsAt says whether p runs with workers workers: a processor over k
// Clients runs with k workers or more, since with fewer it would be the
// one over as many Clients as workers.
func (p *peerProcessor) runsAt(workers int) bool {
	s, ok := p.l.(clientSpread)
	return !ok || workers >= s.Clients()
}

func (p *peerProcessor) Process(ctx context.Context, o orders.Order) (orders.Outcome, error) {
	keys := lockKeys(p.stock.Keys(o))
	promos := lockKeys(p.stock.PromoKeys(o))
	if !p.shared {
		keys = append(keys, promos...)
	}
	// Sorted, as Locker asks: the per-key peers and the ceiling take them
	// in this order, which is what keeps them from deadlock.
	slices.Sort(keys)
	asked := time.Now()
	var h Held
	var err error
	if p.shared {
		h, err = p.l.(SharedLocker).LockShared(ctx, keys, promos)
	} else {
		h, err = p.l.Lock(ctx, keys)
	}
	if err != nil {
		return orders.Outcome{}, err
	}
	wait := time.Since(asked)
	out, err := p.stock.Fulfil(ctx, o, nil, 0, true)
	if out.Written {
		// One script call per line; a write retried after an error is not
		// seen, and counts as the lock's.
		p.writes.Add(int64(len(o.Lines)))
	}
	out.LockWait, out.Locked = wait, true
	if uerr := h.Unlock(context.WithoutCancel(ctx)); err == nil && uerr != nil && !out.Written {
		err = uerr
	}
	return out, err
}

// lockKeys names the lock keys of keys.
func lockKeys(keys []string) []string {
	for i, k := range keys {
		keys[i] = "lock:" + k
	}
	return keys
}

// orderTimeout bounds one order, lock wait included: an order under way
// when its processor's turn ends still finishes, and redsync's retries could
// otherwise hold a turn up for minutes. An order past it gives up.
const orderTimeout = 10 * time.Second

// RunOrders runs the order workload for every number of workers and every
// library in turns (the order rotating every round), each library on stock of
// its own, then audits every library's stock against the orders it accepted.
// Results come by number of workers, then library.
func RunOrders(ctx context.Context, cl *localcluster.Cluster, rdb redis.UniversalClient, lockers []Locker, cfg OrderConfig) ([]OrderResult, error) {
	procs := make([]*peerProcessor, len(lockers))
	for i, l := range lockers {
		procs[i] = &peerProcessor{name: l.Name(), l: l}
	}
	cfg.Promos = 0
	return runWorkload(ctx, cl, rdb, procs, cfg, cfg.Workers)
}

// RunPromotions is the shared-keys comparison: the order workload with
// cfg.Promos hot promotions that cfg.PromoShare of the orders read, with
// each of cfg.PromoWorkers workers, processed under l's locks with the
// promotions taken shared (NameSharedPromos) and exclusively
// (NameExclusivePromos), in turns.
func RunPromotions(ctx context.Context, cl *localcluster.Cluster, rdb redis.UniversalClient, l SharedLocker, cfg OrderConfig) ([]OrderResult, error) {
	procs := []*peerProcessor{{name: NameSharedPromos, l: l, shared: true}, {name: NameExclusivePromos, l: l}}
	return runWorkload(ctx, cl, rdb, procs, cfg, cfg.PromoWorkers)
}

// runWorkload gives procs stock of their own, runs the order workload with
// each of workers workers, then audits every processor's stock against the
// orders it accepted and removes it.
func runWorkload(ctx context.Context, cl *localcluster.Cluster, rdb redis.UniversalClient, procs []*peerProcessor, cfg OrderConfig, workers []int) ([]OrderResult, error) {
	for _, p := range procs {
		p.stock = orders.NewStock(rdb, "bench:"+p.name+":", orders.Catalogue(cfg.SKUs), cfg.Stock)
		if err := p.stock.Setup(ctx); err != nil {
			return nil, err
		}
		p.sold = map[string]int64{}
	}
	var out []OrderResult
	for level, n := range workers {
		var running []*peerProcessor
		for _, p := range procs {
			if p.runsAt(n) {
				running = append(running, p)
			}
		}
		results, err := runOrderLevel(ctx, cl, running, cfg, n, level)
		if err != nil {
			return nil, err
		}
		out = append(out, results...)
	}
	for _, p := range procs {
		audit, err := p.stock.Audit(ctx, p.sold)
		if err != nil {
			return nil, err
		}
		if !audit.OnlyOversell() {
			return nil, fmt.Errorf("%s: the audit found %v", p.name, audit.Problems)
		}
		for j := range out {
			if out[j].Library == p.name {
				out[j].Oversold = audit.OversoldUnits
			}
		}
		if err := p.stock.Cleanup(ctx); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// runOrderLevel gives every processor cfg.Rounds turns with workers
// workers, and adds what they sold to their sold. level numbers the order
// lists apart from the other levels'.
func runOrderLevel(ctx context.Context, cl *localcluster.Cluster, procs []*peerProcessor, cfg OrderConfig, workers, level int) ([]OrderResult, error) {
	masters, err := cl.Masters(ctx)
	if err != nil {
		return nil, err
	}
	results := make([]OrderResult, len(procs))
	waits := make([][]time.Duration, len(procs))
	for i, p := range procs {
		results[i] = OrderResult{Library: p.name, Workers: workers, SendsScripts: sendsScripts(p.l)}
		if _, ok := p.l.(scriptSender); ok {
			results[i].Sent = &ScriptsSent{}
		}
	}
	for round := range cfg.Rounds {
		// Enough orders for any turn: a turn ends by time.
		list, err := orders.Generate(orders.GenConfig{SKUs: cfg.SKUs, Orders: 200_000, MaxBasket: cfg.MaxBasket, UniformBaskets: cfg.UniformBaskets, MaxQty: 1,
			Promos: cfg.Promos, PromoShare: cfg.PromoShare, Seed: uint64(level*cfg.Rounds + round)})
		if err != nil {
			return nil, err
		}
		// Ids unique across rounds: a write is applied once per order id.
		for i := range list {
			list[i].ID = fmt.Sprintf("w%d-r%d-%s", workers, round, list[i].ID)
		}
		for j := range procs {
			i := (j + round) % len(procs)
			p := procs[i]
			var res orders.Result
			cost, err := measureTurn(ctx, cl, masters, p, func() {
				stop := make(chan struct{})
				t := time.AfterFunc(cfg.Slice, func() { close(stop) })
				res = orders.Run(ctx, p, list, orders.RunConfig{Workers: workers, Attempts: 1, OrderTimeout: orderTimeout, Stop: stop})
				t.Stop()
			})
			if err != nil {
				return nil, err
			}
			if res.Unknown > 0 {
				return nil, fmt.Errorf("%s: %d orders failed half-written: %v", p.name, res.Unknown, res.FirstErrors)
			}
			waits[i] = append(waits[i], res.LockWaits...)
			r := &results[i]
			r.MastersCPU += cost.cpu
			r.LockScripts += sumOf(cost.commands, scriptCommands).Calls - cost.writes
			r.Commands = addStats(r.Commands, cost.commands, 1)
			if r.Sent != nil {
				*r.Sent = r.Sent.plus(cost.sent)
			}
			r.Orders += int64(res.Accepted + res.Rejected)
			r.GaveUp += int64(res.Errors)
			r.Elapsed += res.Elapsed
			for sku, n := range res.SoldBySKU {
				p.sold[sku] += n
			}
		}
	}
	for i := range results {
		results[i].LockWait = Summarize(waits[i])
	}
	return results, nil
}

// turnCounters are what a processor's turns are measured by; read before
// and after a turn, their difference is what the turn cost.
type turnCounters struct {
	cpu      time.Duration          // the masters' process CPU
	commands map[string]CommandStat // the masters' commandstats
	writes   int64                  // the processor's stock writes
	sent     ScriptsSent            // its Clients' own count, where it keeps one
}

func (c turnCounters) minus(o turnCounters) turnCounters {
	return turnCounters{cpu: c.cpu - o.cpu, commands: addStats(addStats(nil, c.commands, 1), o.commands, -1), writes: c.writes - o.writes, sent: c.sent.minus(o.sent)}
}

// measureTurn runs turn and returns what it cost.
func measureTurn(ctx context.Context, cl *localcluster.Cluster, masters []localcluster.Node, p *peerProcessor, turn func()) (turnCounters, error) {
	return measureCost(ctx, cl, masters, p.writes.Load, func() ScriptsSent { return scriptsSent(p.l) }, turn)
}

// measureCost runs turn and returns what it cost, with writes and sent the
// processor's own counters. The masters' CPU is read nearest the turn, so
// that reading the other counters costs it nothing.
func measureCost(ctx context.Context, cl *localcluster.Cluster, masters []localcluster.Node, writes func() int64, sent func() ScriptsSent, turn func()) (turnCounters, error) {
	var before, after turnCounters
	var err error
	if before.commands, err = mastersCommandStats(ctx, cl, masters); err != nil {
		return turnCounters{}, err
	}
	before.writes, before.sent = writes(), sent()
	if before.cpu, err = mastersCPU(ctx, cl, masters); err != nil {
		return turnCounters{}, err
	}
	turn()
	if after.cpu, err = mastersCPU(ctx, cl, masters); err != nil {
		return turnCounters{}, err
	}
	after.writes, after.sent = writes(), sent()
	if after.commands, err = mastersCommandStats(ctx, cl, masters); err != nil {
		return turnCounters{}, err
	}
	return after.minus(before), nil
}

// scriptsSent is what l's Clients sent so far, zero for a Locker that does
// not count.
func scriptsSent(l Locker) ScriptsSent {
	if s, ok := l.(scriptSender); ok {
		return s.ScriptsSent()
	}
	return ScriptsSent{}
}
