package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"github.com/batchlock/batchlock/cmd/batchlock/internal/cli"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/localcluster"
	"github.com/batchlock/batchlock/orders"
)

type demoOptions struct {
	addrs     string
	store     string
	skus      int
	orders    int
	workers   int
	batch     int    // orders per tick of the batch processor; 0: a basket per call
	procs     int    // batch processors at once, each with a Client of its own
	space     string // with --batch: the hash tag of every lock key, or none
	maxBasket int
	maxQty    int64
	stock     int64
	hot       int
	promos    int
	exclusive bool // promotions locked exclusively
	flash     float64
	counted   bool // SKUs locked in units
	think     time.Duration
	replicas  int
	seed      uint64
	noLock    bool
	chaos     bool
	json      bool
	verbose   bool
}

// hotShare is the share of order lines that pick one of the hot SKUs, and
// promoShare the share of orders that apply one of the promotions.
const (
	hotShare   = 0.1
	promoShare = 0.5
)

func demoCommand() cli.Command {
	return cli.Command{
		Name: "demo",
		Summary: `Usage: batchlock demo [--addrs host:port,...] [--store redis|postgres] [--skus 2000] [--orders 5000]
                      [--workers 32 | --batch N [--processors P]] [--max-basket 200] [--promos 3] [--exclusive-promos]
                      [--no-lock] [--chaos] [--seed N] [--json] [flags]

Processes SKU orders on a Redis Cluster: each order locks its whole basket
(1 to --max-basket SKUs, spread over every master) with batchlock, reads
the stock of every line, then decrements every line or rejects the order.
An audit then checks every SKU: nothing sold beyond its stock, nothing
below zero, every accepted order fully applied. Half of the orders also
read one of a few hot promotions (--promos), which they lock shared in the
same call (batchlock.WithShared): orders on one promotion run side by side.
--exclusive-promos locks them exclusively instead, for comparison.

--batch N runs a batch processor instead of --workers (a batchlock
Processor): ticks of up to N orders, the oldest that may be free, every
free basket of a tick locked by one TryEach (one call per master), stock
read and written in one pipeline each, all let go by the tick's Done; a
busy basket waits, before the younger ones, until a key that refused it
may be free, and one that other processors refused 8 ticks in a row
waits in its keys' queues instead. Every lock key has the hash tag {shop} (--space NAME for
another, --space "" for none): the processors' locks in one slot, where
they meet in one script call; the stock stays spread over the masters.
--processors P runs P such processors at once, as replicas: each with a
batchlock Client and a cluster client of its own, sharing out the orders;
the report gives orders/s in all and per processor, and the wait of an
order from its first tick to its lock.

Without --addrs (or $BATCHLOCK_CLUSTER_ADDRS) the demo starts a throwaway
six-node cluster (docker, or redis-server processes) and removes it
afterwards, also on Ctrl-C. With either, it runs on that cluster (loopback
only), under keys demo:<run>:, which it deletes afterwards.

--store=postgres keeps the stock in a throwaway PostgreSQL server (started
from the installed server binaries on a free loopback port, removed
afterwards) instead of Redis hashes: each order locks its basket, then
runs one transaction in the lock's context whose every stock write carries
the key's fencing token (UPDATE ... WHERE fence <= token), and commits only
while the lock holds. The audit reads the database: nothing oversold, every
accepted order with all its lines, no row written by a stale token.

--flash S adds the flash sale's SKU (sku-00000) to a share S of the orders
(0 to 1): one SKU in many baskets, which exclusive locks serve one order at
a time. --counted locks every SKU in units instead (batchlock.WithUnits):
each line holds its quantity of its SKU, whose capacity is its stock, so
that the orders of one SKU run side by side while its stock lasts; an
order asking more than a SKU has left is rejected at once, and an order
written consumes its units (Lock.Consume; with --batch, Basket.Units and
one ConsumeEach a tick; with --store=postgres, each order's sale is
recorded once in its transaction, its units taken from the SKU's row,
then consumed). The audit then also checks that every SKU's capacity
equals its remaining units.

--no-lock runs the same read, check and write without a lock: orders that
read a SKU at the same time both sell the same units, and the audit shows
the oversell. That is the expected demonstration: it exits 0 unless the
audit finds something other than an oversell.

--chaos fails a master over to its replica a third of the way through the
run (throwaway cluster only); the audit must still pass.

Progress goes to stderr, the report to stdout. Exit code 0 when the audit
passes, 1 when it fails or the run could not complete, 2 on a usage error.`,
		Flags: func(fs *flag.FlagSet) any {
			o := &demoOptions{}
			fs.StringVar(&o.addrs, "addrs", "", "seeds of a running cluster, comma-separated (default $BATCHLOCK_CLUSTER_ADDRS, else a throwaway cluster)")
			fs.StringVar(&o.store, "store", storeRedis, "where the stock lives: redis (hashes in the cluster) or postgres (a throwaway PostgreSQL)")
			fs.IntVar(&o.skus, "skus", 2000, "SKUs in the catalogue")
			fs.IntVar(&o.orders, "orders", 5000, "orders to process")
			fs.IntVar(&o.workers, "workers", 32, "orders processed at once")
			fs.IntVar(&o.batch, "batch", 0, "process orders as a batch processor: ticks of N orders, each tick's free baskets locked by one TryEach (redis store)")
			fs.IntVar(&o.procs, "processors", 1, "with --batch: processors at once, replicas each with a batchlock Client and a cluster client of its own, sharing the orders")
			fs.StringVar(&o.space, "space", "shop", "with --batch: the hash tag of every lock key, so that replicas meet in one slot (empty: the locks spread over every master)")
			fs.IntVar(&o.maxBasket, "max-basket", 200, "most SKUs in one order")
			fs.Int64Var(&o.maxQty, "max-qty", 3, "most units of one SKU in one order")
			fs.Int64Var(&o.stock, "stock", 100, "initial units of each SKU")
			fs.IntVar(&o.hot, "hot", 20, "hot SKUs, which a tenth of all lines pick")
			fs.IntVar(&o.promos, "promos", 3, "hot promotions, one of which half of the orders read: locked shared, with the stock")
			fs.BoolVar(&o.exclusive, "exclusive-promos", false, "lock the promotions exclusively instead, as a lock without shared keys must (redis store)")
			fs.Float64Var(&o.flash, "flash", 0, "share of the orders (0 to 1) that also buy the flash sale's SKU, sku-00000")
			fs.BoolVar(&o.counted, "counted", false, "lock SKUs in units, each order its quantities, within each SKU's stock")
			fs.DurationVar(&o.think, "think", 0, "pause in each order, as a real processor's work: between reading stock and writing it (redis), before the commit (postgres)")
			fs.IntVar(&o.replicas, "replicas", -1, "replicas that must acknowledge every lock and write (WAIT) (default 0, or 1 with --chaos)")
			fs.Uint64Var(&o.seed, "seed", 1, "seed of the order stream: same seed, same orders")
			fs.BoolVar(&o.noLock, "no-lock", false, "process orders without locking: shows the oversell batchlock prevents")
			fs.BoolVar(&o.chaos, "chaos", false, "fail a master over in the middle of the run (throwaway cluster only)")
			fs.BoolVar(&o.json, "json", false, "print the report as JSON")
			fs.BoolVar(&o.verbose, "verbose", false, "show how the throwaway cluster is started (docker and testcontainers messages)")
			return o
		},
		Run: func(ctx context.Context, e *cli.Env, opts any, args []string) error {
			return runDemo(ctx, e, opts.(*demoOptions), args)
		},
	}
}

