package bench

import (
	"context"
	"fmt"
	"slices"
	"time"
)

// LatencyPlan is how many keys one lock takes, and how many samples each
// library gets at that size: fewer where the slow peers would take minutes.
type LatencyPlan struct {
	Keys       int
	Iterations int
	// Batch is how many samples a library takes in a row before the next
	// one's turn: small, so that noise from the machine hits all alike,
	// but more than one where a sample is so short that the switch would
	// dominate.
	Batch int
	// Skip names the lockers not run at this size: the sequential peers at
	// 10000 keys, where one sample would take seconds.
	Skip []string
}

// SlowAtLargest are the lockers DefaultLatencyPlans and DefaultCostPlans
// skip at 10000 keys: one key after the other, a lock and unlock of 10000
// keys takes them over a second (ten times their 1000 keys), a minute of
// the run for a ratio their 1000-key figures already show.
var SlowAtLargest = []string{NameRedsyncSeq, NameRedislockSeq}

// DefaultLatencyPlans keep the whole latency workload to a minute or two
// on a small machine.
var DefaultLatencyPlans = []LatencyPlan{
	{Keys: 1, Iterations: 600, Batch: 20},
	{Keys: 10, Iterations: 300, Batch: 10},
	{Keys: 100, Iterations: 120, Batch: 4},
	{Keys: 1000, Iterations: 30, Batch: 1},
	{Keys: 10000, Iterations: 5, Batch: 1, Skip: SlowAtLargest},
}

// LatencyResult holds the samples of lock+unlock of one library at one size.
type LatencyResult struct {
	Library string
	Keys    int
	Samples []time.Duration
}

// RunLatency measures lock+unlock of plan.Keys keys for every library,
// round-robin between libraries one batch at a time (the order rotating
// every round), after one unmeasured batch each to warm connections and
// script caches. Each library locks keys of its own. Lockers named in
// plan.Skip are not run, and have no result.
func RunLatency(ctx context.Context, lockers []Locker, plan LatencyPlan) ([]LatencyResult, error) {
	lockers = without(lockers, plan.Skip)
	if len(lockers) == 0 {
		return nil, nil
	}
	results := make([]LatencyResult, len(lockers))
	keys := make([][]string, len(lockers))
	for i, l := range lockers {
		results[i] = LatencyResult{Library: l.Name(), Keys: plan.Keys, Samples: make([]time.Duration, 0, plan.Iterations)}
		keys[i] = Keys("bench:"+l.Name(), plan.Keys)
		for range min(plan.Batch, plan.Iterations) {
			if err := LockUnlock(ctx, l, keys[i]); err != nil {
				return nil, fmt.Errorf("%s, %d keys, warm-up: %w", l.Name(), plan.Keys, err)
			}
		}
	}
	for round := 0; len(results[0].Samples) < plan.Iterations; round++ {
		for j := range lockers {
			i := (j + round) % len(lockers)
			r := &results[i]
			for n := min(plan.Batch, plan.Iterations-len(r.Samples)); n > 0; n-- {
				start := time.Now()
				if err := LockUnlock(ctx, lockers[i], keys[i]); err != nil {
					return nil, fmt.Errorf("%s, %d keys: %w", lockers[i].Name(), plan.Keys, err)
				}
				r.Samples = append(r.Samples, time.Since(start))
			}
		}
	}
	return results, nil
}

// without is lockers less the ones named in skip.
func without(lockers []Locker, skip []string) []Locker {
	var out []Locker
	for _, l := range lockers {
		if !slices.Contains(skip, l.Name()) {
			out = append(out, l)
		}
	}
	return out
}
