package bench

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/batchlock/batchlock/hashtag"
)

// Report is one run of every workload.
type Report struct {
	Machine Machine
	Command string
	Started time.Time
	Took    time.Duration

	Latency []LatencyResult
	Handoff []HandoffResult
	Orders  []OrderResult
	Order   OrderConfig
	// Promotions is the shared-keys comparison.
	Promotions []OrderResult
	Cost       []CostResult
	// Batches are the batch workload's runs, one per load, each of Batch's
	// shape.
	Batches []BatchRun
	Batch   BatchConfig
	// Sales are the sale workload's runs (SaleLoads), of Batch's shape.
	Sales []BatchRun
}

// handoffLabels say how each waiter waits.
var handoffLabels = map[string]string{
	NameBatchlock:     "batchlock (pub/sub wake-up)",
	NameBatchlockPoll: "batchlock, polling (WithoutPubSub)",
	NameRedsyncSeq:    "redsync, default retry (32 tries, 50–250 ms apart)",
	NameRedislockSeq:  fmt.Sprintf("redislock, linear backoff %v (its documented example)", RedislockRetry),
}

func (r Report) latency(name string, keys int) (Summary, bool) {
	for _, l := range r.Latency {
		if l.Library == name && l.Keys == keys {
			return Summarize(l.Samples), true
		}
	}
	return Summary{}, false
}

// floorsOf are the lock floor, the fenced floor and the floor with their
// keys laid out as lib's: spread over the slots for batchlock, in one slot
// for batchlock in one slot.
func floorsOf(lib string) (lock, fenced, floor string) {
	if lib == NameOneSlot {
		return NameLockFloorOneSlot, NameFencedFloorOneSlot, NameFloorOneSlot
	}
	return NameLockFloor, NameFencedFloor, NameFloor
}

// baseOf is the batchlock a library's row compares with: batchlock in one
// slot for the floors in one slot, batchlock otherwise.
func baseOf(lib string) string {
	if strings.HasSuffix(lib, OneSlotSuffix) {
		return NameOneSlot
	}
	return NameBatchlock
}

// latencyMedians are the median latencies at n keys of lib (batchlock, or
// batchlock in one slot) and of its lock floor, fenced floor and floor; 0
// where one was not measured.
func (r Report) latencyMedians(lib string, n int) (b, lock, fenced, floor time.Duration) {
	lockName, fencedName, floorName := floorsOf(lib)
	median := func(name string) time.Duration {
		s, _ := r.latency(name, n)
		return s.Median
	}
	return median(lib), median(lockName), median(fencedName), median(floorName)
}

// times is v/base as "1.23x", or "—" where either is missing.
func times(v, base float64) string {
	if v <= 0 || base <= 0 {
		return "—"
	}
	return fmt.Sprintf("%.2fx", v/base)
}

// millisOrDash is Millis(d), or "—" for no figure.
func millisOrDash(d time.Duration) string {
	if d <= 0 {
		return "—"
	}
	return Millis(d)
}

// layout says how the keys of batchlock's row are laid out.
func layout(lib string) string {
	if lib == NameOneSlot {
		return "in one slot"
	}
	return "spread over the slots"
}

// notRun says which libraries were not run at a size (DefaultLatencyPlans'
// Skip), and what one sample would have taken.
func (r Report) notRun(p func(string, ...any)) {
	sizes := r.sizes()
	for i, n := range sizes {
		var missing []string
		for _, lib := range r.libraries() {
			if _, ok := r.latency(lib, n); ok {
				continue
			}
			what := Label(lib)
			for j := i - 1; j >= 0; j-- {
				if prev, ok := r.latency(lib, sizes[j]); ok {
					what += fmt.Sprintf(" (%s ms at N=%d, so about %s ms a sample)", Millis(prev.Median), sizes[j],
						Millis(prev.Median*time.Duration(n)/time.Duration(sizes[j])))
					break
				}
			}
			missing = append(missing, what)
		}
		if len(missing) > 0 {
			p("\nNot run at N=%d, to keep the run short: %s. Their time grows with N; their ratios at smaller N stand for them.\n", n, strings.Join(missing, "; "))
		}
	}
}

// micros formats µs with a decimal below 100, or "—" for no figure.
func micros(v float64) string {
	switch {
	case v <= 0:
		return "—"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.1f", v)
	}
}

// phaseMedians are the medians of a library's hand-off phases.
type phaseMedians struct {
	HandoffPhases
	samples int
}

// handoffPhases are the medians of name's hand-off phases; false where it
// has none.
func (r Report) handoffPhases(name string) (phaseMedians, bool) {
	for _, h := range r.Handoff {
		if h.Library == name {
			return h.phaseMedians()
		}
	}
	return phaseMedians{}, false
}

// phaseMedians are the medians of h's phases; false where it has none.
func (h HandoffResult) phaseMedians() (phaseMedians, bool) {
	if len(h.Phases) == 0 {
		return phaseMedians{}, false
	}
	median := func(of func(HandoffPhases) time.Duration) time.Duration {
		var d []time.Duration
		for _, ph := range h.Phases {
			d = append(d, of(ph))
		}
		return Summarize(d).Median
	}
	return phaseMedians{samples: len(h.Phases), HandoffPhases: HandoffPhases{
		Release: median(func(ph HandoffPhases) time.Duration { return ph.Release }),
		Notice:  median(func(ph HandoffPhases) time.Duration { return ph.Notice }),
		Resume:  median(func(ph HandoffPhases) time.Duration { return ph.Resume }),
	}}, true
}

func (r Report) handoff(name string) Summary {
	for _, h := range r.Handoff {
		if h.Library == name {
			return Summarize(h.Samples)
		}
	}
	return Summary{}
}

// promotions writes the shared-keys comparison.
func (r Report) promotions(p func(string, ...any)) {
	if len(r.Promotions) == 0 {
		return
	}
	o := r.Order
	p("\n## Shared keys: hot promotions\n\n")
	p("The same order workload, and %d hot promotions: %.0f%% of the orders read one of them, and write only stock. ", o.Promos, 100*o.PromoShare)
	p("batchlock locks an order's promotion shared, in the same call as its stock (`WithShared`), or exclusively with it, as a lock without shared keys must. ")
	p("The two take turns, %d of %v each per number of workers.\n\n", o.Rounds, o.Slice)
	p("| workers | promotions | orders | orders/s | vs exclusive | lock wait p50 / p99 / max ms | masters' CPU per order | gave up | oversold units |\n|---:|---|---:|---:|---:|---|---:|---:|---:|\n")
	for _, w := range o.PromoWorkers {
		excl := find(r.Promotions, NameExclusivePromos, w)
		for _, res := range r.Promotions {
			if res.Workers != w {
				continue
			}
			vs := "—"
			if res.Library != NameExclusivePromos && excl.PerSecond() > 0 {
				vs = fmt.Sprintf("%.2fx", res.PerSecond()/excl.PerSecond())
			}
			p("| %d | %s | %d | %.0f | %s | %s / %s / %s | %d µs | %d | %d |\n", w, Label(res.Library), res.Orders, res.PerSecond(), vs,
				Millis(res.LockWait.Median), Millis(res.LockWait.P99), Millis(res.LockWait.Max), res.CPUPerOrder().Microseconds(), res.GaveUp, res.Oversold)
		}
	}
}

