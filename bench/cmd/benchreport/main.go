// Command benchreport runs every benchmark workload of batchlock and its
// peers on one Redis Cluster and writes docs/bench.md and
// docs/bench-latency.svg.
//
// Usage, from bench/:
//
//	go run ./cmd/benchreport [--addrs host:port,...] [--backend process] [--out ../docs] [--quick]
//	    [--only batch [--mix uniform,stream,zipf,big|all] [--open | --rate N] | --only sale | --only floors | --only orders [--uniform]]
//
// --only batch runs the batch workload alone and prints its section and
// targets, writing nothing: to measure a change to TryEach quickly; --mix
// names the mixes to run it on, one after the other (default uniform, the
// targets' mix), --open runs it as an open loop at each mix's own arrival
// rate and --rate N at N orders a second in all. --only sale does the
// same for the sale workload (a flash sale and Zipf-drawn SKUs, counted
// holds beside the decrement floor and the exclusive Processor). --only
// floors does the same for batchlock and the three floors' latency and cost
// at the sizes of the floor targets (keys spread), and times the lock and the
// unlock of batchlock and the lock floor apart; --only orders for the
// hand-off and the contention workload, with --uniform on baskets of every
// size alike.
//
// Without --addrs it starts a throwaway six-node cluster with
// localcluster.Start and removes it at the end.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/bench"
	"github.com/batchlock/batchlock/localcluster"
)

// runTimeout stops a run that went wrong; a full one takes about 20 minutes.
const runTimeout = 45 * time.Minute

func main() {
	addrs := flag.String("addrs", "", "seed addresses of a running cluster on loopback, comma-separated (default: start a throwaway one)")
	out := flag.String("out", filepath.Join("..", "docs"), "directory to write bench.md and bench-latency.svg to")
	backend := flag.String("backend", "", "docker or process: how to run the throwaway cluster (default: localcluster's choice, docker when a daemon answers)")
	quick := flag.Bool("quick", false, "a tenth of the samples and short contention turns: to try the program, not for numbers")
	only := flag.String("only", "", "batch: run the batch workload alone and print its section, writing nothing; sale: the same for the sale workload (counted holds); floors: batchlock and the floors at the floor targets' sizes; orders: the hand-off and the contention workload")
	uniform := flag.Bool("uniform", false, "with --only orders: basket sizes alike in 1..40 rather than small baskets most likely")
	mixNames := flag.String("mix", "", "with --only batch: the mixes to run, comma-separated, of uniform, stream, zipf and big, or all (default uniform)")
	open := flag.Bool("open", false, "with --only batch: an open loop, orders arriving at each mix's own rate")
	rate := flag.Float64("rate", 0, "with --only batch: an open loop, orders arriving this many a second in all")
	stall := flag.Bool("stall", false, "with --only batch: the stall load alone (three Processors at 600 orders/s, one stalling 3 s holding its tick)")
	moves := flag.Bool("moves", false, "with --only batch: the moves load alone (three Processors in one space at 600 orders/s, without and with its slot moved every 500 ms)")
	failover := flag.Bool("failover", false, "with --only batch: the failover load alone (three Processors in one space at 600 orders/s, without and with its master failed over, gracefully and killed; not with --addrs, which cannot kill a node)")
	masters := flag.Int("masters", 0, "masters of the throwaway cluster, each with a replica (default 3; not with --addrs)")
	cpuProfile := flag.String("cpuprofile", "", "write this process's CPU profile to the file: where the client's time goes")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err == nil {
			err = pprof.StartCPUProfile(f)
		}
		if err != nil {
			log.Fatalf("benchreport: %v", err)
		}
		defer pprof.StopCPUProfile()
	}
	log.SetFlags(0)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, runTimeout)
	defer cancel()
	if *only != "" && *only != "batch" && *only != "sale" && *only != "floors" && *only != "orders" && *only != "scale" {
		log.Printf("benchreport: --only %q: the sections that run alone are batch, sale, floors, orders and scale", *only)
		os.Exit(2)
	}
	if *masters != 0 && (*masters < 3 || *addrs != "") {
		log.Printf("benchreport: --masters %d: at least 3, for a throwaway cluster (no --addrs)", *masters)
		os.Exit(2)
	}
	if *uniform && *only != "orders" {
		log.Printf("benchreport: --uniform goes with --only orders")
		os.Exit(2)
	}
	if (*mixNames != "" || *open || *rate != 0 || *stall || *moves || *failover) && *only != "batch" {
		log.Printf("benchreport: --mix, --open, --rate, --stall, --moves and --failover go with --only batch")
		os.Exit(2)
	}
	loads, err := batchLoads(*mixNames, *open, *rate)
	if err != nil {
		log.Printf("benchreport: %v", err)
		os.Exit(2)
	}
	for _, alone := range []struct {
		set  bool
		flag string
		load bench.BatchLoad
	}{{*stall, "--stall", bench.LoadStall}, {*moves, "--moves", bench.LoadMoves}, {*failover, "--failover", bench.LoadFailover}} {
		if !alone.set {
			continue
		}
		if *mixNames != "" || *open || *rate != 0 || len(loads) != 1 || loads[0] != (bench.BatchLoad{Mix: bench.MixUniform}) {
			log.Printf("benchreport: %s is a load of its own: no --mix, --open, --rate, --stall, --moves or --failover with it", alone.flag)
			os.Exit(2)
		}
		loads = []bench.BatchLoad{alone.load}
	}
	if err := run(ctx, *addrs, localcluster.Backend(*backend), *masters, *out, *quick, *only, *uniform, loads); err != nil {
		log.Printf("benchreport: %v", err)
		cancel()
		stop()
		pprof.StopCPUProfile()
		os.Exit(1)
	}
}