func (o *demoOptions) validate(args []string) error {
	switch {
	case len(args) > 0:
		return cli.Usagef("unexpected argument %q", args[0])
	case o.store != storeRedis && o.store != storePostgres:
		return cli.Usagef("--store %q: want %s or %s", o.store, storeRedis, storePostgres)
	case o.noLock && o.store != storeRedis:
		return cli.Usagef("--no-lock runs on --store=%s only: its oversell is that of the Redis read-then-write", storeRedis)
	case o.skus < 1:
		return cli.Usagef("--skus %d: need at least 1", o.skus)
	case o.orders < 1:
		return cli.Usagef("--orders %d: need at least 1", o.orders)
	case o.workers < 1 || o.workers > 1024:
		return cli.Usagef("--workers %d: want 1 to 1024", o.workers)
	case o.maxBasket < 1:
		return cli.Usagef("--max-basket %d: need at least 1", o.maxBasket)
	case o.maxQty < 1:
		return cli.Usagef("--max-qty %d: need at least 1", o.maxQty)
	case o.stock < 1:
		return cli.Usagef("--stock %d: need at least 1", o.stock)
	case o.hot < 0 || o.hot > o.skus:
		return cli.Usagef("--hot %d: want 0 to --skus (%d)", o.hot, o.skus)
	case o.batch < 0:
		return cli.Usagef("--batch %d must not be negative", o.batch)
	case o.procs < 1 || o.procs > 64:
		return cli.Usagef("--processors %d: want 1 to 64", o.procs)
	case strings.ContainsAny(o.space, "{}"):
		return cli.Usagef("--space %q: a hash tag has no braces", o.space)
	case o.procs > 1 && o.batch == 0:
		return cli.Usagef("--processors runs batch processors: it needs --batch")
	case o.batch > 0 && (o.noLock || o.store != storeRedis || o.exclusive):
		return cli.Usagef("--batch locks with TryEach: it needs a lock, --store=%s and shared promotions", storeRedis)
	case o.promos < 0:
		return cli.Usagef("--promos %d must not be negative", o.promos)
	case o.exclusive && (o.noLock || o.store != storeRedis):
		return cli.Usagef("--exclusive-promos compares lock modes: it needs a lock and --store=%s", storeRedis)
	case o.flash < 0 || o.flash > 1:
		return cli.Usagef("--flash %v: want 0 to 1", o.flash)
	case o.counted && (o.noLock || o.exclusive):
		return cli.Usagef("--counted locks SKUs in units: it needs a lock and shared promotions")
	case o.think < 0:
		return cli.Usagef("--think %v must not be negative", o.think)
	case o.replicas < -1:
		return cli.Usagef("--replicas %d must not be negative", o.replicas)
	case o.chaos && o.addrs != "":
		return cli.Usagef("--chaos needs the throwaway cluster: it fails a master over, which it cannot do to a cluster given by --addrs")
	case o.chaos && os.Getenv(cli.EnvClusterAddrs) != "":
		return cli.Usagef("--chaos needs a throwaway cluster, but $%s is set, which makes the demo use that cluster: unset it",
			cli.EnvClusterAddrs)
	}
	return nil
}