// contention writes the contention workload's section, against the
// fenced-floor processor.
func (r Report) contention(p func(string, ...any)) {
	o := r.Order
	p("\n## Contention: order processing\n\n")
	mix := "small baskets most likely"
	if o.UniformBaskets {
		mix = "every size alike"
	}
	p("Workers process the orders of package orders: baskets of 1–%d distinct SKUs (of %d, spread over all masters, %s), one unit each: lock the basket, read the stock of every SKU, write each one less, unlock. ", o.MaxBasket, o.SKUs, mix)
	p("Reads and writes are separate commands, so only the lock prevents overselling; at the end every SKU's stock is checked against the units sold. ")
	p("The ceiling does the same with a `sync.Mutex` per SKU in this process, taken in sorted order: ordered locking at no cost, the most a lock that takes keys in a global order can give; its stock is on the same cluster. ")
	p("The reference is the **fenced-floor processor**: the ceiling's mutexes, and under them the fenced floor's Redis work per basket (one script call per master visited that adds each slot's number of keys to its counter with `INCRBY` and writes every key with its token and `PX ttl`, then one that deletes them), the least a lock with fencing tokens per slot must cost the masters, with waiting that costs them nothing. ")
	p("Beside it the **lock-floor processor**: the same mutexes over the lock floor's Redis work per basket (owned values set `NX`, an owner-checked release), the least a real lock with tokens costs the masters. ")
	p("batchlock runs three ways: one Client for all the workers, 4 Clients, and 16 Clients, each on a cluster client of its own, as processes would have them. ")
	p("Each lock goes to the Client with the fewest locks in flight, so that the workers share the Clients evenly: at 16 workers 4 each on 4 Clients, and one each on 16, the cross-process case; with fewer workers than Clients they do not run. ")
	p("The redsync-based processor locks the basket's SKUs one by one in sorted order (no deadlock), with redsync's default retry. ")
	p("With each number of workers, each processor gets %d turns of %v, alternating. *Lock wait* is the time from asking for the basket's lock to holding it.\n\n", o.Rounds, o.Slice)
	p("*Script calls per order* are the script calls (`EVALSHA` and `EVAL`, `INFO commandstats`) the masters served over a processor's turns, less the orders' own stock writes (one script call per line written): the lock's own, shown where the lock sends scripts (redsync's are its releases, one per SKU). ")
	p("*By kind* is batchlock's own count of what its Clients sent (`Client.Stats`, every attempt counted): acquires / releases / extends per order.\n\n")
	p("| workers | processor | orders | orders/s | of the fenced-floor processor's | lock wait p50 / p99 / max ms | p99 vs the fenced-floor processor's | masters' CPU per order | script calls per order | by kind: acquires / releases / extends per order | gave up | oversold units |\n")
	p("|---:|---|---:|---:|---:|---|---|---:|---:|---|---:|---:|\n")
	for _, w := range r.workerCounts() {
		ref := r.orders(NameFencedFloorProcessor, w)
		for _, res := range r.Orders {
			if res.Workers != w {
				continue
			}
			share, vs := "—", "—"
			if res.Library != NameFencedFloorProcessor && ref.Orders > 0 {
				share = fmt.Sprintf("%.0f%%", 100*res.PerSecond()/ref.PerSecond())
				vs = Ratio(res.LockWait.P99, ref.LockWait.P99)
			}
			scripts, byKind := "—", "—"
			if res.SendsScripts {
				scripts = fmt.Sprintf("%.1f", res.LockScriptsPerOrder())
			}
			if res.Sent != nil {
				acquires, releases, extends := res.SentPerOrder()
				byKind = fmt.Sprintf("%.2f / %.2f / %.2f", acquires, releases, extends)
			}
			p("| %d | %s | %d | %.0f | %s | %s / %s / %s | %s | %d µs | %s | %s | %d | %d |\n", w, Label(res.Library), res.Orders, res.PerSecond(), share,
				Millis(res.LockWait.Median), Millis(res.LockWait.P99), Millis(res.LockWait.Max), vs, res.CPUPerOrder().Microseconds(), scripts, byKind, res.GaveUp, res.Oversold)
		}
	}
	ref, oc := r.orders(NameFencedFloorProcessor, contentionWorkers), r.orders(NameCeiling, contentionWorkers)
	ob, o16 := r.orders(NameBatchlock, contentionWorkers), r.orders(NameBatchlock16Clients, contentionWorkers)
	if ob.CPUPerOrder() <= 0 || ref.CPUPerOrder() <= 0 {
		return
	}
	busy := func(res OrderResult) float64 { return 100 * float64(res.MastersCPU) / float64(res.Elapsed) }
	p("\n*Masters' CPU per order* is the masters' process CPU (`INFO cpu`) over a processor's turns, per order: the ceiling's is the orders' own stock work, the fenced-floor processor's adds the least a fenced lock costs, batchlock's its own lock's. ")
	p("With %d workers batchlock's orders cost the masters %d µs each through one Client", contentionWorkers, ob.CPUPerOrder().Microseconds())
	if o16.CPUPerOrder() > 0 {
		p(" and %d µs through 16", o16.CPUPerOrder().Microseconds())
	}
	p(", against the fenced-floor processor's %d µs (the ceiling's %d µs), and the masters were busy %.0f%% of the time against %.0f%% (of one core; client and six servers share %d). ",
		ref.CPUPerOrder().Microseconds(), oc.CPUPerOrder().Microseconds(), busy(ob), busy(ref), r.Machine.Cores)
	p("Where the servers' CPU is the limit, throughput goes as its inverse: %d µs against %d µs allows one Client %.0f%% of the fenced-floor processor's orders/s.\n",
		ob.CPUPerOrder().Microseconds(), ref.CPUPerOrder().Microseconds(), 100*float64(ref.CPUPerOrder())/float64(ob.CPUPerOrder()))
	if o16.Orders == 0 {
		return
	}
	p("\nWhere the masters' CPU per order goes, with %d workers, from `INFO commandstats` over the same turns: the script calls' own time (the lock's and the stock writes'), ", contentionWorkers)
	p("connections and pub/sub (`%s`), every other command, and the process CPU outside any command (sockets, accepting connections, replication). ", strings.Join(connectionCommands, "`, `"))
	p("Redis times commands by the wall clock, so a command descheduled midway counts more than its CPU and *outside* less.\n\n")
	p("| processor | masters' CPU per order | scripts µs (calls) | connections and pub/sub µs (calls) | other commands µs | outside commands µs |\n|---|---:|---:|---:|---:|---:|\n")
	for _, res := range []OrderResult{ref, ob, r.orders(NameBatchlock4Clients, contentionWorkers), o16} {
		if res.Orders == 0 {
			continue
		}
		c := res.CPUSplitPerOrder()
		p("| %s | %d µs | %d (%.2f) | %d (%.2f) | %d | %d |\n", Label(res.Library), res.CPUPerOrder().Microseconds(),
			c.Scripts.Microseconds(), c.ScriptCalls, c.Connections.Microseconds(), c.ConnectionCalls, c.Other.Microseconds(), c.Outside.Microseconds())
	}
	p("\nWhat 16 Clients cost beyond one, per order: %s.\n", cpuGap(o16.CPUSplitPerOrder(), ob.CPUSplitPerOrder()))
}

// cpuGap says how split exceeds base, part by part.
func cpuGap(split, base CPUSplit) string {
	d := func(a, b time.Duration) string { return fmt.Sprintf("%+d µs", (a - b).Microseconds()) }
	return fmt.Sprintf("scripts %s (%+.2f calls), connections and pub/sub %s (%+.2f calls), other commands %s, outside commands %s",
		d(split.Scripts, base.Scripts), split.ScriptCalls-base.ScriptCalls, d(split.Connections, base.Connections), split.ConnectionCalls-base.ConnectionCalls,
		d(split.Other, base.Other), d(split.Outside, base.Outside))
}

// find is the result of a library with a number of workers among results.
func find(results []OrderResult, name string, workers int) OrderResult {
	for _, o := range results {
		if o.Library == name && o.Workers == workers {
			return o
		}
	}
	return OrderResult{Library: name, Workers: workers}
}

// orders is the result of a library with a number of workers.
func (r Report) orders(name string, workers int) OrderResult { return find(r.Orders, name, workers) }

// workerCounts in the order they were run.
func (r Report) workerCounts() []int {
	var out []int
	for _, o := range r.Orders {
		if !slices.Contains(out, o.Workers) {
			out = append(out, o.Workers)
		}
	}
	return out
}

// contentionWorkers is the number of workers the contention targets are
// set at.
const contentionWorkers = 16

// sizes and libraries in the order they were run.
func (r Report) sizes() []int {
	var out []int
	for _, l := range r.Latency {
		if !slices.Contains(out, l.Keys) {
			out = append(out, l.Keys)
		}
	}
	return out
}

func (r Report) libraries() []string {
	var out []string
	for _, l := range r.Latency {
		if !slices.Contains(out, l.Library) {
			out = append(out, l.Library)
		}
	}
	return out
}