// batchLoads are the loads --mix, --open and --rate ask for.
func batchLoads(names string, open bool, rate float64) ([]bench.BatchLoad, error) {
	if rate < 0 || math.IsNaN(rate) || math.IsInf(rate, 0) {
		return nil, fmt.Errorf("--rate %v: must be a positive number of orders a second", rate)
	}
	var loads []bench.BatchLoad
	for name := range strings.SplitSeq(cmp.Or(names, bench.MixUniform.Name), ",") {
		var mixes []bench.BatchMix
		for _, m := range bench.BatchMixes {
			if name == "all" || m.Name == name {
				mixes = append(mixes, m)
			}
		}
		if len(mixes) == 0 {
			return nil, fmt.Errorf("--mix %q: the mixes are uniform, stream, zipf, big and all", name)
		}
		for _, m := range mixes {
			l := bench.BatchLoad{Mix: m, Rate: rate}
			if open && rate == 0 {
				l.Rate = m.Rate
			}
			loads = append(loads, l)
		}
	}
	return loads, nil
}

// runBatches runs kinds, the batch or the sale workload's, under each
// load into runs.
func runBatches(ctx context.Context, cl *localcluster.Cluster, rdb redis.UniversalClient, kinds []bench.BatchKind, r *bench.Report,
	runs *[]bench.BatchRun, loads []bench.BatchLoad) error {
	for _, l := range loads {
		step := time.Now()
		run := bench.BatchRun{Config: l.On(r.Batch)}
		var err error
		if run.Results, err = bench.RunBatches(ctx, cl, rdb, kinds, run.Config); err != nil {
			return err
		}
		*runs = append(*runs, run)
		log.Printf("batches, %s: %v", run.Title(), time.Since(step).Round(time.Millisecond))
	}
	return nil
}

