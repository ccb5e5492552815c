package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/batchlock/batchlock/batchlock"
	"github.com/batchlock/batchlock/hashtag"
	"github.com/batchlock/batchlock/localcluster"
)

// ScaleLoad is one load of the scale workload (issue 60): baskets of 1 to
// MaxBasket of 2000 SKUs, locked with Lock (waiting) by processes that
// meet in Redis, their lock keys on Touch masters of the cluster whatever
// its size (0: spread over every master); with Hot, every basket has
// one of the first Hot SKUs too, where baskets queue and are woken.
type ScaleLoad struct {
	MaxBasket int
	Touch     int
	Hot       int
	// Batch, when set, takes the baskets with a batchlock Processor per
	// Client (a replica each) rather than Lock.
	Batch ScaleBatch
}

// ScaleBatch is how a batch load lays its lock keys out.
type ScaleBatch int

const (
	// ScaleByLock: no Processor, every basket locked with Lock.
	ScaleByLock ScaleBatch = iota
	// ScaleBatchSpread: the keys as Touch says, a tick's baskets over the
	// Touch masters.
	ScaleBatchSpread
	// ScaleBatchSpace: every lock key in one slot (one space, on the first
	// master), where the replicas meet in one script call.
	ScaleBatchSpace
	// ScaleBatchSpacePerMaster: a space on each of the Touch masters (a
	// warehouse each), every basket's keys in one of them.
	ScaleBatchSpacePerMaster
)

// ScaleLoads are the scale workload's loads: baskets on three masters,
// which every cluster size has, with and without hot SKUs, and spread;
// then the batch Processor on three masters spread, in one space, and in
// a space on each of three masters.
var ScaleLoads = []ScaleLoad{{MaxBasket: 40, Touch: 3}, {MaxBasket: 200, Touch: 3}, {MaxBasket: 40, Touch: 3, Hot: 2}, {MaxBasket: 40},
	{MaxBasket: 40, Touch: 3, Batch: ScaleBatchSpread}, {MaxBasket: 40, Touch: 1, Batch: ScaleBatchSpace},
	{MaxBasket: 40, Touch: 3, Batch: ScaleBatchSpacePerMaster}}

// String names the load, for the report.
func (l ScaleLoad) String() string {
	where := "spread over every master"
	if l.Touch > 0 {
		where = fmt.Sprintf("on %d masters", l.Touch)
	}
	hot := ""
	if l.Hot > 0 {
		hot = fmt.Sprintf(", one of %d hot SKUs in each", l.Hot)
	}
	switch l.Batch {
	case ScaleBatchSpread:
		hot += ", Processors"
	case ScaleBatchSpace:
		where, hot = "in one space", hot+", Processors"
	case ScaleBatchSpacePerMaster:
		where, hot = fmt.Sprintf("in a space on each of %d masters", l.Touch), hot+", Processors"
	}
	return fmt.Sprintf("1–%d SKUs %s%s", l.MaxBasket, where, hot)
}

// The scale workload's shape: baskets arrive scaleRate a second, each
// taken by one of scaleWorkers goroutines spread over scaleClients Clients
// (processes), held scaleHold and unlocked, for scaleSlice.
const (
	scaleSKUs    = 2000
	scaleRate    = 200
	scaleWorkers = 32
	scaleClients = 4
	scaleHold    = time.Millisecond
	scaleSlice   = 10 * time.Second
	// scaleTags is how many hash tags, each in a slot of its own, a
	// touched master's SKUs are spread over.
	scaleTags = 64
)

// ScaleResult is what one load cost on a cluster of Masters masters.
type ScaleResult struct {
	Load    ScaleLoad
	Masters int
	Baskets int
	Wait    Summary // from a basket's arrival to its lock
	// Touched is the masters a basket's keys were on, on average.
	Touched float64
	CPU     time.Duration // masters' process CPU, all masters together
	// Scripts and Spublish are the masters' script calls (and their time)
	// and wake-ups (SPUBLISH, called by the scripts), all together and on
	// the busiest master.
	Scripts, BusiestScripts   CommandStat
	Spublish, BusiestSpublish int64
	Failed                    int
}

// per is n per basket.
func (r ScaleResult) per(n int64) float64 { return float64(n) / float64(max(r.Baskets, 1)) }

// RunScale runs each load on cl, on Clients of its own, and returns what
// each cost.
func RunScale(ctx context.Context, cl *localcluster.Cluster, loads []ScaleLoad) ([]ScaleResult, error) {
	masters, err := cl.Masters(ctx)
	if err != nil {
		return nil, err
	}
	// Every Client, a process of its own, locks the same keys: one prefix
	// for all.
	clients := make([]*batchlock.Client, scaleClients)
	prefix := fmt.Sprintf("scale%d:", time.Now().UnixNano())
	for i := range clients {
		rdb := redis.NewClusterClient(cl.ClientOptions())
		defer rdb.Close()
		if clients[i], err = batchlock.New(rdb, batchlock.WithPrefix(prefix)); err != nil {
			return nil, err
		}
		defer clients[i].Close()
	}
	var out []ScaleResult
	for _, l := range loads {
		skus, err := scaleKeys(l, masters)
		if err != nil {
			return nil, err
		}
		res, err := runScaleLoad(ctx, cl, masters, clients, l, skus, prefix)
		if err != nil {
			return nil, err
		}
		out = append(out, res)
	}
	return out, nil
}

