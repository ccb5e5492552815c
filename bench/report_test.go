package bench

import (
	"strings"
	"testing"
	"time"
)

// fixedSamples repeats d, so that its median and p99 are d.
func fixedSamples(d time.Duration) []time.Duration { return []time.Duration{d, d, d} }

// sampleReport is a made-up run: batchlock takes bl100 for 100 keys, the
// fenced floor and the floor 3 and 2.5 ms; 1000 keys are not measured for
// latency, and 10000 keys not with the sequential peers.
func sampleReport(bl100 time.Duration) Report {
	ms, us := time.Millisecond, time.Microsecond
	r := Report{Command: "cd bench && go run ./cmd/benchreport"}
	for lib, perKey := range map[string]time.Duration{NameRedsyncSeq: ms, NameRedislockSeq: ms, NameRedsyncPar: ms / 5, NameRedislockPar: ms / 5} {
		for _, n := range []int{1, 100} {
			r.Latency = append(r.Latency, LatencyResult{Library: lib, Keys: n, Samples: fixedSamples(time.Duration(n) * perKey)})
		}
	}
	for _, l := range []struct {
		lib     string
		n1, n10 time.Duration
	}{
		{NameBatchlock, 500 * us, bl100},
		{NameFencedFloor, 420 * us, 3 * ms},
		{NameFloor, 400 * us, 2500 * us},
		{NameOneSlot, 450 * us, 2 * ms},
		{NameFencedFloorOneSlot, 400 * us, 1600 * us},
		{NameFloorOneSlot, 380 * us, 1500 * us},
	} {
		r.Latency = append(r.Latency,
			LatencyResult{Library: l.lib, Keys: 1, Samples: fixedSamples(l.n1)},
			LatencyResult{Library: l.lib, Keys: 100, Samples: fixedSamples(l.n10)})
	}
	// 10000 keys: the sequential peers skipped.
	for _, lib := range []string{NameBatchlock, NameFencedFloor, NameFloor, NameRedsyncPar, NameRedislockPar, NameOneSlot, NameFencedFloorOneSlot, NameFloorOneSlot} {
		r.Latency = append(r.Latency, LatencyResult{Library: lib, Keys: 10000, Samples: fixedSamples(50 * ms)})
	}
	r.Handoff = []HandoffResult{
		{Library: NameBatchlock, Samples: fixedSamples(ms)},
		{Library: NameRedsyncSeq, Samples: fixedSamples(100 * ms)},
	}
	r.Orders = []OrderResult{
		{Library: NameBatchlock, Workers: contentionWorkers, Orders: 6000, Elapsed: time.Second, LockWait: Summary{P99: 12 * ms}},
		{Library: NameCeiling, Workers: contentionWorkers, Orders: 8000, Elapsed: time.Second, LockWait: Summary{P99: 10 * ms}},
		{Library: NameRedsyncSeq, Workers: contentionWorkers, Orders: 1000, Elapsed: time.Second},
	}
	// Cost per lock+unlock: N=1 batchlock 60 µs of CPU, the fenced floor 50,
	// the floor 40 (1000 iterations); N=100 batchlock 3000, the fenced floor
	// 2000, the floor 1500 (10 iterations); 1000 keys not measured.
	r.Cost = []CostResult{
		{Library: NameBatchlock, Keys: 1, Iterations: 1000, Calls: 2000, Usec: 30000, CPU: 60 * ms},
		{Library: NameFloor, Keys: 1, Iterations: 1000, Calls: 2000, Usec: 10000, CPU: 40 * ms},
		{Library: NameFencedFloor, Keys: 1, Iterations: 1000, Calls: 2000, Usec: 12000, CPU: 50 * ms},
		{Library: NameRedsyncSeq, Keys: 1, Iterations: 1000, Calls: 2000, Usec: 8000, CPU: 45 * ms},
		{Library: NameOneSlot, Keys: 1, Iterations: 1000, Calls: 2000, Usec: 28000, CPU: 55 * ms},
		{Library: NameFloorOneSlot, Keys: 1, Iterations: 1000, Calls: 2000, Usec: 10000, CPU: 40 * ms},
		{Library: NameFencedFloorOneSlot, Keys: 1, Iterations: 1000, Calls: 2000, Usec: 11000, CPU: 44 * ms},
		{Library: NameBatchlock, Keys: 100, Iterations: 10, Calls: 60, Usec: 9000, CPU: 30 * ms},
		{Library: NameFloor, Keys: 100, Iterations: 10, Calls: 60, Usec: 3000, CPU: 15 * ms},
		{Library: NameFencedFloor, Keys: 100, Iterations: 10, Calls: 60, Usec: 5000, CPU: 20 * ms},
		{Library: NameOneSlot, Keys: 100, Iterations: 10, Calls: 20, Usec: 4000, CPU: 12 * ms},
		{Library: NameFloorOneSlot, Keys: 100, Iterations: 10, Calls: 20, Usec: 2500, CPU: 9 * ms},
		{Library: NameFencedFloorOneSlot, Keys: 100, Iterations: 10, Calls: 20, Usec: 2600, CPU: 10 * ms},
	}
	return r
}