// Target is one goal of the issue, and whether this run reached it.
type Target struct {
	Goal    string
	Reached bool
	Found   string
}

// FloorTarget is how far batchlock may be from the fenced floor, in p50
// latency and in masters' CPU per lock+unlock, at TargetSizes.
const FloorTarget = 1.25

// TargetSizes are the numbers of keys the floor targets are set at.
var TargetSizes = []int{1, 100, 1000}

// LockFloorTarget is how far batchlock may be from the lock floor, the
// least a real lock does, in p50 latency and in masters' CPU per
// lock+unlock, at TargetSizes.
const LockFloorTarget = 1.15

// floorTargets are batchlock's targets against the floor named name (said
// as said), within bound, in p50 latency then in masters' CPU per
// lock+unlock at TargetSizes; each also says the plain floor's figure.
func (r Report) floorTargets(name, said string, bound float64) []Target {
	var ts []Target
	for _, n := range TargetSizes {
		t := Target{Goal: fmt.Sprintf("batchlock within %.2fx of %s at N=%d in p50 latency", bound, said, n), Found: "not measured"}
		b, _ := r.latency(NameBatchlock, n)
		ref, _ := r.latency(name, n)
		floor, _ := r.latency(NameFloor, n)
		if b.Median > 0 && ref.Median > 0 {
			x := float64(b.Median) / float64(ref.Median)
			t.Reached = x <= bound
			t.Found = fmt.Sprintf("%s ms against %s's %s ms: %.2fx", Millis(b.Median), said, Millis(ref.Median), x)
			if floor.Median > 0 {
				t.Found += fmt.Sprintf(" (the floor's %s ms: %.2fx)", Millis(floor.Median), float64(b.Median)/float64(floor.Median))
			}
		}
		ts = append(ts, t)
	}
	for _, n := range TargetSizes {
		t := Target{Goal: fmt.Sprintf("batchlock within %.2fx of %s at N=%d in masters' CPU per lock+unlock", bound, said, n), Found: "not measured"}
		b, okB := r.cost(NameBatchlock, n)
		ref, okR := r.cost(name, n)
		_, bcpu := b.PerLock()
		_, rcpu := ref.PerLock()
		if okB && okR && bcpu > 0 && rcpu > 0 {
			x := bcpu / rcpu
			t.Reached = x <= bound
			t.Found = fmt.Sprintf("%.0f µs against %s's %.0f µs: %.2fx", bcpu, said, rcpu, x)
			if floor, ok := r.cost(NameFloor, n); ok {
				if _, cpu := floor.PerLock(); cpu > 0 {
					t.Found += fmt.Sprintf(" (the floor's %.0f µs: %.2fx)", cpu, bcpu/cpu)
				}
			}
		}
		ts = append(ts, t)
	}
	return ts
}

// Targets checks the run against the goals set for batchlock.
func (r Report) Targets() []Target {
	ts := r.floorTargets(NameFencedFloor, "the fenced floor", FloorTarget)
	ts = append(ts, r.floorTargets(NameLockFloor, "the lock floor", LockFloorTarget)...)

	bl100, _ := r.latency(NameBatchlock, 100)
	var found []string
	reached := bl100.Median > 0
	for _, peer := range []string{NameRedsyncSeq, NameRedislockSeq, NameRedsyncPar, NameRedislockPar} {
		s, _ := r.latency(peer, 100)
		x := float64(s.Median) / float64(bl100.Median)
		want := 12.0
		if strings.HasSuffix(peer, "-par") {
			want = 4
		}
		reached = reached && x >= want
		found = append(found, fmt.Sprintf("%s %.1fx", Label(peer), x))
	}
	ts = append(ts, Target{
		Goal:    "100 keys: at least 12x faster than sequential redsync and redislock, at least 4x faster than their goroutine-per-key use",
		Reached: reached,
		Found:   "batchlock's median is faster than: " + strings.Join(found, ", "),
	})

	h, hr := r.handoff(NameBatchlock), r.handoff(NameRedsyncSeq)
	x := float64(hr.Median) / float64(h.Median)
	ts = append(ts, Target{
		Goal:    "hand-off median under 0.5 ms, at least 20x quicker than redsync's default retry",
		Reached: h.Median > 0 && h.Median < time.Millisecond/2 && x >= 20,
		Found:   fmt.Sprintf("%s ms, redsync %s ms: %.1fx quicker", Millis(h.Median), Millis(hr.Median), x),
	})
	if ph, ok := r.handoffPhases(NameBatchlock); ok && h.Median >= time.Millisecond/2 {
		ts[len(ts)-1].Found += fmt.Sprintf("; of it, medians: the hand-off reaches the waiter after %s ms (the holder's release call returns after %s ms), the waiter's continuing acquire takes %s ms (see Hand-off)",
			Millis(ph.Notice), Millis(ph.Release), Millis(ph.Resume))
	}

	ref := r.orders(NameFencedFloorProcessor, contentionWorkers)
	ob := r.orders(NameBatchlock, contentionWorkers)
	t := Target{Goal: fmt.Sprintf("contention, one Client, %d workers: at least 85%% of the fenced-floor processor's orders/s, masters' CPU per order at most 1.25x its, p99 lock wait at most 1.5x its", contentionWorkers),
		Found: "not measured"}
	if c, ok := compareOrders(ob, ref); ok {
		t.Reached = c.share >= 0.85 && c.cpu <= 1.25 && c.p99 <= 1.5
		t.Found = c.String() + fmt.Sprintf("; p99 lock wait %s ms against %s ms: %.2fx", Millis(ob.LockWait.P99), Millis(ref.LockWait.P99), c.p99)
	}
	ts = append(ts, t)
	t = Target{Goal: fmt.Sprintf("contention, %d Clients of one worker each: at least 65%% of the fenced-floor processor's orders/s, masters' CPU per order at most 1.6x its", contentionWorkers),
		Found: "not measured"}
	o16 := r.orders(NameBatchlock16Clients, contentionWorkers)
	if c, ok := compareOrders(o16, ref); ok {
		t.Reached = c.share >= 0.65 && c.cpu <= 1.6
		t.Found = c.String()
		if !t.Reached && ob.Orders > 0 {
			t.Found += "; what 16 Clients cost beyond one, per order: " + cpuGap(o16.CPUSplitPerOrder(), ob.CPUSplitPerOrder()) + " (see Contention)"
		}
	}
	ts = append(ts, t)

	or := r.orders(NameRedsyncSeq, contentionWorkers)
	t = Target{Goal: fmt.Sprintf("contention, one Client, %d workers: at least 5x the redsync-based processor's orders/s", contentionWorkers), Found: "not measured"}
	if ob.Orders > 0 && or.Orders > 0 {
		x = ob.PerSecond() / or.PerSecond()
		t.Reached = x >= 5
		t.Found = fmt.Sprintf("%.0f orders/s against %.0f: %.1fx", ob.PerSecond(), or.PerSecond(), x)
	}
	ts = append(ts, t)
	return append(append(append(ts, r.batchTargets()...), r.saleTargets()...), r.oversoldTarget())
}

// ordersComparison is how a processor's orders compare with the
// reference's: its share of the reference's orders/s, and its ratios to the
// reference's masters' CPU per order and p99 lock wait.
type ordersComparison struct {
	res, ref        OrderResult
	share, cpu, p99 float64
}

// compareOrders compares res with ref; false where either processed no
// orders, or its masters' CPU was not read.
func compareOrders(res, ref OrderResult) (ordersComparison, bool) {
	if res.Orders == 0 || ref.Orders == 0 || res.MastersCPU == 0 || ref.MastersCPU == 0 {
		return ordersComparison{}, false
	}
	return ordersComparison{res: res, ref: ref,
		share: res.PerSecond() / ref.PerSecond(),
		cpu:   float64(res.CPUPerOrder()) / float64(ref.CPUPerOrder()),
		p99:   float64(res.LockWait.P99) / float64(ref.LockWait.P99),
	}, true
}

// String gives the orders/s and the masters' CPU per order of both, and the
// ratios.
func (c ordersComparison) String() string {
	return fmt.Sprintf("%.0f orders/s against the fenced-floor processor's %.0f: %.0f%%; masters' CPU per order %d µs against %d µs: %.2fx",
		c.res.PerSecond(), c.ref.PerSecond(), 100*c.share, c.res.CPUPerOrder().Microseconds(), c.ref.CPUPerOrder().Microseconds(), c.cpu)
}

