package bench

import (
	"fmt"
	"slices"
	"strings"
	"time"
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

// Targets checks the run against the goals set for batchlock.
func (r Report) Targets() []Target {
	var ts []Target
	toFloor := func(n int) (float64, string) {
		b, _ := r.latency(NameBatchlock, n)
		f, _ := r.latency(NameFloor, n)
		if b.Median == 0 || f.Median == 0 {
			return 0, "not measured"
		}
		x := float64(b.Median) / float64(f.Median)
		return x, fmt.Sprintf("%s ms against the floor's %s ms: %.2fx", Millis(b.Median), Millis(f.Median), x)
	}
	x1, found1 := toFloor(1)
	ts = append(ts, Target{Goal: "N=1 within 1.2x of the floor", Reached: x1 > 0 && x1 <= 1.2, Found: found1})
	for _, n := range []int{100, 1000} {
		x, found := toFloor(n)
		ts = append(ts, Target{Goal: fmt.Sprintf("N=%d within 1.5x of the floor", n), Reached: x > 0 && x <= 1.5, Found: found})
	}

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

	if b, f, ok := r.cpuPerKey(NameBatchlock, NameFloor); ok {
		x := b / f
		ts = append(ts, Target{
			Goal:    "masters' CPU per key locked and released within 1.5x of the floor's",
			Reached: x <= 1.5,
			Found:   fmt.Sprintf("%.1f µs against the floor's %.1f µs at the largest N measured: %.2fx", b, f, x),
		})
	}

	h, hr := r.handoff(NameBatchlock), r.handoff(NameRedsyncSeq)
	x := float64(hr.Median) / float64(h.Median)
	ts = append(ts, Target{
		Goal:    "hand-off median under 2 ms, at least 20x quicker than redsync's default retry",
		Reached: h.Median > 0 && h.Median < 2*time.Millisecond && x >= 20,
		Found:   fmt.Sprintf("%s ms, redsync %s ms: %.1fx quicker", Millis(h.Median), Millis(hr.Median), x),
	})

	ob, oc, or := r.orders(NameBatchlock, contentionWorkers), r.orders(NameCeiling, contentionWorkers), r.orders(NameRedsyncSeq, contentionWorkers)
	share := ob.PerSecond() / oc.PerSecond()
	waitRatio := float64(ob.LockWait.P99) / float64(oc.LockWait.P99)
	ts = append(ts, Target{
		Goal:    fmt.Sprintf("contention, %d workers: at least 70%% of the in-process ceiling's orders/s, p99 lock wait at most 1.5x the ceiling's", contentionWorkers),
		Reached: ob.Orders > 0 && share >= 0.7 && waitRatio <= 1.5,
		Found: fmt.Sprintf("%.0f orders/s against the ceiling's %.0f: %.0f%%; p99 lock wait %s ms against %s ms: %.1fx",
			ob.PerSecond(), oc.PerSecond(), 100*share, Millis(ob.LockWait.P99), Millis(oc.LockWait.P99), waitRatio),
	})
	x = ob.PerSecond() / or.PerSecond()
	ts = append(ts, Target{
		Goal:    fmt.Sprintf("contention, %d workers: at least 5x the redsync-based processor, zero oversell", contentionWorkers),
		Reached: ob.Orders > 0 && x >= 5 && ob.Oversold == 0 && or.Oversold == 0,
		Found: fmt.Sprintf("%.0f orders/s against %.0f: %.1fx; oversold units %d and %d",
			ob.PerSecond(), or.PerSecond(), x, ob.Oversold, or.Oversold),
	})
	return ts
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
		s := Series{Name: Label(lib), Dashed: strings.HasSuffix(lib, "-par")}
		for _, n := range r.sizes() {
			if sum, ok := r.latency(lib, n); ok {
				s.Points = append(s.Points, Point{X: float64(n), Y: float64(sum.Median) / float64(time.Millisecond)})
			}
		}
		p.Series = append(p.Series, s)
	}
	return p
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
	p("Median latency of taking N keys spread over all masters and releasing them, in ms, and how each library compares with batchlock; batchlock's row compares it with the floor, the least a lock with per-key leases must do (one script call per master that writes every key with `SET key v PX ttl`, then one that deletes them). ")
	p("batchlock takes the batch with one `Lock` (`WithTTL`) and one `Unlock`; the peers take one lock per key, in sorted order one after the other, or with one goroutine per key (errgroup), and release the same way.\n\n")
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
			s, _ := r.latency(lib, n)
			if lib == NameBatchlock {
				floor, _ := r.latency(NameFloor, n)
				p(" %s ms (%.2fx the floor) |", Millis(s.Median), float64(s.Median)/float64(floor.Median))
				continue
			}
			base, _ := r.latency(NameBatchlock, n)
			p(" %s ms (%s) |", Millis(s.Median), Ratio(s.Median, base.Median))
		}
		p("\n")
	}
	p("\n![median latency against N, log-log](%s)\n\n", svgName)
	p("Raw figures (p99 by nearest rank: with few samples it is their maximum):\n\n")
	p("| library | N | samples | median ms | p99 ms |\n|---|---:|---:|---:|---:|\n")
	for _, n := range sizes {
		for _, lib := range r.libraries() {
			s, _ := r.latency(lib, n)
			p("| %s | %d | %d | %s | %s |\n", Label(lib), n, s.Samples, Millis(s.Median), Millis(s.P99))
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

	o := r.Order
	p("\n## Contention: order processing\n\n")
	p("Workers process the orders of package orders: baskets of 1–%d distinct SKUs (of %d, spread over all masters, small baskets most likely), one unit each: lock the basket, read the stock of every SKU, write each one less, unlock. ", o.MaxBasket, o.SKUs)
	p("Reads and writes are separate commands, so only the lock prevents overselling; at the end every SKU's stock is checked against the units sold. ")
	p("The ceiling does the same with a `sync.Mutex` per SKU in this process, taken in sorted order: ordered locking at no cost, the most a lock that takes keys in a global order can give; its stock is on the same cluster. ")
	p("The redsync-based processor locks the basket's SKUs one by one in sorted order (no deadlock), with redsync's default retry. ")
	p("With each number of workers, each processor gets %d turns of %v, alternating. *Lock wait* is the time from asking for the basket's lock to holding it.\n\n", o.Rounds, o.Slice)
	p("| workers | processor | orders | orders/s | of the ceiling's | lock wait p50 / p99 / max ms | p99 vs the ceiling's | masters' CPU per order | gave up | oversold units |\n|---:|---|---:|---:|---:|---|---|---:|---:|---:|\n")
	for _, w := range r.workerCounts() {
		oc := r.orders(NameCeiling, w)
		for _, res := range r.Orders {
			if res.Workers != w {
				continue
			}
			share, vs := "—", "—"
			if res.Library != NameCeiling {
				share = fmt.Sprintf("%.0f%%", 100*res.PerSecond()/oc.PerSecond())
				vs = Ratio(res.LockWait.P99, oc.LockWait.P99)
			}
			p("| %d | %s | %d | %.0f | %s | %s / %s / %s | %s | %d µs | %d | %d |\n", w, Label(res.Library), res.Orders, res.PerSecond(), share,
				Millis(res.LockWait.Median), Millis(res.LockWait.P99), Millis(res.LockWait.Max), vs, res.CPUPerOrder().Microseconds(), res.GaveUp, res.Oversold)
		}
	}
	ob, oc := r.orders(NameBatchlock, contentionWorkers), r.orders(NameCeiling, contentionWorkers)
	if ob.CPUPerOrder() > 0 && oc.CPUPerOrder() > 0 {
		p("\n*Masters' CPU per order* is the masters' process CPU (`INFO cpu`) over a processor's turns, per order: the ceiling's is the orders' own stock work, batchlock's adds its lock's. ")
		p("With %d workers batchlock's orders cost the masters %d µs each against the ceiling's %d µs, and the masters were busy %.0f%% of the time against %.0f%% (of one core; client and six servers share %d). ",
			contentionWorkers, ob.CPUPerOrder().Microseconds(), oc.CPUPerOrder().Microseconds(),
			100*float64(ob.MastersCPU)/float64(ob.Elapsed), 100*float64(oc.MastersCPU)/float64(oc.Elapsed), r.Machine.Cores)
		p("Where the servers' CPU is the limit, throughput goes as its inverse: %.0f%% of the ceiling's is what %d µs against %d µs allows.\n",
			100*float64(oc.CPUPerOrder())/float64(ob.CPUPerOrder()), ob.CPUPerOrder().Microseconds(), oc.CPUPerOrder().Microseconds())
	}

	r.promotions(p)

	p("\n## Cost in Redis\n\n")
	p("Each library alone (not interleaved): `CONFIG RESETSTAT` on every master, lock and unlock N keys many times, then `INFO commandstats` and `INFO cpu` from every master. ")
	p("*Commands* and *commandstats µs* count only the commands the library sends itself (commands its scripts call are already inside the script's time). ")
	p("Redis times commands by the wall clock, so where client and servers share the cores, commandstats also counts the time a server was descheduled in the middle of a command. ")
	p("*Process CPU* is the masters' user+system CPU over the phase (`INFO cpu`): it also holds network I/O, replication to the replicas and background work, and is what the ratio compares.\n\n")
	p("| library | N | commands per lock and unlock | commandstats µs per key | process CPU µs per key | vs batchlock (process CPU) |\n|---|---:|---:|---:|---:|---|\n")
	for _, c := range r.Cost {
		usec, cpu := c.PerKey()
		vs := "—"
		if c.Library != NameBatchlock {
			for _, bc := range r.Cost {
				if bc.Library == NameBatchlock && bc.Keys == c.Keys {
					_, bcpu := bc.PerKey()
					vs = costRatio(cpu, bcpu)
				}
			}
		}
		p("| %s | %d | %.0f | %.1f | %.1f | %s |\n", Label(c.Library), c.Keys, c.CallsPerLock(), usec, cpu, vs)
	}

	r.whereTimeGoes(p)

	p("\n## Regenerate\n\n```sh\n%s\n```\n\n", r.Command)
	p("It starts a throwaway six-node cluster (`localcluster.Start`: `BATCHLOCK_CLUSTER_ADDRS`, else docker, else `redis-server` on PATH), or uses `--addrs` for a running one, and rewrites this page and `%s`. ", svgName)
	p("Latency and hand-off samples are interleaved between libraries (round-robin, the order rotating every round) so that machine noise hits all alike; every library uses its own cluster client with `localcluster`'s settings and locks keys of its own, with a %v TTL. See `bench/README.md`.\n", TTL)
	return b.String()
}

// cpuPerKey is the masters' CPU per key of two libraries, at the largest
// size both were measured at.
func (r Report) cpuPerKey(a, b string) (float64, float64, bool) {
	best := -1
	for _, c := range r.Cost {
		if c.Library == a && c.Keys > best {
			if _, ok := r.cost(b, c.Keys); ok {
				best = c.Keys
			}
		}
	}
	if best < 0 {
		return 0, 0, false
	}
	ca, _ := r.cost(a, best)
	cb, _ := r.cost(b, best)
	_, x := ca.PerKey()
	_, y := cb.PerKey()
	return x, y, y > 0
}

func (r Report) cost(name string, keys int) (CostResult, bool) {
	for _, c := range r.Cost {
		if c.Library == name && c.Keys == keys {
			return c, true
		}
	}
	return CostResult{}, false
}

// whereTimeGoes compares, at the largest size measured, batchlock on keys
// spread over the slots, batchlock on the same number of keys in one slot,
// and the floor: the three make the same number of script calls (one per
// master to lock, one to release), so what separates them is the work per
// key inside the scripts.
func (r Report) whereTimeGoes(p func(string, ...any)) {
	n := 0
	for _, c := range r.Cost {
		_, one := r.cost(NameOneSlot, c.Keys)
		_, floor := r.cost(NameFloor, c.Keys)
		if c.Library == NameBatchlock && one && floor {
			n = max(n, c.Keys)
		}
	}
	spread, ok1 := r.cost(NameBatchlock, n)
	one, ok2 := r.cost(NameOneSlot, n)
	floor, ok3 := r.cost(NameFloor, n)
	if !ok1 || !ok2 || !ok3 || spread.Calls == 0 || one.Calls == 0 || floor.Calls == 0 {
		return
	}
	su, sc := spread.PerKey()
	ou, oc := one.PerKey()
	fu, fc := floor.PerKey()
	p("\n## Where batchlock's time goes\n\n")
	p("batchlock sends one script call per master to lock (per run of consecutive slots on a master, at most 1024 keys) and one to release, as the floor does. ")
	p("At N=%d, per key locked and released: the floor %.1f µs of Redis time (commandstats) and %.1f µs of the masters' CPU; ", n, fu, fc)
	p("batchlock with the keys in one slot %.1f µs and %.1f µs; batchlock with the keys spread over the slots %.1f µs and %.1f µs. ", ou, oc, su, sc)
	p("The first step is what a lock value costs beyond `SET PX` and `DEL`: the value carries the owner, the fencing token and the hold with its lease end, the release reads it back (`GET`, then `DEL`) to check the owner, and every call checks its cancel mark and reads the server's `TIME`. ")
	p("The second step is the fencing counter: one per slot, so a batch spread over N slots makes N `INCRBY` calls where one slot makes one. ")
	p("Both are the contract (owner-checked holds, fencing tokens per slot that move with their slot), not overhead of the protocol.\n")
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