// replicaTimeout bounds each WAIT for replica acknowledgement.
const replicaTimeout = time.Second

func runDemo(ctx context.Context, e *cli.Env, o *demoOptions, args []string) error {
	if err := o.validate(args); err != nil {
		return err
	}
	if o.replicas < 0 {
		// A failover loses what its replica had not received: with
		// --chaos, locks and writes wait for one replica by default.
		o.replicas = 0
		if o.chaos {
			o.replicas = 1
		}
	}
	var seeds []string
	if o.addrs != "" || os.Getenv(cli.EnvClusterAddrs) != "" {
		var err error
		if seeds, err = cli.AddrsFromFlagOrEnv(o.addrs); err != nil {
			return err
		}
		if err := cli.RequireLoopback(seeds); err != nil {
			return err
		}
	}
	list, err := orders.Generate(orders.GenConfig{
		SKUs: o.skus, Orders: o.orders, MaxBasket: o.maxBasket, MaxQty: o.maxQty,
		HotSKUs: o.hot, HotShare: hotShare, Promos: o.promos, PromoShare: promoShare, FlashShare: o.flash, Seed: o.seed,
	})
	if err != nil {
		return cli.Usagef("%v", err)
	}

	t, err := openTarget(ctx, e, seeds, o.verbose)
	if err != nil {
		return err
	}
	defer func() {
		if err := t.close(); err != nil {
			fmt.Fprintf(e.Stderr, "batchlock demo: closing the cluster: %v\n", err)
		}
	}()

	stock, err := openStore(ctx, e.Stderr, o, t.rdb, "demo:"+runID()+":")
	if err != nil {
		return err
	}
	// Clean up also after Ctrl-C, when ctx is done.
	defer func() {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := stock.close(cctx); err != nil {
			fmt.Fprintf(e.Stderr, "batchlock demo: %v\n", err)
		}
	}()

	run, counters, checkMore, closeProc, err := newProcessor(ctx, o, t, stock)
	if err != nil {
		return err
	}
	defer closeProc()

	prog := startProgress(e.Stderr, len(list))
	var chaos *chaosRun
	if o.chaos {
		chaos = startChaos(ctx, t.cluster, prog, int64(len(list)/3))
	}
	cfg := orders.RunConfig{Workers: o.workers, Done: func() {
		n := prog.add()
		chaos.reached(n)
	}}
	res, shares := run(ctx, list, cfg)
	prog.finish()
	chaosRes := chaos.wait()
	if err := context.Cause(ctx); err != nil {
		return fmt.Errorf("interrupted after %d of %d orders: %w", res.Orders, len(list), err)
	}

	// Give the audit its own deadline: after a failover, reads may wait
	// for the cluster to settle.
	actx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	audit, err := stock.audit(actx, res)
	if err == nil && checkMore != nil {
		err = checkMore(actx, &audit)
	}
	if err != nil {
		return fmt.Errorf("audit: %w", err)
	}
	r := demoReport{
		Cluster:     t.addrs,
		Store:       stock.describe(),
		Throwaway:   t.cluster != nil,
		SKUs:        o.skus,
		StockPerSKU: o.stock,
		MaxBasket:   o.maxBasket,
		Promos:      promotions(o),
		Seed:        o.seed,
		Think:       orders.Duration(o.think),
		Replicas:    o.replicas,
		Run:         orders.NewReport(mode(o), cmp.Or(o.batch, o.workers), res, counters, audit),
		Chaos:       chaosRes,
	}
	if len(shares) > 1 {
		for _, sh := range shares {
			r.Processors = append(r.Processors, processorFigures{Orders: sh.Orders, OrdersPerSec: float64(sh.Orders) / sh.Elapsed.Seconds()})
		}
	}
	r.Verdict, r.Passed = judge(o.noLock, audit)
	if r.Passed && o.store == storePostgres {
		r.Verdict = "PASSED: no unit oversold, every accepted order fully applied, no row written by a stale token, stock consistent"
	}
	if chaosRes != nil && chaosRes.Err != "" {
		r.Verdict, r.Passed = "FAILED: the failover did not complete, so the run shows nothing about one", false
	}
	if o.json {
		err = cli.WriteJSON(e.Stdout, r)
	} else {
		err = r.writeText(e.Stdout)
	}
	if err != nil {
		return err
	}
	if !r.Passed {
		return &cli.ExitError{Code: cli.ExitFailure}
	}
	return nil
}