// oversoldTarget is the target of no oversell by any processor of the
// contention and shared-keys workloads and of every batch run. An audit
// covers all the levels of a processor in its workload (a batch run has
// stock of its own, and an audit of its own), so those results all carry
// the same count.
func (r Report) oversoldTarget() Target {
	t := Target{Goal: "zero oversold units, every processor of the contention, shared-keys, batch and sale workloads", Found: "not measured"}
	var audited, oversold []string
	audit := func(res OrderResult, where string) {
		name := Label(res.Library) + where
		if slices.Contains(audited, name) {
			return
		}
		audited = append(audited, name)
		if res.Oversold > 0 {
			oversold = append(oversold, fmt.Sprintf("%s %d", name, res.Oversold))
		}
	}
	for _, res := range slices.Concat(r.Orders, r.Promotions) {
		audit(res, "")
	}
	for _, run := range slices.Concat(r.Batches, r.Sales) {
		for _, b := range run.Results {
			audit(b.OrderResult, " ("+run.Title()+")")
		}
	}
	if len(audited) == 0 {
		return t
	}
	t.Reached = len(oversold) == 0
	t.Found = fmt.Sprintf("none, %d processors audited", len(audited))
	if !t.Reached {
		t.Found = "oversold units: " + strings.Join(oversold, ", ")
	}
	return t
}

// LatencyPlot is the median latency of every library against the number of
// keys, goroutine-per-key modes dashed.
func (r Report) LatencyPlot() Plot {
	p := Plot{
		Title:  "Lock and unlock N keys on Redis Cluster (median)",
		XLabel: "keys per lock (N)",
		YLabel: "median latency (ms)",
	}
	for _, lib := range r.libraries() {
		s := Series{Name: plotLabel(lib), Dashed: strings.HasSuffix(lib, "-par")}
		for _, n := range r.sizes() {
			if sum, ok := r.latency(lib, n); ok {
				s.Points = append(s.Points, Point{X: float64(n), Y: float64(sum.Median) / float64(time.Millisecond)})
			}
		}
		p.Series = append(p.Series, s)
	}
	return p
}

// plotLabel is Label short enough for the plot's legend: the floors
// without their description, "one slot" for "all keys in one slot".
func plotLabel(lib string) string {
	l, _, _ := strings.Cut(Label(lib), ":")
	return strings.Replace(l, ", all keys in one slot", ", one slot", 1)
}

// Markdown writes the report as docs/bench.md.
func (r Report) Markdown(svgName string) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }

	p("# Benchmarks: batchlock against redsync and redislock\n\n")
	p("Generated by `%s` on %s (the run took %v).\n\n", r.Command, r.Started.UTC().Format("2006-01-02 15:04 UTC"), r.Took.Round(time.Second))
	p("batchlock at commit %s. ", r.Machine.Library)
	p("Machine: %s. Client and Redis share the cores, so these are loopback numbers: on a network every round trip costs more, and the libraries that make more round trips fall further behind.\n\n", r.Machine)

	p("## Targets\n\n")
	for _, t := range r.Targets() {
		mark := "not reached"
		if t.Reached {
			mark = "reached"
		}
		p("- **%s** — %s: %s.\n", mark, t.Goal, t.Found)
	}

	p("\n## Lock and unlock N keys\n\n")
	p("Median latency of taking N keys spread over all masters and releasing them, in ms, and how each library compares with batchlock. ")
	p("batchlock takes the batch with one `Lock` (`WithTTL`) and one `Unlock`; the peers take one lock per key, in sorted order one after the other, or with one goroutine per key (errgroup), and release the same way. ")
	p("batchlock's rows compare it with three references: the **lock floor**, the least a real lock does (per slot one `INCR` of its counter, `SET NX PX` of a value naming the owner per key, what the call set deleted again on a held key; a release that reads each key and deletes it where the owner matches), the **fenced floor**, the least a lock whose fencing tokens move with their slot must do (one script call per master that, for each slot of the batch, adds the slot's number of keys to a counter kept in that slot with `INCRBY` and writes each key with its token and `PX ttl`; then one that deletes the keys), and the **floor**, the least any lock with per-key leases must do (the same without the counters: `SET key v PX ttl`, then `DEL`). ")
	p("The rows *all keys in one slot* give every key one hash tag: batchlock then makes one call per 512 keys and the fenced floor one `INCRBY`; the floors in one slot compare with batchlock in one slot.\n\n")
	sizes := r.sizes()
	p("| library |")
	for _, n := range sizes {
		p(" N=%d |", n)
	}
	p("\n|---|")
	for range sizes {
		p("---|")
	}
	p("\n")
	for _, lib := range r.libraries() {
		p("| %s |", Label(lib))
		for _, n := range sizes {
			s, ok := r.latency(lib, n)
			switch {
			case !ok:
				p(" not run |")
			case lib == NameBatchlock || lib == NameOneSlot:
				b, lock, fenced, floor := r.latencyMedians(lib, n)
				p(" %s ms (%s the lock floor, %s the fenced floor, %s the floor) |", Millis(s.Median),
					times(float64(b), float64(lock)), times(float64(b), float64(fenced)), times(float64(b), float64(floor)))
			default:
				base, _ := r.latency(baseOf(lib), n)
				p(" %s ms (%s) |", Millis(s.Median), Ratio(s.Median, base.Median))
			}
		}
		p("\n")
	}
	r.notRun(p)
	p("\n### batchlock against the floors\n\n")
	p("Median latency (p50) of lock+unlock of N keys, and batchlock's ratio to each floor with the keys laid out alike; the targets are set on the fenced floor and the lock floor, keys spread.\n\n")
	p("| N | keys | p50 ms: batchlock / lock floor / fenced floor / floor | vs the lock floor | vs the fenced floor | vs the floor |\n|---:|---|---|---:|---:|---:|\n")
	for _, n := range sizes {
		for _, lib := range []string{NameBatchlock, NameOneSlot} {
			b, lock, fenced, floor := r.latencyMedians(lib, n)
			if b == 0 && lock == 0 && fenced == 0 && floor == 0 {
				continue
			}
			p("| %d | %s | %s / %s / %s / %s | %s | %s | %s |\n", n, layout(lib), millisOrDash(b), millisOrDash(lock), millisOrDash(fenced), millisOrDash(floor),
				times(float64(b), float64(lock)), times(float64(b), float64(fenced)), times(float64(b), float64(floor)))
		}
	}
	p("\n![median latency against N, log-log](%s)\n\n", svgName)
	p("Raw figures (p99 by nearest rank: with few samples it is their maximum):\n\n")
	p("| library | N | samples | median ms | p99 ms |\n|---|---:|---:|---:|---:|\n")
	for _, n := range sizes {
		for _, lib := range r.libraries() {
			if s, ok := r.latency(lib, n); ok {
				p("| %s | %d | %d | %s | %s |\n", Label(lib), n, s.Samples, Millis(s.Median), Millis(s.P99))
			}
		}
	}

	p("\n## Hand-off\n\n")
	p("Delay from the moment the holder starts its unlock to the moment a waiter, blocked on the same key, returns holding it. The holder keeps the key %v–%v at random, so that the release falls anywhere in a polling waiter's cycle.\n\n", minHold, maxHold)
	p("| waiter | samples | median ms | p99 ms | vs batchlock |\n|---|---:|---:|---:|---|\n")
	base := r.handoff(NameBatchlock)
	for _, h := range r.Handoff {
		s := Summarize(h.Samples)
		vs := "—"
		if h.Library != NameBatchlock {
			vs = Ratio(s.Median, base.Median)
		}
		p("| %s | %d | %s | %s | %s |\n", handoffLabels[h.Library], s.Samples, Millis(s.Median), Millis(s.P99), vs)
	}
	if ph, ok := r.handoffPhases(NameBatchlock); ok {
		p("\nWhere batchlock's hand-off time goes, medians of the %d samples whose waiter saw the hand-off (`EventHandedOff`), each from the moment the holder starts its unlock: ", ph.samples)
		p("the holder's release call returns after %s ms; the hand-off reaches the waiter after %s ms (the release script, its `SPUBLISH`, and the message's way to the waiter's subscription); ", Millis(ph.Release), Millis(ph.Notice))
		p("from then the waiter's continuing acquire takes %s ms more, until its `Lock` returns.\n", Millis(ph.Resume))
	}

	r.contention(p)
	r.promotions(p)
	r.batches(p)
	r.sales(p)

	p("\n## Cost in Redis\n\n")
	p("Each library alone (not interleaved): `CONFIG RESETSTAT` on every master, lock and unlock N keys many times, then `INFO commandstats` and `INFO cpu` from every master. ")
	p("*Commands* and *commandstats µs* count only the commands the library sends itself (commands its scripts call are already inside the script's time). ")
	p("Redis times commands by the wall clock, so where client and servers share the cores, commandstats also counts the time a server was descheduled in the middle of a command. ")
	p("*Process CPU* is the masters' user+system CPU over the phase (`INFO cpu`): it also holds network I/O, replication to the replicas and background work, and is what the ratios compare.\n\n")
	p("Figures are per lock and unlock of the batch (and, for process CPU, per key too); batchlock's rows compare it with the lock floor, the fenced floor and the floor, keys laid out alike, the floors in one slot with batchlock in one slot, the others with batchlock.\n\n")
	p("| library | N | commands per lock and unlock | commandstats µs per lock and unlock | process CPU µs per lock and unlock | process CPU µs per key | vs batchlock (process CPU) |\n|---|---:|---:|---:|---:|---:|---|\n")
	for _, c := range r.Cost {
		usec, cpu := c.PerLock()
		_, cpuKey := c.PerKey()
		vs := "—"
		switch {
		case c.Library == NameBatchlock || c.Library == NameOneSlot:
			_, lock, fenced, floor := r.costPerLock(c.Library, c.Keys)
			vs = fmt.Sprintf("%s the lock floor, %s the fenced floor, %s the floor", times(cpu, lock.cpu), times(cpu, fenced.cpu), times(cpu, floor.cpu))
		default:
			if bc, ok := r.cost(baseOf(c.Library), c.Keys); ok {
				_, bcpu := bc.PerLock()
				vs = costRatio(cpu, bcpu)
			}
		}
		p("| %s | %d | %.0f | %s | %s | %.1f | %s |\n", Label(c.Library), c.Keys, c.CallsPerLock(), micros(usec), micros(cpu), cpuKey, vs)
	}
	for _, n := range r.costSizes() {
		var missing []string
		for _, c := range r.Cost {
			if _, ok := r.cost(c.Library, n); !ok && !slices.Contains(missing, Label(c.Library)) {
				missing = append(missing, Label(c.Library))
			}
		}
		if len(missing) > 0 {
			p("\nNot run at N=%d, to keep the run short: %s.\n", n, strings.Join(missing, ", "))
		}
	}
	p("\n### batchlock against the floors, in Redis\n\n")
	r.floorsInRedis(p)

	r.whereTimeGoes(p)

	p("\n## Regenerate\n\n```sh\n%s\n```\n\n", r.Command)
	p("It starts a throwaway six-node cluster (`localcluster.Start`: `BATCHLOCK_CLUSTER_ADDRS`, else docker, else `redis-server` on PATH), or uses `--addrs` for a running one, and rewrites this page and `%s`. ", svgName)
	p("Latency and hand-off samples are interleaved between libraries (round-robin, the order rotating every round) so that machine noise hits all alike; every library uses its own cluster client with `localcluster`'s settings and locks keys of its own, with a %v TTL. See `bench/README.md`.\n", TTL)
	return b.String()
}

