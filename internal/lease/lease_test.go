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
