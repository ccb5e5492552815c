package bench

import (
	"testing"
	"time"
)

func TestPercentileNearestRank(t *testing.T) {
	ms := func(n ...int) []time.Duration {
		out := make([]time.Duration, len(n))
		for i, v := range n {
			out[i] = time.Duration(v) * time.Millisecond
		}
		return out
	}
	sorted := ms(1, 2, 3, 4, 5, 6, 7, 8, 9, 10)
	for _, c := range []struct {
		p    float64
		want time.Duration
	}{
		{50, 5 * time.Millisecond},
		{99, 10 * time.Millisecond}, // few samples: p99 is the maximum
		{100, 10 * time.Millisecond},
		{10, 1 * time.Millisecond},
		{1, 1 * time.Millisecond},
	} {
		if got := Percentile(sorted, c.p); got != c.want {
			t.Errorf("Percentile(%v) = %v, want %v", c.p, got, c.want)
		}
	}
	if got := Percentile(nil, 50); got != 0 {
		t.Errorf("Percentile of nothing = %v, want 0", got)
	}
	s := Summarize(ms(9, 1, 5))
	if s.Samples != 3 || s.Median != 5*time.Millisecond || s.P99 != 9*time.Millisecond {
		t.Errorf("Summarize = %+v", s)
	}
}

func TestRatio(t *testing.T) {
	for _, c := range []struct {
		v, base time.Duration
		want    string
	}{
		{234 * time.Millisecond, 10 * time.Millisecond, "23.4x slower"},
		{16 * time.Millisecond, 10 * time.Millisecond, "1.6x slower"},
		{10 * time.Millisecond, 16 * time.Millisecond, "1.6x faster"},
		{4120 * time.Millisecond, 10 * time.Millisecond, "412x slower"},
		{1030 * time.Microsecond, time.Millisecond, "same"},
		{0, time.Millisecond, "n/a"},
	} {
		if got := Ratio(c.v, c.base); got != c.want {
			t.Errorf("Ratio(%v, %v) = %q, want %q", c.v, c.base, got, c.want)
		}
	}
}

func TestMillis(t *testing.T) {
	for d, want := range map[time.Duration]string{
		450 * time.Microsecond:   "0.45",
		55300 * time.Microsecond: "55.3",
		1234 * time.Millisecond:  "1234",
	} {
		if got := Millis(d); got != want {
			t.Errorf("Millis(%v) = %q, want %q", d, got, want)
		}
	}
}