// runner runs a list of orders, and returns what it did in all and, with
// several processors, what each did.
type runner func(ctx context.Context, list []orders.Order, cfg orders.RunConfig) (orders.Result, []orders.Result)

// processing runs orders with p on workers.
func processing(p orders.Processor) runner {
	return func(ctx context.Context, list []orders.Order, cfg orders.RunConfig) (orders.Result, []orders.Result) {
		return orders.Run(ctx, p, list, cfg), nil
	}
}

// newProcessor returns the run --no-lock, --counted, --batch and
// --processors ask for, the counters of its lock events (nil without
// locks), what the audit checks besides the stock (nil for nothing), and
// what to close after the run.
func newProcessor(ctx context.Context, o *demoOptions, t *target, stock stockStore) (runner, *orders.Counters, func(context.Context, *orders.Audit) error, func(), error) {
	if o.noLock {
		// validate allows --no-lock on Redis only.
		return processing(&orders.Unlocked{Stock: stock.(*redisStore).stock, Think: o.think}), nil, nil, func() {}, nil
	}
	counters := &orders.Counters{}
	opts := []batchlock.Option{batchlock.WithObserver(counters.Observe)}
	if o.replicas > 0 {
		opts = append(opts, batchlock.WithReplicas(o.replicas, replicaTimeout))
	}
	if o.counted && o.batch == 0 {
		locker, err := batchlock.New(t.rdb, opts...)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		p, check, err := stock.counted(ctx, locker)
		if err != nil {
			_ = locker.Close()
			return nil, nil, nil, nil, err
		}
		return processing(p), counters, check, func() { _ = locker.Close() }, nil
	}
	if o.batch == 0 {
		locker, err := batchlock.New(t.rdb, opts...)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		return processing(stock.locked(locker)), counters, nil, func() { _ = locker.Close() }, nil
	}
	// Batch processors, as replicas run them: each with a Client on a
	// cluster client of its own (the first on the target's), sharing out
	// the orders. validate allows --batch on Redis only.
	var closers []func() error
	closeAll := func() {
		for _, c := range slices.Backward(closers) {
			_ = c()
		}
	}
	procs := make([]*orders.Batched, o.procs)
	for p := range procs {
		rdb := t.rdb
		if p > 0 {
			rdb = redis.NewClusterClient(batchlock.ClusterOptions(t.addrs...))
			closers = append(closers, rdb.Close)
		}
		locker, err := batchlock.New(rdb, opts...)
		if err != nil {
			closeAll()
			return nil, nil, nil, nil, err
		}
		closers = append(closers, locker.Close)
		procs[p] = &orders.Batched{Locker: locker, Stock: stock.(*redisStore).stock, Think: o.think, Size: o.batch, Space: o.space, Counted: o.counted}
	}
	var check func(context.Context, *orders.Audit) error
	if o.counted {
		st, locker := procs[0].Stock, procs[0].Locker
		st.WriteConcurrently()
		if err := st.SetCapacities(ctx, locker, o.space); err != nil {
			closeAll()
			return nil, nil, nil, nil, err
		}
		check = func(ctx context.Context, a *orders.Audit) error { return st.AuditCapacities(ctx, locker, o.space, a) }
	}
	run := func(ctx context.Context, list []orders.Order, cfg orders.RunConfig) (orders.Result, []orders.Result) {
		shares := make([]orders.Result, len(procs))
		var wg sync.WaitGroup
		for p, b := range procs {
			mine := list[p*len(list)/len(procs) : (p+1)*len(list)/len(procs)]
			wg.Go(func() { shares[p] = orders.RunBatched(ctx, b, mine, orders.Ticks{}, cfg) })
		}
		wg.Wait()
		return orders.Merge(shares...), shares
	}
	return run, counters, check, closeAll, nil
}