// floorsInRedis is the table of batchlock's cost in Redis against the
// floors'.
func (r Report) floorsInRedis(p func(string, ...any)) {
	p("The masters' process CPU and commandstats µs per lock and unlock of N keys, and batchlock's ratio to each floor with the keys laid out alike; the targets are set on the fenced floor's and the lock floor's process CPU, keys spread.\n\n")
	p("| N | keys | process CPU µs: batchlock / lock floor / fenced floor / floor | vs the lock floor | vs the fenced floor | vs the floor | commandstats µs: batchlock / lock floor / fenced floor / floor | vs the lock floor | vs the fenced floor | vs the floor |\n|---:|---|---|---:|---:|---:|---|---:|---:|---:|\n")
	for _, n := range r.costSizes() {
		for _, lib := range []string{NameBatchlock, NameOneSlot} {
			b, lock, fenced, floor := r.costPerLock(lib, n)
			if b.cpu == 0 && lock.cpu == 0 && fenced.cpu == 0 && floor.cpu == 0 {
				continue
			}
			p("| %d | %s | %s / %s / %s / %s | %s | %s | %s | %s / %s / %s / %s | %s | %s | %s |\n", n, layout(lib),
				micros(b.cpu), micros(lock.cpu), micros(fenced.cpu), micros(floor.cpu), times(b.cpu, lock.cpu), times(b.cpu, fenced.cpu), times(b.cpu, floor.cpu),
				micros(b.usec), micros(lock.usec), micros(fenced.usec), micros(floor.usec), times(b.usec, lock.usec), times(b.usec, fenced.usec), times(b.usec, floor.usec))
		}
	}

}

// perLock is server time per lock and unlock, in µs: commandstats and
// process CPU; zero where not measured.
type perLock struct{ usec, cpu float64 }

// costPerLock is the server time per lock and unlock of n keys of lib
// (batchlock, or batchlock in one slot) and of its lock floor, fenced floor
// and floor.
func (r Report) costPerLock(lib string, n int) (b, lock, fenced, floor perLock) {
	lockName, fencedName, floorName := floorsOf(lib)
	get := func(name string) perLock {
		c, ok := r.cost(name, n)
		if !ok || c.Iterations == 0 {
			return perLock{}
		}
		usec, cpu := c.PerLock()
		return perLock{usec, cpu}
	}
	return get(lib), get(lockName), get(fencedName), get(floorName)
}

// costSizes are the sizes of the cost workload, in the order they were run.
func (r Report) costSizes() []int {
	var out []int
	for _, c := range r.Cost {
		if !slices.Contains(out, c.Keys) {
			out = append(out, c.Keys)
		}
	}
	return out
}

func (r Report) cost(name string, keys int) (CostResult, bool) {
	for _, c := range r.Cost {
		if c.Library == name && c.Keys == keys {
			return c, true
		}
	}
	return CostResult{}, false
}

// whereTimeGoes compares, at the largest size measured, batchlock, the
// fenced floor and the floor, with the keys spread over the slots and in
// one slot: all make the same number of script calls (one per master to
// lock, one to release), so what separates them is the work per key and
// per slot inside the scripts.
func (r Report) whereTimeGoes(p func(string, ...any)) {
	n := 0
	for _, c := range r.Cost {
		_, fenced := r.cost(NameFencedFloor, c.Keys)
		_, floor := r.cost(NameFloor, c.Keys)
		if c.Library == NameBatchlock && c.Calls > 0 && fenced && floor {
			n = max(n, c.Keys)
		}
	}
	if n == 0 {
		return
	}
	perKey := func(name string) string {
		c, ok := r.cost(name, n)
		if !ok || c.Calls == 0 {
			return "—"
		}
		usec, cpu := c.PerKey()
		return fmt.Sprintf("%.1f / %.1f", usec, cpu)
	}
	p("\n## Where batchlock's time goes\n\n")
	p("batchlock sends one script call per master to lock (per run of consecutive slots on a master, at most 1024 keys) and one to release; the floors one per master each way, whatever N. ")
	p("At N=%d, per key locked and released, µs of Redis time (commandstats) / µs of the masters' CPU:\n\n", n)
	p("| | keys spread over the slots | keys in one slot |\n|---|---:|---:|\n")
	for _, lib := range []string{NameFloor, NameFencedFloor, NameLockFloor, NameBatchlock} {
		p("| %s | %s | %s |\n", plotLabel(lib), perKey(lib), perKey(lib+OneSlotSuffix))
	}
	p("\nFrom the floor to the fenced floor is the least that fencing tokens per slot cost: an `INCRBY` of the counter of every slot of the batch, and a token in every value: %d keys spread fall into about %.0f of the %d slots, in one slot they make one `INCRBY`. ", n, expectedSlots(n), hashtag.SlotCount)
	p("From the fenced floor to batchlock, keys laid out alike, is batchlock's own work: its value carries the owner, the fencing token and the hold, the release reads it back (`GET`, then `DEL`) to check the owner, and every acquire checks its cancel mark. Cut-down scripts timed on one node under callgrind (`internal/wire/scripts_bench_test.go`) put the owner-checked release at about two thirds of that step per key and the longer value at one third. ")
	p("The first step is the contract (fencing tokens per slot that move with their slot); the second is what the targets measure. ")
	p("The lock floor sits between them: what any real lock must do on top of the fenced floor (`SET NX` of a value naming its owner, and a release that reads it back), so that batchlock's distance from it is its own extra work: the hold and the layout's fields, the cancel mark, reentrancy and the queue.\n")
}

