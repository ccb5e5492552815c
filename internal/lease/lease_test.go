package lease

import (
	"testing"
	"time"
)

func TestEnough(t *testing.T) {
	for _, tc := range []struct {
		left, lease time.Duration
		want        bool
	}{
		{100 * time.Millisecond, 100 * time.Millisecond, true},
		{50 * time.Millisecond, 100 * time.Millisecond, true},
		{49 * time.Millisecond, 100 * time.Millisecond, false},
		{0, 100 * time.Millisecond, false},
		{-time.Second, time.Hour, false},
		{time.Nanosecond, time.Nanosecond, true},
	} {
		if got := Enough(tc.left, tc.lease); got != tc.want {
			t.Errorf("Enough(%v, %v) = %v, want %v", tc.left, tc.lease, got, tc.want)
		}
	}
}

func TestKept(t *testing.T) {
	for _, tc := range []struct {
		left, lease time.Duration
		renewed     bool
		want        bool
	}{
		{50 * time.Millisecond, 100 * time.Millisecond, true, true},
		{49 * time.Millisecond, 100 * time.Millisecond, true, false},
		{90 * time.Millisecond, 100 * time.Millisecond, false, true},
		{89 * time.Millisecond, 100 * time.Millisecond, false, false},
		{0, 100 * time.Millisecond, false, false},
	} {
		if got := Kept(tc.left, tc.lease, tc.renewed); got != tc.want {
			t.Errorf("Kept(%v, %v, renewed %v) = %v, want %v", tc.left, tc.lease, tc.renewed, got, tc.want)
		}
	}
}

func TestMillisRoundsUp(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want int64
	}{
		{time.Millisecond, 1},
		{1500 * time.Microsecond, 2},
		{time.Nanosecond, 1},
		{time.Hour, 3_600_000},
		{0, 0},
	} {
		if got := Millis(tc.d); got != tc.want {
			t.Errorf("Millis(%v) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

// The watchdog's rhythm holds together for any lease: a lock handed out with
// what Enough asks for is renewed before it would count as lost, a round
// looks no further ahead than a renewal period, and an unconfirmed renewal
// is tried again before the loss margin runs out.
func TestRenewalRhythm(t *testing.T) {
	for _, l := range []time.Duration{3 * time.Millisecond, time.Second, 30 * time.Second, time.Hour} {
		if RenewalPeriod(l)+LossMargin(l) > l/2 {
			t.Errorf("lease %v: renewal at %v plus loss margin %v is past the half Enough leaves", l, RenewalPeriod(l), LossMargin(l))
		}
		if RoundHorizon(l) >= RenewalPeriod(l) {
			t.Errorf("lease %v: a round looks %v ahead, past a renewal period %v", l, RoundHorizon(l), RenewalPeriod(l))
		}
		if RetryAfter(l) >= LossMargin(l) {
			t.Errorf("lease %v: retry after %v, not within the loss margin %v", l, RetryAfter(l), LossMargin(l))
		}
	}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		ttl time.Duration
		ok  bool
	}{
		{-time.Second, false}, {0, false}, {time.Microsecond, false}, {time.Millisecond, true}, {time.Minute, true},
	} {
		if err := Check(tc.ttl); (err == nil) != tc.ok {
			t.Errorf("Check(%v) = %v, want ok %v", tc.ttl, err, tc.ok)
		}
	}
}