// promotions says how the run's orders read promotions, for the report.
func promotions(o *demoOptions) string {
	switch {
	case o.promos == 0:
		return "none"
	case o.noLock:
		return fmt.Sprintf("%d hot, in half of the orders, not locked", o.promos)
	case o.exclusive:
		return fmt.Sprintf("%d hot, in half of the orders, locked exclusively (--exclusive-promos)", o.promos)
	}
	return fmt.Sprintf("%d hot, in half of the orders, locked shared", o.promos)
}

func mode(o *demoOptions) string {
	switch {
	case o.noLock:
		return "no-lock"
	case o.counted:
		return "batchlock, SKUs counted"
	}
	return "batchlock"
}

// target is the cluster the demo runs on.
type target struct {
	rdb     *redis.ClusterClient
	cluster *localcluster.Cluster // nil with --addrs
	addrs   []string
}

// openTarget connects to the cluster at seeds, or with none starts a
// throwaway one. ($BATCHLOCK_CLUSTER_ADDRS is never set here: it gives
// seeds.)
func openTarget(ctx context.Context, e *cli.Env, seeds []string, verbose bool) (*target, error) {
	if len(seeds) > 0 {
		rdb, err := cli.Connect(ctx, seeds)
		if err != nil {
			return nil, err
		}
		return &target{rdb: rdb, addrs: seeds}, nil
	}
	began := time.Now()
	fmt.Fprintln(e.Stderr, "starting a throwaway six-node Redis Cluster (the first run may build a docker image)...")
	var opts []localcluster.Option
	if verbose {
		opts = append(opts, localcluster.WithLogf(func(format string, args ...any) {
			fmt.Fprintf(e.Stderr, format+"\n", args...)
		}))
	}
	c, err := localcluster.Start(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("cannot start a throwaway cluster (pass --addrs to use a running one): %w", err)
	}
	fmt.Fprintf(e.Stderr, "cluster ready in %v on the %s backend: %v\n", time.Since(began).Round(time.Millisecond), c.Backend(), c.Addrs())
	rdb := c.Client()
	if err := cli.Ping(ctx, rdb); err != nil {
		return nil, errors.Join(fmt.Errorf("the throwaway cluster does not answer: %w", err), rdb.Close(), c.Close())
	}
	return &target{rdb: rdb, cluster: c, addrs: c.Addrs()}, nil
}