// expectedSlots is how many distinct slots n keys spread at random fall
// into, on average.
func expectedSlots(n int) float64 {
	return hashtag.SlotCount * (1 - math.Pow(1-1.0/hashtag.SlotCount, float64(n)))
}

// costRatio says how a cost compares with batchlock's: more costly reads as
// "slower", which is what it means for the server.
func costRatio(v, base float64) string {
	if base <= 0 {
		return "n/a"
	}
	r := Ratio(time.Duration(v*1000), time.Duration(base*1000))
	r = strings.Replace(r, "slower", "more", 1)
	return strings.Replace(r, "faster", "less", 1)
}

// batchRun is the run under load l: empty where there was none.
func (r Report) batchRun(l BatchLoad) BatchRun {
	for _, run := range r.Batches {
		if run.Is(l) {
			return run
		}
	}
	return BatchRun{}
}

// batchTargets checks the batch workload against its goals: TryEach beside
// the batch-floor processor and the cross-process floor in a closed loop,
// four processors beside one, against the TryLock loop, and the waits of
// the open loops.
func (r Report) batchTargets() []Target {
	closed := r.batchRun(LoadClosed)
	var ts []Target
	for _, goal := range []struct {
		processors   int
		ref, refName string
		share, cpu   float64
	}{
		{1, NameBatchFloorProcessor, "the batch-floor processor's", 0.9, 1.15},
		{4, NameBatchFloorProcessor, "the batch-floor processor's", 0.6, 1.6},
		{4, NameCrossFloorProcessor, "the cross-process floor's", 1.3, 1.0},
	} {
		t := Target{Goal: fmt.Sprintf("batch, closed loop, %d processor(s): TryEach at least %.2fx %s orders/s, masters' CPU per order at most %.2fx its",
			goal.processors, goal.share, goal.refName, goal.cpu), Found: "not measured"}
		res, ref := closed.result(NameTryEachProcessor, goal.processors), closed.result(goal.ref, goal.processors)
		if c, ok := compareOrders(res.OrderResult, ref.OrderResult); ok {
			t.Reached = c.share >= goal.share && c.cpu <= goal.cpu
			t.Found = fmt.Sprintf("%.0f orders/s against %.0f: %.2fx; masters' CPU per order %d µs against %d µs: %.2fx",
				res.PerSecond(), ref.PerSecond(), c.share, res.CPUPerOrder().Microseconds(), ref.CPUPerOrder().Microseconds(), c.cpu)
			if !t.Reached {
				t.Found += fmt.Sprintf("; beyond it, per order: %s; refusals per order %.1f against %.1f",
					cpuGap(res.CPUSplitPerOrder(), ref.CPUSplitPerOrder()), res.refusalsPerOrder(), ref.refusalsPerOrder())
			}
		}
		ts = append(ts, t)
	}
	t := Target{Goal: "batch, closed loop: TryEach's 4 processors together at least 0.70x the orders/s of one", Found: "not measured"}
	if four, one := closed.result(NameTryEachProcessor, 4), closed.result(NameTryEachProcessor, 1); four.Orders > 0 && one.Orders > 0 {
		x := four.PerSecond() / one.PerSecond()
		t.Reached = x >= 0.7
		t.Found = fmt.Sprintf("%.0f orders/s against %.0f: %.2fx", four.PerSecond(), one.PerSecond(), x)
	}
	ts = append(ts, t)
	t = Target{Goal: "batch, closed loop, one processor: TryEach at least 2.5x the orders/s of the TryLock-loop processor", Found: "not measured"}
	if res, loop := closed.result(NameTryEachProcessor, 1), closed.result(NameTryLockLoopProcessor, 1); res.Orders > 0 && loop.Orders > 0 {
		x := res.PerSecond() / loop.PerSecond()
		t.Reached = x >= 2.5
		t.Found = fmt.Sprintf("%.0f orders/s against %.0f: %.1fx", res.PerSecond(), loop.PerSecond(), x)
	}
	ts = append(ts, t)
	for _, l := range []BatchLoad{LoadUniformOpen, LoadBigOpen} {
		ts = append(ts, r.openTarget(l))
	}
	return append(ts, r.oneSlotTargets()...)
}

// oneSlotTargets check the Processor with its locks in one slot (one
// space) against the co-located floor, the cross-process floor with its
// lock keys in that slot: in a closed loop, four processors' orders/s and
// CPU, and four beside one; in the open loops, four processors' waits and
// backlog; and spread keys' waits at 400 orders/s.
func (r Report) oneSlotTargets() []Target {
	closed := r.batchRun(LoadClosed)
	t := Target{Goal: "batch, closed loop, one slot, 4 processors: the Processor at least 0.90x the co-located floor's orders/s, masters' CPU per order at most 1.10x its; together at least 0.60x one processor's orders/s",
		Found: "not measured"}
	four, floor, one := closed.result(NameTryEachOneSlot, 4), closed.result(NameCrossFloorOneSlot, 4), closed.result(NameTryEachOneSlot, 1)
	if c, ok := compareOrders(four.OrderResult, floor.OrderResult); ok && one.Orders > 0 {
		x := four.PerSecond() / one.PerSecond()
		t.Reached = c.share >= 0.9 && c.cpu <= 1.1 && x >= 0.6
		t.Found = fmt.Sprintf("%.0f orders/s against %.0f: %.2fx; masters' CPU per order %d µs against %d µs: %.2fx; one processor %.0f orders/s: %.2fx",
			four.PerSecond(), floor.PerSecond(), c.share, four.CPUPerOrder().Microseconds(), floor.CPUPerOrder().Microseconds(), c.cpu, one.PerSecond(), x)
	}
	ts := []Target{t}
	for _, l := range []BatchLoad{LoadUniform800, LoadUniformOpen, LoadBigOpen} {
		ts = append(ts, r.oneSlotOpenTarget(l))
	}
	t = Target{Goal: fmt.Sprintf("batch, open loop, %s mix at %.0f orders/s, keys spread: the Processor's p99 wait with 4 processors at most 50 ms", LoadUniform400.Mix.Name, LoadUniform400.Rate),
		Found: "not measured"}
	if res := r.batchRun(LoadUniform400).result(NameTryEachProcessor, 4); res.LockWait.Samples > 0 {
		t.Reached = res.LockWait.P99 <= 50*time.Millisecond
		t.Found = fmt.Sprintf("p99 %s ms; backlog %s", Millis(res.LockWait.P99), res.backlog())
	}
	ts = append(ts, t)
	t = Target{Goal: fmt.Sprintf("batch, open loop, %s mix at %.0f orders/s, one of three processors stalling %v holding its tick: no backlog at the end of the %v turn, the Processor in one slot",
		LoadStall.Mix.Name, LoadStall.Rate, stallFor, LoadStall.On(DefaultBatch).Slice), Found: "not measured"}
	run := r.batchRun(LoadStall)
	if oneSlot := run.result(NameTryEachOneSlot, 3); oneSlot.LockWait.Samples > 0 {
		t.Reached = oneSlot.Overdue == 0
		t.Found = fmt.Sprintf("backlog %s, p99 %s ms, max %s ms", oneSlot.backlog(), Millis(oneSlot.LockWait.P99), Millis(oneSlot.LockWait.Max))
		if spread := run.result(NameTryEachProcessor, 3); spread.LockWait.Samples > 0 {
			t.Found += fmt.Sprintf("; spread: backlog %s, p99 %s ms, max %s ms", spread.backlog(), Millis(spread.LockWait.P99), Millis(spread.LockWait.Max))
		}
	}
	return append(ts, t, r.movesTarget(), r.failoverTarget())
}