func run(ctx context.Context, addrs string, backend localcluster.Backend, masters int, out string, quick bool, only string, uniform bool, loads []bench.BatchLoad) (err error) {
	command := "cd bench && go run ./cmd/benchreport"
	if addrs != "" {
		// localcluster adopts a running cluster named this way.
		if err := os.Setenv(localcluster.EnvClusterAddrs, addrs); err != nil {
			return err
		}
		command += " --addrs " + addrs
	}
	opts := []localcluster.Option{localcluster.WithLogf(log.Printf)}
	if backend != "" {
		opts = append(opts, localcluster.WithBackend(backend))
		command += " --backend " + string(backend)
	}
	if masters != 0 {
		opts = append(opts, localcluster.WithMasters(masters))
		command += fmt.Sprintf(" --masters %d", masters)
	}
	if quick {
		command += " --quick"
	}

	started := time.Now()
	cl, err := localcluster.Start(ctx, opts...)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, cl.Close()) }()
	machine, err := bench.DescribeMachine(ctx, cl)
	if err != nil {
		return err
	}
	log.Printf("machine: %s", machine)
	suite, err := bench.NewSuite(cl.ClientOptions)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, suite.Close()) }()
	rdb := cl.Client()
	defer func() { err = errors.Join(err, rdb.Close()) }()

	r := bench.Report{Machine: machine, Command: command, Started: started, Order: bench.DefaultOrders, Batch: bench.DefaultBatch}
	latencyPlans, costPlans, handoffSamples := bench.DefaultLatencyPlans, bench.DefaultCostPlans, 100
	if quick {
		latencyPlans, costPlans, handoffSamples = scaledLatency(latencyPlans), scaledCost(costPlans), 10
		r.Order.Rounds, r.Order.Slice = 1, time.Second
		r.Batch.Rounds, r.Batch.Slice = 1, time.Second
	}
	if only == "orders" {
		r.Order.UniformBaskets = uniform
		step := time.Now()
		if r.Handoff, err = bench.RunHandoff(ctx, suite.Handoff, handoffSamples); err != nil {
			return err
		}
		if r.Orders, err = bench.RunOrders(ctx, cl, rdb, suite.Orders, r.Order); err != nil {
			return err
		}
		log.Printf("hand-off and orders: %v", time.Since(step).Round(time.Millisecond))
		r.Took = time.Since(started)
		fmt.Println(r.OrdersMarkdown())
		return nil
	}
	if only == "batch" {
		// The loads that ran are printed even when a later one failed.
		err := runBatches(ctx, cl, rdb, suite.Batches, &r, &r.Batches, loads)
		if len(r.Batches) > 0 {
			fmt.Println(r.BatchMarkdown())
		}
		return err
	}
	if only == "scale" {
		res, err := bench.RunScale(ctx, cl, bench.ScaleLoads)
		fmt.Println(bench.ScaleMarkdown(res))
		return err
	}
	if only == "sale" {
		err := runBatches(ctx, cl, rdb, suite.Sales, &r, &r.Sales, bench.SaleLoads)
		if len(r.Sales) > 0 {
			fmt.Println(r.SaleMarkdown())
		}
		return err
	}

	if only == "floors" {
		if r.Latency, r.Cost, err = runFloors(ctx, cl, suite, latencyPlans, costPlans); err != nil {
			return err
		}
		r.Took = time.Since(started)
		fmt.Println(r.FloorsMarkdown())
		return printPhases(ctx, suite)
	}

	for _, plan := range latencyPlans {
		step := time.Now()
		res, err := bench.RunLatency(ctx, suite.Lockers, plan)
		if err != nil {
			return err
		}
		r.Latency = append(r.Latency, res...)
		log.Printf("latency, %d keys: %v", plan.Keys, time.Since(step).Round(time.Millisecond))
	}

	step := time.Now()
	if r.Handoff, err = bench.RunHandoff(ctx, suite.Handoff, handoffSamples); err != nil {
		return err
	}
	log.Printf("hand-off: %v", time.Since(step).Round(time.Millisecond))

	step = time.Now()
	if r.Orders, err = bench.RunOrders(ctx, cl, rdb, suite.Orders, r.Order); err != nil {
		return err
	}
	log.Printf("orders: %v", time.Since(step).Round(time.Millisecond))

	step = time.Now()
	if r.Promotions, err = bench.RunPromotions(ctx, cl, rdb, suite.Promotions, r.Order); err != nil {
		return err
	}
	log.Printf("promotions: %v", time.Since(step).Round(time.Millisecond))

	if err := runBatches(ctx, cl, rdb, suite.Batches, &r, &r.Batches, bench.FullBatchLoads); err != nil {
		return err
	}
	if err := runBatches(ctx, cl, rdb, suite.Sales, &r, &r.Sales, bench.SaleLoads); err != nil {
		return err
	}

	for _, plan := range costPlans {
		step := time.Now()
		res, err := bench.RunCost(ctx, cl, suite.Lockers, plan)
		if err != nil {
			return err
		}
		r.Cost = append(r.Cost, res...)
		log.Printf("cost, %d keys: %v", plan.Keys, time.Since(step).Round(time.Millisecond))
	}
	r.Took = time.Since(started)
	return write(r, out)
}

