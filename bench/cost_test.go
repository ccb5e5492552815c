package bench

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_evalsha:calls=2000,usec=65519,usec_per_call=32.76,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_config|resetstat:calls=1,usec=58,usec_per_call=58.00,rejected_calls=0,failed_calls=0\r\n" +
		"used_cpu_sys:1.5\r\n"
	got := ParseCommandStats(info)
	want := map[string]CommandStat{"evalsha": {2000, 65519}, "config|resetstat": {1, 58}}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %+v, want %+v", k, got[k], v)
		}
	}
}

func TestCostPerKey(t *testing.T) {
	c := CostResult{Keys: 100, Iterations: 10, Calls: 2000, Usec: 40000, CPU: 60 * time.Millisecond}
	usec, cpu := c.PerKey()
	if usec != 40 || cpu != 60 || c.CallsPerLock() != 200 {
		t.Errorf("per key: %v µs, %v µs CPU; %v calls per lock", usec, cpu, c.CallsPerLock())
	}
}

func TestCostPerLock(t *testing.T) {
	c := CostResult{Keys: 100, Iterations: 10, Calls: 2000, Usec: 40000, CPU: 60 * time.Millisecond}
	usec, cpu := c.PerLock()
	if usec != 4000 || cpu != 6000 {
		t.Errorf("per lock: %v µs, %v µs CPU", usec, cpu)
	}
}

func TestPlansCoverTheSizes(t *testing.T) {
	want := []int{1, 10, 100, 1000, 10000}
	var latency, cost []int
	for _, p := range DefaultLatencyPlans {
		latency = append(latency, p.Keys)
		if p.Keys < 10000 && len(p.Skip) > 0 {
			t.Errorf("latency at %d keys skips %v", p.Keys, p.Skip)
		}
	}
	for _, p := range DefaultCostPlans {
		cost = append(cost, p.Keys)
		if p.Keys < 10000 && len(p.Skip) > 0 {
			t.Errorf("cost at %d keys skips %v", p.Keys, p.Skip)
		}
	}
	if fmt.Sprint(latency) != fmt.Sprint(want) || fmt.Sprint(cost) != fmt.Sprint(want) {
		t.Errorf("latency sizes %v, cost sizes %v, want %v", latency, cost, want)
	}
	for _, n := range TargetSizes {
		if !slices.Contains(want, n) {
			t.Errorf("target at %d keys, not measured", n)
		}
	}
}