// scaleKeys are the load's SKUs' lock keys: plain, or each given the hash
// tag of one of the first scaleTags slots of one of the first l.Touch
// masters, SKU i on master i mod Touch.
func scaleKeys(l ScaleLoad, masters []localcluster.Node) ([]string, error) {
	keys := make([]string, scaleSKUs)
	if l.Touch == 0 {
		for i := range keys {
			keys[i] = fmt.Sprintf("sku:%d", i)
		}
		return keys, nil
	}
	if l.Touch > len(masters) {
		return nil, fmt.Errorf("baskets on %d masters of %d", l.Touch, len(masters))
	}
	for i := range keys {
		first := masters[i%l.Touch].Slots[0][0]
		tags := scaleTags
		if l.Batch == ScaleBatchSpace || l.Batch == ScaleBatchSpacePerMaster {
			tags = 1 // a space is one slot
		}
		keys[i] = fmt.Sprintf("{%s}sku:%d", hashtag.ForSlot(first+(i/l.Touch)%tags), i)
	}
	return keys, nil
}

// scaleBasket draws a basket of 1 to l.MaxBasket of skus, one of the
// first l.Hot in it when set; in a space per master, all of one space's
// (SKU i is in space i mod Touch).
func scaleBasket(rng *rand.Rand, l ScaleLoad, skus []string) []string {
	k := 1 + rng.IntN(l.MaxBasket)
	pick := func() int { return rng.IntN(len(skus)) }
	if l.Batch == ScaleBatchSpacePerMaster {
		space := rng.IntN(l.Touch)
		pick = func() int { return space + l.Touch*rng.IntN(len(skus)/l.Touch) }
	}
	var basket []string
	seen := map[int]bool{}
	if l.Hot > 0 {
		j := rng.IntN(l.Hot)
		seen[j] = true
		basket = append(basket, skus[j])
	}
	for len(basket) < k {
		if j := pick(); !seen[j] {
			seen[j] = true
			basket = append(basket, skus[j])
		}
	}
	return basket
}

// runScaleLoad runs one load for scaleSlice: baskets arrive scaleRate a
// second, each locked (waiting) by a free worker, held and unlocked.
func runScaleLoad(ctx context.Context, cl *localcluster.Cluster, masters []localcluster.Node, clients []*batchlock.Client, l ScaleLoad,
	skus []string, prefix string) (ScaleResult, error) {
	rng := rand.New(rand.NewPCG(uint64(l.MaxBasket), uint64(l.Touch*1000+l.Hot)))
	n := int(scaleRate * scaleSlice.Seconds())
	baskets := make([][]string, n)
	touched := 0
	for i := range baskets {
		baskets[i] = scaleBasket(rng, l, skus)
		on := map[string]bool{}
		for _, key := range baskets[i] {
			slot := hashtag.Slot(prefix + key)
			for _, m := range masters {
				if m.ServesSlot(slot) {
					on[m.Addr] = true
				}
			}
		}
		touched += len(on)
	}
	before, err := scaleCounters(ctx, cl, masters)
	if err != nil {
		return ScaleResult{}, err
	}
	run := runScaleLocks
	if l.Batch != ScaleByLock {
		run = runScaleBatches
	}
	waits, failed, err := run(ctx, clients, baskets)
	if err != nil {
		return ScaleResult{}, err
	}
	after, err := scaleCounters(ctx, cl, masters)
	if err != nil {
		return ScaleResult{}, err
	}
	r := ScaleResult{Load: l, Masters: len(masters), Baskets: len(waits), Wait: Summarize(waits), Touched: float64(touched) / float64(n), Failed: failed}
	for m := range masters {
		r.CPU += after[m].cpu - before[m].cpu
		scripts := sumOf(addStats(addStats(nil, after[m].commands, 1), before[m].commands, -1), scriptCommands)
		spublish := after[m].commands["spublish"].Calls - before[m].commands["spublish"].Calls
		r.Scripts.Calls += scripts.Calls
		r.Scripts.Usec += scripts.Usec
		r.Spublish += spublish
		if scripts.Calls > r.BusiestScripts.Calls {
			r.BusiestScripts = scripts
		}
		r.BusiestSpublish = max(r.BusiestSpublish, spublish)
	}
	return r, nil
}

// arrival is when basket i arrives, scaleRate a second from start.
func arrival(start time.Time, i int) time.Time {
	return start.Add(time.Duration(float64(i) / scaleRate * float64(time.Second)))
}

