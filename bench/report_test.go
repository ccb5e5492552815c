package bench

import (
	"strings"
	"testing"
	"time"
)

// fixedSamples repeats d, so that its median and p99 are d.
func fixedSamples(d time.Duration) []time.Duration { return []time.Duration{d, d, d} }

func sampleReport(bl100 time.Duration) Report {
	ms := time.Millisecond
	r := Report{Command: "cd bench && go run ./cmd/benchreport"}
	for lib, perKey := range map[string]time.Duration{NameRedsyncSeq: ms, NameRedislockSeq: ms, NameRedsyncPar: ms / 5, NameRedislockPar: ms / 5} {
		for _, n := range []int{1, 100} {
			r.Latency = append(r.Latency, LatencyResult{Library: lib, Keys: n, Samples: fixedSamples(time.Duration(n) * perKey)})
		}
	}
	r.Latency = append(r.Latency,
		LatencyResult{Library: NameBatchlock, Keys: 1, Samples: fixedSamples(ms / 2)},
		LatencyResult{Library: NameBatchlock, Keys: 100, Samples: fixedSamples(bl100)})
	r.Handoff = []HandoffResult{
		{Library: NameBatchlock, Samples: fixedSamples(ms)},
		{Library: NameRedsyncSeq, Samples: fixedSamples(100 * ms)},
	}
	r.Orders = []OrderResult{
		{Library: NameBatchlock, Workers: contentionWorkers, Orders: 6000, Elapsed: time.Second, LockWait: Summary{P99: 12 * ms}},
		{Library: NameCeiling, Workers: contentionWorkers, Orders: 8000, Elapsed: time.Second, LockWait: Summary{P99: 10 * ms}},
		{Library: NameRedsyncSeq, Workers: contentionWorkers, Orders: 1000, Elapsed: time.Second},
	}
	return r
}

func TestTargets(t *testing.T) {
	// 100 keys in 4 ms: 25x faster than 100 ms sequential, and faster than
	// 20 ms in parallel; 1000 keys are not measured, so that target fails.
	got := map[string]bool{}
	for _, tg := range sampleReport(4 * time.Millisecond).Targets() {
		got[strings.Fields(tg.Goal)[0]] = tg.Reached
	}
	want := map[string]bool{"100": true, "1000": false, "hand-off": true, "contention,": true}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("target %q reached = %v, want %v", k, got[k], v)
		}
	}
	// 6 ms is only 16.7x faster than sequential peers.
	if tg := sampleReport(6 * time.Millisecond).Targets()[0]; tg.Reached {
		t.Errorf("%+v: reached at 16.7x", tg)
	}
}

func TestMarkdownHasRatiosAndCommand(t *testing.T) {
	md := sampleReport(4 * time.Millisecond).Markdown("bench-latency.svg")
	for _, want := range []string{
		"| redsync sequential | 1.00 ms (2.0x slower) | 100 ms (25.0x slower) |",
		"| batchlock (pub/sub wake-up) | 3 | 1.00 | 1.00 | — |",
		"cd bench && go run ./cmd/benchreport",
		"![median latency against N, log-log](bench-latency.svg)",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report lacks %q:\n%s", want, md)
		}
	}
}