func (t *target) close() error {
	err := t.rdb.Close()
	if t.cluster != nil {
		err = errors.Join(err, t.cluster.Close())
	}
	return err
}

// runID names a run's keys, so that runs on one cluster do not meet.
func runID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// chaosRun fails a master over once the run reaches a number of orders.
type chaosRun struct {
	at      int64
	due     chan struct{}
	dueOnce sync.Once
	end     chan struct{} // closed by wait: the run is over
	result  *chaosResult
	wg      sync.WaitGroup
}

func startChaos(ctx context.Context, cluster *localcluster.Cluster, prog *progress, at int64) *chaosRun {
	c := &chaosRun{at: max(at, 1), due: make(chan struct{}), end: make(chan struct{}), result: &chaosResult{}}
	c.wg.Go(func() {
		select {
		case <-c.due:
		case <-c.end:
			select {
			case <-c.due: // due just before the end: fail over all the same
			default:
				return
			}
		case <-ctx.Done():
			return
		}
		c.result.AtOrder = c.at
		began := time.Now()
		defer func() { c.result.Took = orders.Duration(time.Since(began)) }()
		masters, err := cluster.Masters(ctx)
		if err != nil || len(masters) == 0 {
			c.result.Err = fmt.Sprintf("finding a master: %v", err)
			return
		}
		c.result.Master = masters[0].Addr
		prog.logf("chaos: failing master %s over to its replica", c.result.Master)
		promoted, err := cluster.Failover(ctx, c.result.Master)
		if err != nil {
			c.result.Err = err.Error()
			prog.logf("chaos: failover of %s failed: %v", c.result.Master, err)
			return
		}
		c.result.Promoted = promoted
		prog.logf("chaos: %s now serves the slots of %s (%v)", promoted, c.result.Master, time.Since(began).Round(time.Millisecond))
	})
	return c
}

// reached tells c that n orders are done. A nil c (no --chaos) ignores it.
func (c *chaosRun) reached(n int64) {
	if c != nil && n >= c.at {
		c.dueOnce.Do(func() { close(c.due) })
	}
}

// wait lets a failover under way finish, and returns what it did.
func (c *chaosRun) wait() *chaosResult {
	if c == nil {
		return nil
	}
	close(c.end)
	c.wg.Wait()
	return c.result
}
