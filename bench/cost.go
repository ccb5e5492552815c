package bench

import (
	"bufio"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/batchlock/batchlock/localcluster"
)

// CostPlan is one size of the cost workload.
type CostPlan struct {
	Keys       int
	Iterations int
	// Skip names the lockers not run at this size.
	Skip []string
}

// DefaultCostPlans take a few seconds each, all libraries together (the
// sequential peers most of it), so that even the floors' phases hold
// thousands of lock calls or tens of thousands of keys; the sequential
// peers are not run at 10000 keys (SlowAtLargest).
var DefaultCostPlans = []CostPlan{
	{Keys: 1, Iterations: 2000},
	{Keys: 10, Iterations: 400},
	{Keys: 100, Iterations: 100},
	{Keys: 1000, Iterations: 10},
	{Keys: 10000, Iterations: 4, Skip: SlowAtLargest},
}

// CostResult is what one library cost the masters for one size.
type CostResult struct {
	Library    string
	Keys       int
	Iterations int
	// Calls and Usec are INFO commandstats figures of the commands the
	// library sends itself (Locker.Commands), summed over the masters.
	Calls, Usec int64
	// CPU is the masters' process CPU (INFO cpu, user+sys): also network
	// I/O, replication to the replicas, and background work.
	CPU time.Duration
}

// PerKey returns server time per key locked and released, in microseconds:
// from commandstats, and from process CPU.
func (r CostResult) PerKey() (usec, cpu float64) {
	keys := float64(r.Keys * r.Iterations)
	return float64(r.Usec) / keys, float64(r.CPU.Microseconds()) / keys
}

// PerLock returns server time per lock and unlock of the batch, in
// microseconds: from commandstats, and from process CPU.
func (r CostResult) PerLock() (usec, cpu float64) {
	n := float64(r.Iterations)
	return float64(r.Usec) / n, float64(r.CPU.Microseconds()) / n
}

// CallsPerLock is the number of commands per lock and unlock of the batch.
func (r CostResult) CallsPerLock() float64 { return float64(r.Calls) / float64(r.Iterations) }

// RunCost measures each library alone, one after the other: statistics are
// reset on every master, the library locks and unlocks plan.Keys keys
// plan.Iterations times after a warm-up, and the masters' statistics are
// read back. Nothing else may use the cluster meanwhile. Lockers named in
// plan.Skip are not run.
func RunCost(ctx context.Context, cl *localcluster.Cluster, lockers []Locker, plan CostPlan) ([]CostResult, error) {
	lockers = without(lockers, plan.Skip)
	masters, err := cl.Masters(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]CostResult, 0, len(lockers))
	for _, l := range lockers {
		keys := Keys("bench:cost:"+l.Name(), plan.Keys)
		if err := LockUnlock(ctx, l, keys); err != nil {
			return nil, fmt.Errorf("cost %s: warm-up: %w", l.Name(), err)
		}
		for _, m := range masters {
			if _, err := cl.Do(ctx, m.Addr, "CONFIG", "RESETSTAT"); err != nil {
				return nil, err
			}
		}
		cpuBefore, err := mastersCPU(ctx, cl, masters)
		if err != nil {
			return nil, err
		}
		for range plan.Iterations {
			if err := LockUnlock(ctx, l, keys); err != nil {
				return nil, fmt.Errorf("cost %s: %w", l.Name(), err)
			}
		}
		cpuAfter, err := mastersCPU(ctx, cl, masters)
		if err != nil {
			return nil, err
		}
		stats, err := mastersCommandStats(ctx, cl, masters)
		if err != nil {
			return nil, err
		}
		own := sumOf(stats, l.Commands())
		out = append(out, CostResult{Library: l.Name(), Keys: plan.Keys, Iterations: plan.Iterations,
			Calls: own.Calls, Usec: own.Usec, CPU: cpuAfter - cpuBefore})
	}
	return out, nil
}

// mastersCommandStats sums the INFO commandstats of masters, by command.
func mastersCommandStats(ctx context.Context, cl *localcluster.Cluster, masters []localcluster.Node) (map[string]CommandStat, error) {
	out := map[string]CommandStat{}
	for _, m := range masters {
		reply, err := cl.Do(ctx, m.Addr, "INFO", "commandstats")
		if err != nil {
			return nil, err
		}
		addStats(out, ParseCommandStats(fmt.Sprint(reply)), 1)
	}
	return out, nil
}

// sumOf sums the stats of commands.
func sumOf(stats map[string]CommandStat, commands []string) CommandStat {
	var sum CommandStat
	for _, c := range commands {
		sum.Calls += stats[c].Calls
		sum.Usec += stats[c].Usec
	}
	return sum
}

// addStats adds sign times each of more's stats to sum, which it allocates
// when nil, and returns it.
func addStats(sum, more map[string]CommandStat, sign int64) map[string]CommandStat {
	if sum == nil {
		sum = map[string]CommandStat{}
	}
	for name, s := range more {
		t := sum[name]
		t.Calls += sign * s.Calls
		t.Usec += sign * s.Usec
		sum[name] = t
	}
	return sum
}

// mastersCPU sums the process CPU (user and system) of masters so far.
func mastersCPU(ctx context.Context, cl *localcluster.Cluster, masters []localcluster.Node) (time.Duration, error) {
	var total time.Duration
	for _, m := range masters {
		cpu, err := masterCPU(ctx, cl, m.Addr)
		if err != nil {
			return 0, err
		}
		total += cpu
	}
	return total, nil
}

func masterCPU(ctx context.Context, cl *localcluster.Cluster, addr string) (time.Duration, error) {
	reply, err := cl.Do(ctx, addr, "INFO", "cpu")
	if err != nil {
		return 0, err
	}
	info := ParseInfo(fmt.Sprint(reply))
	var total time.Duration
	for _, f := range []string{"used_cpu_user", "used_cpu_sys"} {
		secs, err := strconv.ParseFloat(info[f], 64)
		if err != nil {
			return 0, fmt.Errorf("%s: INFO cpu %s: %w", addr, f, err)
		}
		total += time.Duration(secs * float64(time.Second))
	}
	return total, nil
}

// ParseInfo reads the "field:value" lines of an INFO reply.
func ParseInfo(info string) map[string]string {
	out := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(info))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if k, v, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "#") {
			out[k] = v
		}
	}
	return out
}

// CommandStat is one line of INFO commandstats.
type CommandStat struct{ Calls, Usec int64 }

// ParseCommandStats reads INFO commandstats, by command name as Redis
// writes it ("evalsha", "config|resetstat").
func ParseCommandStats(info string) map[string]CommandStat {
	out := map[string]CommandStat{}
	for k, v := range ParseInfo(info) {
		name, ok := strings.CutPrefix(k, "cmdstat_")
		if !ok {
			continue
		}
		var s CommandStat
		for field := range strings.SplitSeq(v, ",") {
			f, val, _ := strings.Cut(field, "=")
			n, _ := strconv.ParseInt(val, 10, 64)
			switch f {
			case "calls":
				s.Calls = n
			case "usec":
				s.Usec = n
			}
		}
		out[name] = s
	}
	return out
}