func targets(r Report) map[string]Target {
	out := map[string]Target{}
	for _, t := range r.Targets() {
		out[t.Goal] = t
	}
	return out
}

func TestTargets(t *testing.T) {
	// 100 keys in 4 ms: 25x faster than 100 ms sequential, and faster than
	// 20 ms in parallel; but 1.33x the fenced floor's 3 ms.
	const peers = "100 keys: at least 12x faster than sequential redsync and redislock, at least 4x faster than their goroutine-per-key use"
	got := targets(sampleReport(4 * time.Millisecond))
	want := map[string]struct {
		reached bool
		found   string
	}{
		"batchlock within 1.25x of the fenced floor at N=1 in p50 latency": {true,
			"0.50 ms against the fenced floor's 0.42 ms: 1.19x (the floor's 0.40 ms: 1.25x)"},
		"batchlock within 1.25x of the fenced floor at N=100 in p50 latency": {false,
			"4.00 ms against the fenced floor's 3.00 ms: 1.33x (the floor's 2.50 ms: 1.60x)"},
		"batchlock within 1.25x of the fenced floor at N=1000 in p50 latency": {false, "not measured"},
		"batchlock within 1.25x of the fenced floor at N=1 in masters' CPU per lock+unlock": {true,
			"60 µs against the fenced floor's 50 µs: 1.20x (the floor's 40 µs: 1.50x)"},
		"batchlock within 1.25x of the fenced floor at N=100 in masters' CPU per lock+unlock": {false,
			"3000 µs against the fenced floor's 2000 µs: 1.50x (the floor's 1500 µs: 2.00x)"},
		"batchlock within 1.25x of the fenced floor at N=1000 in masters' CPU per lock+unlock": {false, "not measured"},
		peers: {true, ""},
		"hand-off median under 2 ms, at least 20x quicker than redsync's default retry":                                       {true, ""},
		"contention, 16 workers: at least 70% of the in-process ceiling's orders/s, p99 lock wait at most 1.5x the ceiling's": {true, ""},
		"contention, 16 workers: at least 5x the redsync-based processor, zero oversell":                                      {true, ""},
	}
	if len(got) != len(want) {
		t.Errorf("%d targets, want %d: %v", len(got), len(want), got)
	}
	for goal, w := range want {
		g, ok := got[goal]
		switch {
		case !ok:
			t.Errorf("no target %q", goal)
		case g.Reached != w.reached:
			t.Errorf("%q: reached = %v, want %v (%s)", goal, g.Reached, w.reached, g.Found)
		case w.found != "" && g.Found != w.found:
			t.Errorf("%q: found %q, want %q", goal, g.Found, w.found)
		}
	}
	// 6 ms is only 16.7x faster than sequential peers.
	if tg := targets(sampleReport(6 * time.Millisecond))[peers]; tg.Reached {
		t.Errorf("%+v: reached at 16.7x", tg)
	}
	// The old floor targets are gone.
	for goal := range got {
		if strings.Contains(goal, "1.5x of the floor") || strings.Contains(goal, "1.2x of the floor") {
			t.Errorf("old target %q", goal)
		}
	}
}

