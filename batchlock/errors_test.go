package batchlock

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOnePrefix(t *testing.T) {
	conflict := &ConflictError{Keys: []string{"a"}}
	callers := errors.New("saving the order")
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"nil", nil, ""},
		{"a sentinel", ErrNotHeld, "batchlock: not held"},
		{"two sentinels", fmt.Errorf("%w: %w", ErrNotObtained, ErrNoReplicas), "batchlock: not obtained: not acknowledged by enough replicas"},
		{"a step around a sentinel", fmt.Errorf("batchlock: unlock: %w", fmt.Errorf("batchlock: release: %w", ErrNotHeld)), "batchlock: unlock: release: not held"},
		{"a caller's error around ours", fmt.Errorf("%w: %w", callers, fmt.Errorf("%w: %w", ErrLockLost, ErrMaxHold)), "saving the order: batchlock: lock lost: batchlock: held for its longest hold"},
		{"the prefix inside a key", fmt.Errorf("%w: %w", &ConflictError{Keys: []string{"batchlock: a"}}, ErrClosed), "batchlock: not obtained: held by another owner: \"batchlock: a\": client closed"},
		{"a conflict that waited", fmt.Errorf("%w: %w", conflict, ErrClosed), "batchlock: not obtained: held by another owner: \"a\": client closed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := onePrefix(tc.err)
			if tc.err == nil {
				require.NoError(t, got)
				return
			}
			assert.Equal(t, tc.want, got.Error())
			assert.ErrorIs(t, got, tc.err, "what it wraps stays visible")
		})
	}
	var c *ConflictError
	assert.ErrorAs(t, onePrefix(fmt.Errorf("%w: %w", conflict, ErrClosed)), &c)
}

// An error through the public API says "batchlock:" once, at its start,
// and still matches each sentinel it wraps: here an Unlock after the lock
// ended at its longest hold (ErrNotHeld, ErrLockLost, ErrMaxHold) and the
// lock's own cause.
func TestErrorsSayBatchlockOnce(t *testing.T) {
	c, _ := newFaked(t)
	ctx := t.Context()
	l, err := c.Lock(ctx, []string{"a"}, WithMaxHold(5*time.Millisecond))
	require.NoError(t, err)
	<-l.Done()
	for _, err := range []error{l.Err(), l.Unlock(ctx)} {
		require.Error(t, err)
		assert.Equal(t, 1, strings.Count(err.Error(), errPrefix), err.Error())
		assert.True(t, strings.HasPrefix(err.Error(), errPrefix), err.Error())
		assert.ErrorIs(t, err, ErrLockLost)
		assert.ErrorIs(t, err, ErrMaxHold)
	}
	assert.ErrorIs(t, l.Unlock(ctx), ErrNotHeld)
}

// A conflict's message names the first keys and, where known, who holds
// them, as an operator reads it in a log.
func TestConflictMessageNamesTheHolders(t *testing.T) {
	for _, tc := range []struct {
		name    string
		keys    []string
		holders map[string][]string
		want    string
	}{
		{"one holder", []string{"sku:7"}, map[string][]string{"sku:7": {"web-3:4711:9f2c"}},
			`batchlock: not obtained: held by another owner: "sku:7" (by web-3:4711:9f2c)`},
		{"holder unknown (handed to a waiter)", []string{"sku:7", "sku:8"}, map[string][]string{"sku:8": {"b"}},
			`batchlock: not obtained: held by another owner: "sku:7", "sku:8" (by b)`},
		{"many readers", []string{"promo"}, map[string][]string{"promo": {"a", "b", "c", "d", "e"}},
			`batchlock: not obtained: held by another owner: "promo" (by a, b, c and 2 more)`},
		{"many keys", []string{"1", "2", "3", "4", "5", "6", "7"}, nil,
			`batchlock: not obtained: held by another owner: "1", "2", "3", "4", "5" and 2 more`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, (&ConflictError{Keys: tc.keys, Holders: tc.holders}).Error())
		})
	}
}