// runFloors runs the latency and the cost workloads of batchlock and the
// three floors, keys spread, at the sizes of the floor targets.
func runFloors(ctx context.Context, cl *localcluster.Cluster, suite *bench.Suite, latencyPlans []bench.LatencyPlan, costPlans []bench.CostPlan) ([]bench.LatencyResult, []bench.CostResult, error) {
	lockers := lockersNamed(suite, bench.NameBatchlock, bench.NameLockFloor, bench.NameFencedFloor, bench.NameFloor)
	var latency []bench.LatencyResult
	for _, plan := range latencyPlans {
		if slices.Contains(bench.TargetSizes, plan.Keys) {
			res, err := bench.RunLatency(ctx, lockers, plan)
			if err != nil {
				return nil, nil, err
			}
			latency = append(latency, res...)
		}
	}
	var cost []bench.CostResult
	for _, plan := range costPlans {
		if slices.Contains(bench.TargetSizes, plan.Keys) {
			res, err := bench.RunCost(ctx, cl, lockers, plan)
			if err != nil {
				return nil, nil, err
			}
			cost = append(cost, res...)
		}
	}
	return latency, cost, nil
}

// printPhases times the lock and the unlock of a batch apart, for
// batchlock and the lock floor, interleaved, and prints their medians:
// where batchlock's distance from the lock floor in latency lies.
func printPhases(ctx context.Context, suite *bench.Suite) error {
	lockers := lockersNamed(suite, bench.NameBatchlock, bench.NameLockFloor)
	fmt.Println("\n| N | library | lock p50 ms | unlock p50 ms |\n|---:|---|---:|---:|")
	for _, plan := range []struct{ keys, iterations int }{{100, 600}, {1000, 120}} {
		lock, unlock := make([][]time.Duration, len(lockers)), make([][]time.Duration, len(lockers))
		keys := make([][]string, len(lockers))
		for i, l := range lockers {
			keys[i] = bench.Keys("bench:"+l.Name(), plan.keys)
		}
		for round := range plan.iterations + 20 {
			for j := range lockers {
				i := (j + round) % len(lockers)
				start := time.Now()
				h, err := lockers[i].Lock(ctx, keys[i])
				if err != nil {
					return err
				}
				taken := time.Now()
				if err := h.Unlock(ctx); err != nil {
					return err
				}
				if round >= 20 { // the first rounds warm up
					lock[i] = append(lock[i], taken.Sub(start))
					unlock[i] = append(unlock[i], time.Since(taken))
				}
			}
		}
		for i, l := range lockers {
			fmt.Printf("| %d | %s | %s | %s |\n", plan.keys, l.Name(), bench.Millis(bench.Summarize(lock[i]).Median), bench.Millis(bench.Summarize(unlock[i]).Median))
		}
	}
	return nil
}

// lockersNamed are the suite's lockers of those names, in the suite's order.
func lockersNamed(suite *bench.Suite, names ...string) []bench.Locker {
	var out []bench.Locker
	for _, l := range suite.Lockers {
		if slices.Contains(names, l.Name()) {
			out = append(out, l)
		}
	}
	return out
}

func scaledLatency(plans []bench.LatencyPlan) []bench.LatencyPlan {
	out := make([]bench.LatencyPlan, len(plans))
	for i, p := range plans {
		p.Iterations = max(p.Iterations/10, 3)
		p.Batch = min(p.Batch, p.Iterations)
		out[i] = p
	}
	return out
}

func scaledCost(plans []bench.CostPlan) []bench.CostPlan {
	out := make([]bench.CostPlan, len(plans))
	for i, p := range plans {
		p.Iterations = max(p.Iterations/10, 1)
		out[i] = p
	}
	return out
}

func write(r bench.Report, dir string) error {
	const svgName = "bench-latency.svg"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var svg strings.Builder
	if err := r.LatencyPlot().WriteSVG(&svg); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, svgName), []byte(svg.String()), 0o644); err != nil {
		return err
	}
	md := filepath.Join(dir, "bench.md")
	if err := os.WriteFile(md, []byte(r.Markdown(svgName)), 0o644); err != nil {
		return err
	}
	fmt.Println(r.Markdown(svgName))
	log.Printf("wrote %s and %s", md, filepath.Join(dir, svgName))
	return nil
}