// failoverTarget checks the Processor in one space across a failover of
// its master (issue 60): orders done again within the cluster's node
// timeout plus 1 s of the fault, gracefully and with the master killed.
func (r Report) failoverTarget() Target {
	t := Target{Goal: fmt.Sprintf("batch, open loop, %s mix at %.0f orders/s, 3 Processors in one space, its master failed over a third into the turn, gracefully and killed: baskets admitted again within the cluster's node timeout + 1 s of the fault",
		LoadFailover.Mix.Name, LoadFailover.Rate), Found: "not measured"}
	run := r.batchRun(LoadFailover)
	var found []string
	reached := true
	for _, name := range []string{NameTryEachOneSlotFailedOver, NameTryEachOneSlotKilled} {
		res := run.result(name, 3)
		if len(res.Stops) == 0 || len(res.Failovers) == 0 {
			return t
		}
		stop := slices.Max(res.Stops)
		reached = reached && stop <= res.NodeTimeout+time.Second
		found = append(found, fmt.Sprintf("%s: no basket admitted for %s ms (the failover took %s ms), p99 wait %s ms, max %s ms, %d orders failed, %d units oversold",
			map[string]string{NameTryEachOneSlotFailedOver: "CLUSTER FAILOVER", NameTryEachOneSlotKilled: "master killed"}[name],
			Millis(stop), Millis(slices.Max(res.Failovers)), Millis(res.LockWait.P99), Millis(res.LockWait.Max), res.GaveUp, res.Oversold))
		t.Found = fmt.Sprintf("node timeout %s ms", Millis(res.NodeTimeout))
	}
	t.Reached = reached
	t.Found = strings.Join(found, "; ") + "; " + t.Found
	return t
}

// movesTarget checks the Processor in one space across moves of its slot
// (issue 60): every order done, nothing oversold, no backlog, a p99 wait at
// most 3x the same load's without moves, a max at most the longest move
// plus 100 ms.
func (r Report) movesTarget() Target {
	t := Target{Goal: fmt.Sprintf("batch, open loop, %s mix at %.0f orders/s, 3 Processors in one space, its slot moved to the next master every %v: no order failed, none oversold, no backlog, p99 wait at most 3x the same run's without moves, max at most the longest move + 100 ms",
		LoadMoves.Mix.Name, LoadMoves.Rate, moveEvery), Found: "not measured"}
	run := r.batchRun(LoadMoves)
	still, moved := run.result(NameTryEachOneSlot, 3), run.result(NameTryEachOneSlotMoved, 3)
	if still.LockWait.Samples == 0 || moved.LockWait.Samples == 0 || len(moved.Moves) == 0 {
		return t
	}
	longest := slices.Max(moved.Moves)
	t.Reached = moved.GaveUp == 0 && moved.Oversold == 0 && moved.Overdue == 0 &&
		moved.LockWait.P99 <= 3*still.LockWait.P99 && moved.LockWait.Max <= longest+100*time.Millisecond
	t.Found = fmt.Sprintf("p99 %s ms against %s ms without moves (%.1fx); max %s ms against %s ms without; %s; %d orders failed, %d units oversold, backlog %s",
		Millis(moved.LockWait.P99), Millis(still.LockWait.P99), float64(moved.LockWait.P99)/float64(max(still.LockWait.P99, 1)),
		Millis(moved.LockWait.Max), Millis(still.LockWait.Max), moved.moves(), moved.GaveUp, moved.Oversold, moved.backlog())
	return t
}

// oneSlotOpenTarget checks the Processor's waits in one slot in the open
// loop of load l: with 4 processors, a p99 at most 1.5x the co-located
// floor's with 4 and 3x one processor's, a max at most 3x that p99, and a
// backlog of at most 1% of the orders that arrived.
func (r Report) oneSlotOpenTarget(l BatchLoad) Target {
	t := Target{Goal: fmt.Sprintf("batch, open loop, %s mix at %.0f orders/s, one slot: the Processor's p99 wait with 4 processors at most 1.5x the co-located floor's with 4 and 3x one processor's, its max at most 3x its p99, a backlog of at most 1%% of arrivals",
		l.Mix.Name, l.Rate), Found: "not measured"}
	run := r.batchRun(l)
	four, one, floor := run.result(NameTryEachOneSlot, 4), run.result(NameTryEachOneSlot, 1), run.result(NameCrossFloorOneSlot, 4)
	if four.LockWait.Samples == 0 || one.LockWait.Samples == 0 || floor.LockWait.Samples == 0 {
		return t
	}
	arrived := l.Rate * run.Config.Slice.Seconds() * float64(run.Config.Rounds)
	w := four.LockWait
	t.Reached = w.P99 <= floor.LockWait.P99*3/2 && w.P99 <= 3*one.LockWait.P99 && w.Max <= 3*w.P99 && float64(four.Overdue) <= arrived/100
	t.Found = fmt.Sprintf("p99 %s ms against the co-located floor's %s ms (%.1fx) and one processor's %s ms (%.1fx); max %s ms (%.1fx its p99); backlog %s of %.0f arrived",
		Millis(w.P99), Millis(floor.LockWait.P99), float64(w.P99)/float64(max(floor.LockWait.P99, 1)), Millis(one.LockWait.P99),
		float64(w.P99)/float64(max(one.LockWait.P99, 1)), Millis(w.Max), float64(w.Max)/float64(max(w.P99, 1)), four.backlog(), arrived)
	return t
}

// openTarget checks TryEach's waits in the open loop of load l: with 4
// processors, a p99 at most twice one processor's and below the
// batch-floor processor's with 4, a max at most 3x that p99, and no
// backlog.
func (r Report) openTarget(l BatchLoad) Target {
	t := Target{Goal: fmt.Sprintf("batch, open loop, %s mix at %.0f orders/s: TryEach's p99 wait with 4 processors at most 2x one processor's and below the batch-floor processor's with 4, its max at most 3x its p99, no backlog",
		l.Mix.Name, l.Rate), Found: "not measured"}
	run := r.batchRun(l)
	four, one, floor := run.result(NameTryEachProcessor, 4), run.result(NameTryEachProcessor, 1), run.result(NameBatchFloorProcessor, 4)
	if four.LockWait.Samples == 0 || one.LockWait.Samples == 0 || floor.LockWait.Samples == 0 {
		return t
	}
	w := four.LockWait
	t.Reached = w.P99 <= 2*one.LockWait.P99 && w.P99 < floor.LockWait.P99 && w.Max <= 3*w.P99 && four.Overdue == 0
	t.Found = fmt.Sprintf("p99 %s ms against one processor's %s ms (%.1fx) and the batch-floor processor's %s ms; max %s ms (%.1fx its p99); backlog %s",
		Millis(w.P99), Millis(one.LockWait.P99), float64(w.P99)/float64(max(one.LockWait.P99, 1)), Millis(floor.LockWait.P99),
		Millis(w.Max), float64(w.Max)/float64(max(w.P99, 1)), four.backlog())
	return t
}