// runScaleLocks has scaleWorkers goroutines over clients lock each basket
// as it arrives (waiting), hold it and unlock it; it returns each locked
// basket's wait from its arrival, and how many failed.
func runScaleLocks(ctx context.Context, clients []*batchlock.Client, baskets [][]string) ([]time.Duration, int, error) {
	arrivals := make(chan int)
	var mu sync.Mutex
	var waits []time.Duration
	failed := 0
	start := time.Now()
	var wg sync.WaitGroup
	for w := range scaleWorkers {
		c := clients[w%len(clients)]
		wg.Go(func() {
			for i := range arrivals {
				lock, err := c.Lock(ctx, baskets[i], batchlock.WithTTL(10*time.Second))
				wait := time.Since(arrival(start, i))
				if err == nil {
					time.Sleep(scaleHold) // the work under the lock
					err = lock.Unlock(ctx)
				}
				mu.Lock()
				if err != nil {
					failed++
				} else {
					waits = append(waits, wait)
				}
				mu.Unlock()
			}
		})
	}
	for i := range baskets {
		time.Sleep(time.Until(arrival(start, i)))
		select {
		case arrivals <- i:
		case <-ctx.Done():
		}
	}
	close(arrivals)
	wg.Wait()
	return waits, failed, nil
}

// runScaleBatches has a Processor on each of clients (a replica each) take
// the baskets, basket i added to replica i mod len(clients) as it
// arrives; each tick is held scaleHold and let go. It returns each taken
// basket's wait from its arrival, and how many failed.
func runScaleBatches(ctx context.Context, clients []*batchlock.Client, baskets [][]string) ([]time.Duration, int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	processors := make([]*batchlock.Processor[int], len(clients))
	for i, c := range clients {
		p, err := batchlock.NewProcessor[int](c, 0)
		if err != nil {
			return nil, 0, err
		}
		processors[i] = p
	}
	var mu sync.Mutex
	var waits []time.Duration
	failed := 0
	var wg sync.WaitGroup
	for r, p := range processors {
		owed := len(baskets) / len(processors)
		if r < len(baskets)%len(processors) {
			owed++
		}
		wg.Go(func() {
			for done := 0; done < owed; {
				tick, err := p.Next(ctx)
				if err != nil {
					mu.Lock()
					failed += owed - done
					mu.Unlock()
					return
				}
				time.Sleep(scaleHold) // the work under the tick's locks
				uerr := tick.Done(ctx)
				mu.Lock()
				for _, b := range tick.Baskets {
					if uerr != nil {
						failed++
					} else {
						waits = append(waits, b.Waited)
					}
				}
				failed += len(tick.Failed)
				mu.Unlock()
				done += len(tick.Baskets) + len(tick.Failed)
			}
		})
	}
	var addErr error
	start := time.Now()
	for i := range baskets {
		time.Sleep(time.Until(arrival(start, i)))
		// Add fails only on a bad basket or a closed Processor: the load
		// is broken, and the replicas waiting for it are stopped.
		if addErr = processors[i%len(processors)].Add(i, batchlock.Basket{Keys: baskets[i]}); addErr != nil {
			cancel()
			break
		}
	}
	wg.Wait()
	for _, p := range processors {
		_, _ = p.Close(ctx)
	}
	return waits, failed, addErr
}

// masterCounters are one master's process CPU and INFO commandstats.
type masterCounters struct {
	cpu      time.Duration
	commands map[string]CommandStat
}

// scaleCounters reads every master's counters.
func scaleCounters(ctx context.Context, cl *localcluster.Cluster, masters []localcluster.Node) ([]masterCounters, error) {
	out := make([]masterCounters, len(masters))
	for i, m := range masters {
		var err error
		if out[i].cpu, err = masterCPU(ctx, cl, m.Addr); err != nil {
			return nil, err
		}
		if out[i].commands, err = mastersCommandStats(ctx, cl, masters[i:i+1]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// ScaleMarkdown is the scale workload's table.
func ScaleMarkdown(results []ScaleResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Baskets arriving %d a second for %v, each locked with `Lock` (waiting) by one of %d goroutines over %d Clients, held %v, unlocked.\n\n",
		scaleRate, scaleSlice, scaleWorkers, scaleClients, scaleHold)
	b.WriteString("| masters | baskets | masters touched | wait p50 / p99 ms | masters' CPU per basket | script µs per basket | script calls per basket (busiest master) | SPUBLISH per basket (busiest master) | failed |\n")
	b.WriteString("|---:|---|---:|---|---:|---:|---|---|---:|\n")
	for _, r := range results {
		fmt.Fprintf(&b, "| %d | %s | %.2f | %s / %s | %d µs | %.0f | %.2f (%.2f) | %.3f (%.3f) | %d |\n", r.Masters, r.Load, r.Touched,
			Millis(r.Wait.Median), Millis(r.Wait.P99), int64(r.per(r.CPU.Microseconds())), r.per(r.Scripts.Usec),
			r.per(r.Scripts.Calls), r.per(r.BusiestScripts.Calls), r.per(r.Spublish), r.per(r.BusiestSpublish), r.Failed)
	}
	return b.String()
}
