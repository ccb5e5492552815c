package bench

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Summary is what the report keeps of a set of samples.
type Summary struct {
	Samples int
	Median  time.Duration
	P99     time.Duration
	Max     time.Duration
}

// Summarize sorts a copy of samples and takes its median and 99th percentile.
func Summarize(samples []time.Duration) Summary {
	s := slices.Clone(samples)
	slices.Sort(s)
	return Summary{Samples: len(s), Median: Percentile(s, 50), P99: Percentile(s, 99), Max: Percentile(s, 100)}
}

// Percentile returns the p-th percentile (0 < p <= 100) of sorted samples by
// the nearest-rank method: always a sample that was observed, never an
// interpolation, so a p99 of few samples is plainly their maximum.
func Percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	return sorted[min(max(rank, 1), len(sorted))-1]
}

// Ratio says how v compares with base, the batchlock figure, for a reader:
// "23.4x slower", "1.6x faster", or "same" within 5%.
func Ratio(v, base time.Duration) string {
	if v <= 0 || base <= 0 {
		return "n/a"
	}
	r := float64(v) / float64(base)
	switch {
	case r >= 0.95 && r <= 1.05:
		return "same"
	case r > 1:
		return formatTimes(r) + " slower"
	default:
		return formatTimes(1/r) + " faster"
	}
}

// formatTimes keeps three significant figures at most: 1.6x, 23.4x, 412x.
func formatTimes(r float64) string {
	if r >= 100 {
		return fmt.Sprintf("%.0fx", r)
	}
	return fmt.Sprintf("%.1fx", r)
}

// Millis formats d in milliseconds with precision that suits its size.
func Millis(d time.Duration) string {
	ms := float64(d) / float64(time.Millisecond)
	switch {
	case ms >= 100:
		return fmt.Sprintf("%.0f", ms)
	case ms >= 10:
		return fmt.Sprintf("%.1f", ms)
	default:
		return fmt.Sprintf("%.2f", ms)
	}
}