// batches is the batch workload's section: a table per load.
func (r Report) batches(p func(string, ...any)) {
	if len(r.Batches) == 0 {
		return
	}
	b := r.Batch
	p("\n## Batch admission: ticks of orders\n\n")
	p("Batch processors take ticks of %d orders (of %d SKUs, one unit each), lock every basket that is free, read the stock of the tick's taken orders in one pipeline, write it in one more, and let go; a refused order goes first in its processor's next tick. ", b.Tick, b.SKUs)
	p("In a **closed** loop every tick is full, and an order's wait runs from its first tick to its admission; in an **open** loop orders arrive at a fixed rate in all, shared out evenly over the processors, a tick takes those that have arrived, and an order's wait runs from its arrival to its admission. ")
	p("The references are the **batch-floor processor**: admission in this process (a basket is refused when any of its SKUs is held by an earlier basket of any of its processors), then the lock floor's Redis work for every admitted key of the tick: one script call per master that, per slot, `INCR`s its counter and sets each key `NX PX` to its token and owner, and one that deletes each key where the owner matches; and the **cross-process floor**, the least a lock costs when processors meet in Redis: each processor admits among its own tick's baskets in process, sends per master one call that takes each admitted basket's keys there with the same work, undoing that basket's keys on that master at its first held key, then one owner-checked delete per master of the parts of baskets refused on another master, and releases with one owner-checked delete per master. ")
	p("batchlock's **TryEach** processor takes a tick with one `TryEach` (one call per master, settling conflicts with its own locks in the process) and lets go with one `UnlockEach`; a basket it refused waits for the next tick; the **TryLock loop** is the same processor as a new user first writes it: `TryLock` per basket on %d goroutines, then `Unlock` each. The **co-located floor** and the **Processor in one slot** are the cross-process floor and the Processor with every lock key given one hash tag (%s), the processors' locks in one slot on one master, where a tick is one script call; the stock stays spread. ", b.LoopWorkers, OneSlotTag)
	p("With %s processors at once (a Client each, as processes), each kind gets %d turns of %v under each load, alternating. ", joinInts(b.Processors), b.Rounds, b.Slice)
	p("*Script calls per order* are the masters' script calls over the turns (`INFO commandstats`) less the orders' own stock writes, per order processed; *refusals per order* count a basket each time a tick refused it; the *backlog* is the orders arrived and not done when a turn ended, summed over the kind's turns and processors: those *overdue*, having waited a second or more (in a closed loop, all of them), and all those *waiting*, which in an open loop include the orders that arrived as the turn ended; a backlog in the targets is an overdue one. Big baskets are those of more than half the mix's largest.\n")
	for _, run := range r.Batches {
		run.section(p, NameBatchFloorProcessor, NameCrossFloorProcessor)
	}
}

// refHeads name the references of a run's table (section) in its heads.
var refHeads = map[string]string{
	NameBatchFloorProcessor: "the batch floor's",
	NameCrossFloorProcessor: "the cross-process floor's",
	NameDecrementFloor:      "the decrement floor's",
	NameDecrementFloorLoop:  "its per-basket form's",
	NameHoldFloor:           "the hold floor's",
	NameHoldFloorLoop:       "its per-basket form's",
	NameTryEachProcessor:    "the exclusive Processor's",
}

// section is the run's table, and for a closed loop where the masters' CPU
// per order goes.
func (b BatchRun) section(p func(string, ...any), refNames ...string) {
	p("\n### %s\n\n%s.\n\n", b.Title(), b.Config.Mix)
	of := make([]string, len(refNames))
	for i, name := range refNames {
		of[i] = refHeads[name]
	}
	p("| processors | processor | orders | orders/s | of %s | masters' CPU per order | vs %s | script calls per order | by kind: acquires / releases per order | orders per tick | refusals per order | wait p50 / p99 / max ms | p99 small / big ms | backlog: overdue / waiting | oversold units |\n",
		strings.Join(of, " / "), strings.Join(of, " / "))
	p("|---:|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---|---|---:|---:|\n")
	for _, n := range b.Config.Processors {
		refs := make([]BatchResult, len(refNames))
		for i, name := range refNames {
			refs[i] = b.result(name, n)
		}
		for _, res := range b.Results {
			if res.Workers != n {
				continue
			}
			var shares, cpus []string
			for _, ref := range refs {
				share, cpu := "—", "—"
				if res.Library != ref.Library {
					if c, ok := compareOrders(res.OrderResult, ref.OrderResult); ok {
						share, cpu = fmt.Sprintf("%.0f%%", 100*c.share), fmt.Sprintf("%.2fx", c.cpu)
					}
				}
				shares, cpus = append(shares, share), append(cpus, cpu)
			}
			byKind := "—"
			if res.Sent != nil {
				acquires, releases, _ := res.SentPerOrder()
				byKind = fmt.Sprintf("%.3f / %.3f", acquires, releases)
			}
			perTick := 0.0
			if res.Ticks > 0 {
				perTick = float64(res.Orders) / float64(res.Ticks)
			}
			w := res.LockWait
			cpu, scripts := fmt.Sprintf("%d µs", res.CPUPerOrder().Microseconds()), fmt.Sprintf("%.3f", res.LockScriptsPerOrder())
			if res.rolesChanged() {
				cpu, scripts = "—", "—"
			}
			p("| %d | %s | %d | %.0f | %s | %s | %s | %s | %s | %.1f | %.2f | %s / %s / %s | %s / %s | %d / %d | %d |\n", n, Label(res.Library), res.Orders, res.PerSecond(),
				strings.Join(shares, " / "), cpu, strings.Join(cpus, " / "), scripts, byKind, perTick, res.refusalsPerOrder(),
				Millis(w.Median), Millis(w.P99), Millis(w.Max), Millis(res.Small.P99), Millis(res.Big.P99), res.Overdue, res.Backlog, res.Oversold)
		}
	}
	p("\nWhere the masters' CPU per order goes, from `INFO commandstats` over the same turns (as in Contention: the script calls' own time, the lock's and the stock writes', and the rest):\n\n")
	p("| processors | processor | masters' CPU per order | scripts µs (calls) | connections and pub/sub µs (calls) | other commands µs | outside commands µs |\n|---:|---|---:|---:|---:|---:|---:|\n")
	for _, res := range b.Results {
		if res.rolesChanged() {
			continue
		}
		c := res.CPUSplitPerOrder()
		p("| %d | %s | %d µs | %d (%.2f) | %d (%.2f) | %d | %d |\n", res.Workers, Label(res.Library), res.CPUPerOrder().Microseconds(),
			c.Scripts.Microseconds(), c.ScriptCalls, c.Connections.Microseconds(), c.ConnectionCalls, c.Other.Microseconds(), c.Outside.Microseconds())
	}
}

// OrdersMarkdown is the hand-off's phases, the contention workload's section
// and their targets alone.
func (r Report) OrdersMarkdown() string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	if ph, ok := r.handoffPhases(NameBatchlock); ok {
		h := r.handoff(NameBatchlock)
		p("Hand-off: median %s ms; phases (medians of %d): release %s ms, notice %s ms, resume %s ms.\n", Millis(h.Median), ph.samples,
			Millis(ph.Release), Millis(ph.Notice), Millis(ph.Resume))
	}
	r.contention(p)
	p("\n")
	var targets []Target
	for _, t := range r.Targets() {
		if strings.Contains(t.Goal, "contention") || strings.Contains(t.Goal, "hand-off") {
			targets = append(targets, t)
		}
	}
	writeTargets(&b, targets)
	return b.String()
}

// FloorsMarkdown is batchlock's cost in Redis and its targets against the
// lock floor and the fenced floor alone.
func (r Report) FloorsMarkdown() string {
	var b strings.Builder
	r.floorsInRedis(func(format string, args ...any) { fmt.Fprintf(&b, format, args...) })
	b.WriteString("\n")
	targets := append(r.floorTargets(NameLockFloor, "the lock floor", LockFloorTarget), r.floorTargets(NameFencedFloor, "the fenced floor", FloorTarget)...)
	writeTargets(&b, targets)
	return b.String()
}

// writeTargets lists targets, each met or missed with what was found.
func writeTargets(b *strings.Builder, targets []Target) {
	for _, t := range targets {
		mark := "missed"
		if t.Reached {
			mark = "met"
		}
		fmt.Fprintf(b, "- %s: **%s**: %s\n", t.Goal, mark, t.Found)
	}
}

// BatchMarkdown is the batch workload's section and targets alone.
func (r Report) BatchMarkdown() string { return sectionMarkdown(r.batches, r.batchTargets()) }

// sectionMarkdown is one workload's section, written by section, and its
// targets alone.
func sectionMarkdown(section func(p func(string, ...any)), targets []Target) string {
	var b strings.Builder
	p := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	section(p)
	p("\n")
	writeTargets(&b, targets)
	return b.String()
}

// joinInts lists ns for a reader: "1, 2 and 4".
func joinInts(ns []int) string {
	s := make([]string, len(ns))
	for i, n := range ns {
		s[i] = strconv.Itoa(n)
	}
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}