func TestMarkdownHasRatiosAndCommand(t *testing.T) {
	md := sampleReport(4 * time.Millisecond).Markdown("bench-latency.svg")
	for _, want := range []string{
		"| redsync sequential | 1.00 ms (2.0x slower) | 100 ms (25.0x slower) | not run |",
		"| batchlock | 0.50 ms (1.19x the fenced floor, 1.25x the floor) | 4.00 ms (1.33x the fenced floor, 1.60x the floor) | 50.0 ms (1.00x the fenced floor, 1.00x the floor) |",
		"| batchlock, all keys in one slot | 0.45 ms (1.12x the fenced floor, 1.18x the floor) | 2.00 ms (1.25x the fenced floor, 1.33x the floor) |",
		// The floors in one slot compare with batchlock in one slot.
		"| fenced floor, all keys in one slot | 0.40 ms (1.1x faster) | 1.60 ms (1.2x faster) |",
		"Not run at N=10000, to keep the run short: redsync sequential (100 ms at N=100, so about 10000 ms a sample); redislock sequential",
		// batchlock against the floors, latency.
		"| 1 | spread over the slots | 0.50 / 0.42 / 0.40 | 1.19x | 1.25x |",
		"| 100 | in one slot | 2.00 / 1.60 / 1.50 | 1.25x | 1.33x |",
		// Cost, per lock+unlock.
		"| batchlock | 1 | 2 | 30.0 | 60.0 | 60.0 | 1.20x the fenced floor, 1.50x the floor |",
		"| batchlock | 100 | 6 | 900 | 3000 | 30.0 | 1.50x the fenced floor, 2.00x the floor |",
		"| redsync sequential | 1 | 2 | 8.0 | 45.0 | 45.0 | 1.3x less |",
		"| floor, all keys in one slot | 100 | 2 | 250 | 900 | 9.0 | 1.3x less |",
		"Not run at N=100, to keep the run short: redsync sequential.",
		// batchlock against the floors, in Redis.
		"| 100 | spread over the slots | 3000 / 2000 / 1500 | 1.50x | 2.00x | 900 / 500 / 300 | 1.80x | 3.00x |",
		"| 1 | in one slot | 55.0 / 44.0 / 40.0 | 1.25x | 1.38x | 28.0 / 11.0 / 10.0 | 2.55x | 2.80x |",
		// Targets, with their figures.
		"- **reached** — batchlock within 1.25x of the fenced floor at N=1 in p50 latency: 0.50 ms against the fenced floor's 0.42 ms: 1.19x (the floor's 0.40 ms: 1.25x).",
		"- **not reached** — batchlock within 1.25x of the fenced floor at N=100 in masters' CPU per lock+unlock: 3000 µs against",
		// Where the time goes, at the largest N with cost figures.
		"At N=100, per key locked and released",
		"| fenced floor | 5.0 / 20.0 | 2.6 / 10.0 |",
		"| batchlock | 9.0 / 30.0 | 4.0 / 12.0 |",
		"100 keys spread fall into about 100 of the 16384 slots",
		"| batchlock (pub/sub wake-up) | 3 | 1.00 | 1.00 | — |",
		"cd bench && go run ./cmd/benchreport",
		"![median latency against N, log-log](bench-latency.svg)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
	// No raw-figure row for a library not run.
	if strings.Contains(md, "| redsync sequential | 10000 |") {
		t.Error("raw figures list a library not run at N=10000")
	}
}

func TestLatencyPlotLegendIsShort(t *testing.T) {
	names := map[string]bool{}
	for _, s := range sampleReport(4 * time.Millisecond).LatencyPlot().Series {
		names[s.Name] = true
		if len(s.Name) > 28 {
			t.Errorf("legend %q too long for the plot", s.Name)
		}
	}
	for _, want := range []string{"batchlock", "floor", "fenced floor", "batchlock, one slot", "floor, one slot", "fenced floor, one slot"} {
		if !names[want] {
			t.Errorf("no series %q in %v", want, names)
		}
	}
}
