package redlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/batchlock/batchlock/batchlock"
)

func TestQuorum(t *testing.T) {
	for n, want := range map[int]int{1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 4} {
		assert.Equal(t, want, quorum(n), "n=%d", n)
	}
}

func TestValidity(t *testing.T) {
	t0 := time.Now()
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	const d = time.Millisecond
	for _, tc := range []struct {
		name  string
		now   time.Time
		until []time.Time
		n     int
		drift float64
		want  time.Duration
		lease time.Duration
	}{
		{"all granted: lease less time spent less lease*1%+2ms", ms(100), []time.Time{ms(1000), ms(1000), ms(1000), ms(1000), ms(1000)}, 5, 0.01, 888 * d, 1000 * d},
		{"no drift factor still allows 2ms", ms(100), []time.Time{ms(1000), ms(1000), ms(1000)}, 5, 0, 898 * d, 1000 * d},
		{"a bare majority lasts as long as its earliest lease", ms(0), []time.Time{ms(1000), ms(900), ms(950)}, 5, 0, 898 * d, 1000 * d},
		{"beyond a majority, the earliest leases do not count", ms(0), []time.Time{ms(200), ms(1000), ms(300), ms(1000), ms(1000)}, 5, 0, 998 * d, 1000 * d},
		{"the allowance errs on the long side: the latest lease bounds the lease", ms(0), []time.Time{ms(1000), ms(1000), ms(2000)}, 3, 0.01, 978 * d, 2000 * d},
		{"a minority has none", ms(0), []time.Time{ms(1000), ms(1000)}, 5, 0.01, 0, 0},
		{"an even number needs more than half", ms(0), []time.Time{ms(1000), ms(1000)}, 4, 0.01, 0, 0},
		{"one deployment", ms(10), []time.Time{ms(100)}, 1, 0.1, 78 * d, 100 * d},
		{"time spent beyond the lease leaves it negative", ms(1500), []time.Time{ms(1000), ms(1000), ms(1000)}, 3, 0.01, -512 * d, 1000 * d},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, lease := validity(t0, tc.now, tc.until, tc.n, tc.drift)
			assert.Equal(t, tc.want, v, "validity")
			assert.Equal(t, tc.lease, lease, "longest lease")
		})
	}
}

func TestNotObtainedExplainsTheRefusal(t *testing.T) {
	timeout := context.DeadlineExceeded
	err := notObtained(1, []error{
		nil,
		&batchlock.ConflictError{Keys: []string{"b", "a"}},
		fmt.Errorf("wrapped: %w", &batchlock.ConflictError{Keys: []string{"c", "b"}}),
		timeout,
		timeout,
	})
	require.ErrorIs(t, err, batchlock.ErrNotObtained)
	require.ErrorIs(t, err, timeout)
	var conflict *batchlock.ConflictError
	require.ErrorAs(t, err, &conflict)
	assert.Equal(t, []string{"a", "b", "c"}, conflict.Keys, "the union of every deployment's conflicts")
	assert.Contains(t, err.Error(), "redlock: granted by 1 of 5 deployments, 3 needed")
	assert.Contains(t, err.Error(), "deployment 3: context deadline exceeded")

	err = notObtained(0, []error{timeout, errors.New("connection refused"), timeout})
	require.ErrorIs(t, err, batchlock.ErrNotObtained)
	assert.False(t, errors.As(err, &conflict), "no conflict was the reason")
	assert.Contains(t, err.Error(), "deployment 1: connection refused")
}
